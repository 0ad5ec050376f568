"""Every value decode lets through can be stored: a value past what the store or a figure derived from it can hold
rejects its span alone at decode (named in partial_success), never a whole request at the writer."""

from __future__ import annotations

import pytest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_ingest.decode.limits import LATEST_OFFSET_US, LATEST_START_NS
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.ingest.decode.test_decode_request import as_bytes
from tests.support import T0, any_value, event_span, plain_stream_span, trace_request

FAR = 2**62


def _with(span, key: str, value) -> object:
    """``span`` with attribute ``key`` set to ``value`` (replaced when present)."""
    kept = [kv for kv in span.attributes if kv.key != key]
    del span.attributes[:]
    span.attributes.extend([*kept, KeyValue(key=key, value=any_value(value))])
    return span


def _far_events():
    span = event_span(2, [])
    for offset_us in (0, FAR // 1000, FAR // 1000 + 1):
        event = span.events.add(name=sc.CHUNK_EVENT, time_unix_nano=T0 + offset_us * 1000)
        event.attributes.append(KeyValue(key=sc.STREAMSCOPE_CHUNK_TOKENS, value=AnyValue(int_value=1)))
    span.end_time_unix_nano = T0 + FAR
    return span


BAD_SPANS = {
    "chunk offsets as int values": lambda: plain_stream_span(2, [0, FAR, FAR + 1]),
    "chunk offsets as bytes": lambda: as_bytes(plain_stream_span(2, [0, FAR, FAR + 1])),
    "a chunk offset just past the latest": lambda: plain_stream_span(2, [0, LATEST_OFFSET_US + 1]),
    "chunk events": _far_events,
    "the first byte's offset": lambda: _with(plain_stream_span(2, [0, 1]), sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US, FAR),
    "the cancel offset": lambda: _with(plain_stream_span(2, [0, 1]), sc.STREAMSCOPE_CANCEL_OFFSET_US, FAR),
}


@pytest.mark.parametrize("bad", BAD_SPANS.values(), ids=BAD_SPANS.keys())
def test_an_offset_past_the_latest_rejects_its_span_only_and_the_rest_is_stored(bad, store_client):
    good = plain_stream_span(1, [0, 10, 20])
    batch = decode_traces(trace_request([good, bad()]), tenant="t")
    assert [r.subject for r in batch.rejected] == [f"span {'02' * 8} of trace {'02' * 16}"]
    assert str(LATEST_OFFSET_US) in batch.rejected[0].reason or "offset" in batch.rejected[0].reason
    ClickHouseWriter(store_client).write([batch], "t")
    assert store_client.query("SELECT span_id FROM streams").result_rows == [("01" * 8,)]
    assert store_client.query("SELECT count() FROM chunks").result_rows == [(3,)]


def test_an_offset_at_the_latest_is_stored():
    span = plain_stream_span(1, [0, LATEST_OFFSET_US])
    batch = decode_traces(trace_request([span]), tenant="t")
    assert not batch.rejected
    assert batch.blocks["streams"]["gap_max_us"].to_pylist() == [2**32 - 1]  # a gap past UInt32 reads as its most


@pytest.mark.parametrize(("ttft_s", "stored"), [(2.5, 2_500_000), (1e12, None)])
def test_a_time_to_first_token_another_source_measured_past_a_stream_is_stored_unknown(ttft_s, stored, store_client):
    span = Span(
        trace_id=bytes([3]) * 16,
        span_id=bytes([3]) * 8,
        name="llm_request",
        kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 10**9,
        attributes=[KeyValue(key="gen_ai.latency.time_to_first_token", value=any_value(ttft_s))],
    )
    batch = decode_traces(trace_request([span], scope="vllm.tracing.otel"), tenant="t")
    assert not batch.rejected
    ClickHouseWriter(store_client).write([batch], "t")
    assert store_client.query("SELECT ttft_us FROM streams").result_rows == [(stored,)]


def test_a_span_starting_past_the_times_the_store_holds_is_rejected_alone():
    late = plain_stream_span(2, [0, 1])
    late.start_time_unix_nano, late.end_time_unix_nano = LATEST_START_NS + 1, LATEST_START_NS + 10**9
    last = plain_stream_span(1, [0, LATEST_OFFSET_US])
    last.start_time_unix_nano, last.end_time_unix_nano = LATEST_START_NS, LATEST_START_NS + 10**9
    batch = decode_traces(trace_request([last, late]), tenant="t")
    assert [r.subject for r in batch.rejected] == [f"span {'02' * 8} of trace {'02' * 16}"]
    assert batch.blocks["streams"]["span_id"].to_pylist() == ["01" * 8]
