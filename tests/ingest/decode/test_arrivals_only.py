"""A source that stamps each chunk's arrival but not what it carried (OpenLLMetry): OpenAI-compatible servers send
a role-only chunk before prefill ends, so the first arrival is the first byte, never taken for the first token,
and the prefill wait after it is no gap between tokens."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope_dashboards.fleet import summarize
from streamscope_dashboards.macros import QueryContext
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import sql
from tests.support import T0, store_spans, stream_span, trace_request

ROLE_US, PREFILL_US, STEP_US = 8_000, 2_200_000, 20_000


OPENLLMETRY_SCOPE = "opentelemetry.instrumentation.openai.v1"


def openllmetry_span(arrivals_us: list[int]) -> Span:
    """An ``openai.chat`` span as opentelemetry-instrumentation-openai 0.62.4 sends a streamed call: one
    ``gen_ai.content.completion.chunk`` event per chunk, stamped on arrival, with no size."""
    span = Span(
        trace_id=b"\x07" * 16,
        span_id=b"\x07" * 8,
        name="openai.chat",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + (arrivals_us[-1] + 1_000) * 1000,
        attributes=[
            KeyValue(key="gen_ai.is_streaming", value=AnyValue(bool_value=True)),
            KeyValue(key="gen_ai.system", value=AnyValue(string_value="openai")),
        ],
    )
    for offset_us in arrivals_us:
        span.events.add(name="gen_ai.content.completion.chunk", time_unix_nano=T0 + offset_us * 1000)
    return span


def test_the_first_arrival_is_the_first_byte_and_the_prefill_wait_no_stall():
    tokens_at = [ROLE_US + PREFILL_US + k * STEP_US for k in range(10)]
    batch = decode_traces(
        trace_request([openllmetry_span([ROLE_US, *tokens_at])], scope=OPENLLMETRY_SCOPE),
        tenant="t",
    )
    (row,) = batch.blocks["streams"].to_pylist()
    assert row["source"] == "openllmetry" and row["coverage"] == "arrivals"
    assert row["ttfb_us"] == ROLE_US
    assert row["ttft_us"] is None  # which arrival carried the first token is unknown: never the role chunk's time
    assert row["stall_count"] == 0
    assert row["gap_max_us"] == STEP_US  # the gaps between tokens only, the prefill wait not among them
    assert row["content_chunks"] == len(tokens_at)


def test_arrivals_whose_oldest_were_dropped_are_neither_sized_nor_whole(store_client):
    """The OpenTelemetry SDK keeps a span's last 128 events: a longer OpenLLMetry stream arrives with its first
    chunks gone. Its chunks' sizes are still unknown, so it stays out of tokens per chunk (its chunks would count
    as carrying 0 tokens), and its gaps out of the per-stream figures (its head is gone)."""
    span = openllmetry_span([ROLE_US + PREFILL_US + k * STEP_US for k in range(128)])
    span.dropped_events_count = 72  # 200 chunks, the oldest 72 dropped
    sdk_stream = stream_span(8, 8, side="client", offsets_ms=[100, 120, 140], tokens=[2, 2, 2], start_ns=T0 + 1)
    batch = decode_traces(trace_request([span], scope=OPENLLMETRY_SCOPE), tenant="t")
    (row,) = batch.blocks["streams"].to_pylist()
    assert row["coverage"] == "arrivals_partial" and row["timeline_truncated"]
    assert row["ttfb_us"] is None and row["ttft_us"] is None  # the first chunks are gone
    store_spans(store_client, [span], service="openllmetry-app", scope=OPENLLMETRY_SCOPE)
    store_spans(store_client, [sdk_stream])
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(store_client, q))  # noqa: E731
    both = summarize(run, ctx, slo_us=400_000)
    assert both.tokens_per_chunk == 2.0  # the SDK stream's alone
    assert both.incomplete_streams == 1  # out of goodput and per-stream p99
    alone = summarize(run, ctx, slo_us=400_000, variables={"service": ["openllmetry-app"]})
    assert alone.streams == 1 and alone.tokens_per_chunk is None and alone.itl_goodput is None
