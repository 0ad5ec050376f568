"""Known answers for what one request's spans share when decoded together: arrays some spans send and others do
not, and stream values taken from the span or from its chunks."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from streamscope import semconv as sc
from streamscope_ingest.decode import columns
from streamscope_ingest.decode.traces import decode_traces
from tests.support import T0, stream_span, trace_request


def _decoded(*spans):
    batch = decode_traces(trace_request(spans), tenant="t", stall_threshold_us=400_000)
    assert not batch.rejected, batch.rejection_message("span")
    arrays = batch.blocks["chunk_arrays"]
    per_chunk = [field.name for field in columns.CHUNKS if pa.types.is_list(field.type)]
    return batch.blocks["streams"].to_pydict(), {name: pc.list_flatten(arrays[name]).to_pylist() for name in per_chunk}


def test_a_browser_array_one_span_sends_stays_with_its_chunks_and_the_others_read_zero():
    streams, chunks = _decoded(
        stream_span(1, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1]),
        stream_span(2, 2, side="browser", offsets_ms=[5, 6, 7], tokens=[1, 2, 3], paint_delay_us=[11, 12, 13]),
        stream_span(3, 3, side="server", offsets_ms=[1], tokens=[4], render_us=[99]),
    )
    assert chunks["paint_delay_us"] == [0, 0, 11, 12, 13, 0]
    assert chunks["render_us"] == [0, 0, 0, 0, 0, 99]
    assert chunks["tokens"] == [1, 1, 1, 2, 3, 4]
    assert streams["tokens"] == [2, 6, 4]


def test_the_first_byte_is_the_spans_own_offset_when_sent_else_its_first_chunk():
    streams, _ = _decoded(
        stream_span(1, 1, side="client", offsets_ms=[30, 40], tokens=[1, 1]),
        stream_span(
            2, 2, side="client", offsets_ms=[50, 60], tokens=[1, 1], attributes={sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US: 7}
        ),
        stream_span(3, 3, side="client", offsets_ms=[], tokens=[]),
    )
    assert streams["ttfb_us"] == [30_000, 7, None]


DAY_NS = 86_400 * 10**9


def test_spans_starting_more_days_apart_than_a_request_may_span_are_rejected_and_the_most_kept():
    """Each day is a partition; an insert touching more than the engine allows would be refused, and hold up the
    spool behind it. The days holding most of the request's spans are kept (the latest ones, on a tie)."""
    spread = [
        stream_span(100 + day, 1, side="browser", offsets_ms=[0], tokens=[1], start_ns=T0 - day * DAY_NS)
        for day in range(150)
    ]
    batch = decode_traces(trace_request(spread), tenant="t", stall_threshold_us=400_000)
    assert len(batch.rejected) == 143
    assert "a request may span 7 days" in batch.rejection_message("span")
    assert sorted(batch.blocks["streams"]["trace_id"].to_pylist()) == [f"{100 + day:032x}" for day in range(7)]

    stray = stream_span(1, 1, side="client", offsets_ms=[0], tokens=[1], start_ns=T0 - 200 * DAY_NS)
    usual = [stream_span(2 + i, 1, side="client", offsets_ms=[0], tokens=[1], start_ns=T0 + i) for i in range(3)]
    batch = decode_traces(trace_request([*usual, stray]), tenant="t", stall_threshold_us=400_000)
    assert [r.subject for r in batch.rejected] == [f"span {1:016x} of trace {1:032x}"]
    assert batch.blocks["streams"].num_rows == 3
