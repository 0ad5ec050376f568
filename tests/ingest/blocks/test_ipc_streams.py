"""Arrow IPC streams written straight to their file: each reads back as its block, after pieces of any length, in
the size counted for it beforehand; a spooled segment is the same bytes however it is written."""

from __future__ import annotations

import pyarrow as pa

from streamscope_ingest.blocks.ipc_streams import sized, write_pieces
from streamscope_ingest.durability.spool import Spool, encode
from tests.support import batch


def _block(rows: int, label: str) -> pa.Table:
    return pa.table({"id": pa.array(range(rows), pa.uint32()), "label": [label] * rows})


def test_streams_after_pieces_of_any_length_take_the_size_counted_and_read_back_as_their_blocks():
    blocks = [_block(rows, label) for rows, label in ((50_000, "large"), (3, "small"), (0, "empty"), (7, "odd"))]
    pieces: list = []
    for n, block in enumerate(blocks):
        pieces += [b"x" * n, sized(block)]  # streams starting 0, 1, 2 and 3 bytes past a multiple of eight
    sink = pa.BufferOutputStream()
    write_pieces(sink, pieces)
    written, at = sink.getvalue(), 0
    for n, block in enumerate(blocks):
        at += n
        size = sized(block).size
        assert pa.ipc.open_stream(written.slice(at, size)).read_all().equals(block)
        at += size
    assert at == written.size


def test_a_segment_in_the_spool_holds_the_bytes_of_its_encoding(tmp_path):
    batches = [batch(1, "a", chunks=40), batch(2, "b", chunks=1)]
    segment = Spool(tmp_path, max_bytes=1 << 30).append(batches)
    assert segment.path.read_bytes() == encode(batches) and segment.size == len(encode(batches))
