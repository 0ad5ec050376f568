"""Fuzzing both OTLP decoders for a fixed budget: any body either decodes or is refused as bad input.

Bodies are random bytes, and valid requests (protobuf and OTLP JSON) with bytes flipped, cut or repeated,
which reach much deeper into the parsers than noise does. The decoder behind them may reject spans, never raise.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from streamscope import semconv as sc
from streamscope.errors import DecodeError
from streamscope_collector.pipeline import TRACES
from streamscope_ingest.decode.traces import decode_traces
from tests.support import event_span, otlp_json, stream_span, trace_request

VALID = trace_request(
    [
        stream_span(1, 1, side="client", offsets_ms=[0, 5, 9], tokens=[1, 2, 1], attributes={"k": "v"}),
        stream_span(1, 2, side="server", offsets_ms=[0, 4], tokens=[1, 1], paint_delay_us=[1, 2]),
        event_span(3, [(0, sc.CHUNK_EVENT, {sc.STREAMSCOPE_CHUNK_TOKENS: AnyValue(int_value=2)}), (9, "log", {})]),
    ]
)
SEEDS = {"protobuf": VALID.SerializeToString(), "json": otlp_json(VALID)}
PARSERS = {
    "protobuf": lambda body: TRACES.parse(body, protobuf=True),
    "json": lambda body: TRACES.parse(body, protobuf=False),
}
BUDGET = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def mutated(draw, seed: bytes) -> bytes:
    body = bytearray(seed)
    for _ in range(draw(st.integers(1, 8))):
        at = draw(st.integers(0, max(len(body) - 1, 0)))
        action = draw(st.sampled_from(["flip", "cut", "repeat", "insert"]))
        if action == "flip" and body:
            body[at] = draw(st.integers(0, 255))
        elif action == "cut":
            del body[at : at + draw(st.integers(1, 16))]
        elif action == "repeat":
            body[at:at] = body[at : at + draw(st.integers(1, 64))]
        else:
            body[at:at] = draw(st.binary(min_size=1, max_size=8))
    return bytes(body)


def decodes_or_refuses(kind: str, body: bytes) -> None:
    try:
        request = PARSERS[kind](body)
    except DecodeError:
        return  # the collector's 400
    batch = decode_traces(request, tenant="t")
    assert batch.total_rows >= 0
    for rejection in batch.rejected:
        assert "internal error" not in rejection.reason, rejection


@BUDGET
@given(st.sampled_from(sorted(PARSERS)), st.binary(max_size=512))
def test_random_bytes(kind, body):
    decodes_or_refuses(kind, body)


@BUDGET
@given(st.data())
def test_mutated_protobuf(data):
    decodes_or_refuses("protobuf", data.draw(mutated(SEEDS["protobuf"])))


@BUDGET
@given(st.data())
def test_mutated_json(data):
    decodes_or_refuses("json", data.draw(mutated(SEEDS["json"])))


def test_the_seeds_decode():
    for kind, body in SEEDS.items():
        request = PARSERS[kind](body)
        assert decode_traces(request, tenant="t").rows("streams") == 3
