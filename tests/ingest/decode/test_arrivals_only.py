"""A source that stamps each chunk's arrival but not what it carried (OpenLLMetry): OpenAI-compatible servers send
a role-only chunk before prefill ends, so the first arrival is the first byte, never taken for the first token,
and the prefill wait after it is no gap between tokens."""

from __future__ import annotations

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope_ingest.decode.traces import decode_traces
from tests.support import T0, trace_request

ROLE_US, PREFILL_US, STEP_US = 8_000, 2_200_000, 20_000


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
        trace_request([openllmetry_span([ROLE_US, *tokens_at])], scope="opentelemetry.instrumentation.openai.v1"),
        tenant="t",
    )
    (row,) = batch.blocks["streams"].to_pylist()
    assert row["source"] == "openllmetry" and row["coverage"] == "arrivals"
    assert row["ttfb_us"] == ROLE_US
    assert row["ttft_us"] is None  # which arrival carried the first token is unknown: never the role chunk's time
    assert row["stall_count"] == 0
    assert row["gap_max_us"] == STEP_US  # the gaps between tokens only, the prefill wait not among them
    assert row["content_chunks"] == len(tokens_at)
