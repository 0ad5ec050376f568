"""Arrow IPC streams written straight to the file they go to, with the size of each known before it is written.

A stream first written to memory (``pa.BufferOutputStream``) and then to its file takes fresh memory each time,
which the kernel zeroes page by page as it is first touched, grown by copies as it is written, and copied once more
into the file. The spool and the writer write every block they spool or insert, tens of megabytes a second, so they
write to the file itself, through Arrow (off the interpreter's lock), and count a stream's size beforehand where a
header must say it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class SizedStream:
    """A block, to be written as an Arrow IPC stream of ``size`` bytes."""

    block: pa.Table
    size: int


def sized(block: pa.Table) -> SizedStream:
    """``block`` with the size of its IPC stream, counted without writing it."""
    counter = pa.MockOutputStream()
    write_stream(counter, block)
    return SizedStream(block, counter.size())


def size_of(pieces: Sequence[bytes | SizedStream]) -> int:
    return sum(piece.size if isinstance(piece, SizedStream) else len(piece) for piece in pieces)


def write_stream(sink: pa.NativeFile, block: pa.Table) -> None:
    """``block`` as an Arrow IPC stream, at ``sink``'s position."""
    with pa.ipc.new_stream(sink, block.schema) as writer:
        writer.write_table(block)


def write_pieces(sink: pa.NativeFile, pieces: Sequence[bytes | SizedStream]) -> None:
    """The pieces one after another: bytes as they are, blocks as IPC streams of the size counted for them."""
    for piece in pieces:
        if not isinstance(piece, SizedStream):
            sink.write(piece)
            continue
        start = sink.tell()
        write_stream(sink, piece.block)
        if (written := sink.tell() - start) != piece.size:
            raise AssertionError(f"a stream of {written} bytes where {piece.size} were counted")
