"""Acknowledged means stored once, under its own tenant: generated requests, through a running collector.

Each example sends a few requests from two tenants. Their spans are good by construction (values at every boundary
the store holds, attributes of every OTLP value kind, timelines of any length, packed arrays in either form) or bad
in one known way (a value one past what is stored, arrays of unequal length, a broken id or clock, …); ids come
from a small pool, so spans collide across tenants and repeat across requests. The invariant: every good span is
stored exactly once, with all its chunks, under the tenant that sent it; every bad one is named in its request's
partial_success and stored nowhere. ``STREAMSCOPE_FUZZ_EXAMPLES`` sets how many examples run (CI runs a few).
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope.int64_bytes import int64_bytes
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.decode.limits import LATEST_OFFSET_US, LATEST_START_NS
from tests.support import T0, post, sql_request, trace_request

TOKENS = {"secret-a": "team-a", "secret-b": "team-b"}
I64, U16, U32 = 2**63 - 1, 2**16 - 1, 2**32 - 1


@pytest.fixture(scope="module")
def collector(chdb_dir, chdb_admin, migrated_schema):
    """A collector with two tenants on a database of its own, for every example of the module."""
    database = f"fuzz_{uuid.uuid4().hex[:12]}"
    dsn = f"chdb://{chdb_dir}?database={database}"
    migrated_schema.copy_to(chdb_admin, database)
    config = CollectorConfig(
        storage_dsn=dsn, http_port=0, grpc_port=0, attribution_interval_s=None, tokens=TOKENS, store_wait_s=5.0
    )
    running = Collector(config).start()
    yield running
    running.stop()


def boundary(low: int, high: int) -> st.SearchStrategy[int]:
    """Integers in low..high, the ends and their neighbours most often."""
    edges = sorted({v for v in (low, low + 1, high - 1, high) if low <= v <= high})
    return st.sampled_from(edges) | st.integers(low, high)


any_value = st.deferred(
    lambda: st.one_of(
        st.builds(AnyValue),
        st.text(max_size=20).map(lambda v: AnyValue(string_value=v)),
        st.booleans().map(lambda v: AnyValue(bool_value=v)),
        boundary(-(2**63), I64).map(lambda v: AnyValue(int_value=v)),
        st.floats(allow_nan=True, allow_infinity=True).map(lambda v: AnyValue(double_value=v)),
        st.binary(max_size=16).map(lambda v: AnyValue(bytes_value=v)),
        st.lists(any_value, max_size=3).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs))),
        st.lists(st.tuples(st.text(max_size=5), any_value), max_size=3).map(
            lambda kvs: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs]))
        ),
    )
)

chunk = st.tuples(boundary(0, 1_000_000), boundary(0, U16), boundary(0, U32), boundary(0, U32))
"""A chunk: the gap before it (µs), its tokens, content bytes and wire bytes."""

BAD = {  # how a span is made bad, each in one way decode must refuse
    "offset negative": ("offset", -1),
    "offset past the latest": ("offset", LATEST_OFFSET_US + 1),
    "offset at the int64 end": ("offset", I64),
    "offset at the int64 start": ("offset", -(2**63)),
    "tokens past UInt16": ("tokens", U16 + 1),
    "tokens negative": ("tokens", -1),
    "content past UInt32": ("content", U32 + 1),
    "wire past UInt32": ("wire", U32 + 1),
    "wire at the int64 end": ("wire", I64),
    "arrays of unequal length": ("short", None),
    "offsets out of order": ("backwards", None),
    "unknown side": ("side", "nonsense"),
    "short trace id": ("trace_id", bytes(15)),
    "zero span id": ("span_id", bytes(8)),
    "ends before it starts": ("ends_early", None),
    "starts past the store's times": ("start", LATEST_START_NS + 1),
    "offsets as a string": ("offsets_text", None),
}


@dataclass
class Sent:
    span: Span
    tenant: str
    good: bool
    chunks: int


@st.composite
def spans(draw, prefix: bytes, tenant: str) -> Sent:
    trace = prefix + bytes([draw(st.integers(0, 2))]) * 8
    span_id = bytes([draw(st.integers(1, 3))]) * 8
    timeline = draw(st.lists(chunk, max_size=8))
    offsets, at = [], 0
    for gap, *_ in timeline:
        at += gap
        offsets.append(at)
    if timeline and draw(st.booleans()):
        offsets[-1] = LATEST_OFFSET_US  # the latest a chunk may come
    arrays = {
        "offset": offsets,
        "tokens": [c[1] for c in timeline],
        "content": [c[2] for c in timeline],
        "wire": [c[3] for c in timeline] if draw(st.booleans()) else None,
    }
    bad = draw(st.none() | st.sampled_from(sorted(BAD)))
    start, end, side = T0, T0 + 10**9, "client"
    if bad is not None:
        what, value = BAD[bad]
        if what in ("offset", "tokens", "content", "wire"):
            row = arrays[what] if arrays[what] is not None else [0] * len(offsets)
            arrays[what] = [*row, value]
            for other in ("offset", "tokens", "content", "wire"):  # the same length, the bad value last
                if other != what and arrays[other] is not None:
                    arrays[other] = [*arrays[other], arrays[other][-1] if arrays[other] else 0]
        elif what == "short":
            arrays = {**arrays, "offset": [*offsets, 1], "tokens": arrays["tokens"] + [0, 0]}
        elif what == "backwards":
            arrays = {k: ([*v, 0, 0] if v is not None else None) for k, v in arrays.items()}
            arrays["offset"] = [*offsets, 5, 4]
        elif what == "side":
            side = value
        elif what == "trace_id":
            trace = value
        elif what == "span_id":
            span_id = value
        elif what == "ends_early":
            end = start - 1
        elif what == "start":
            start, end = value, value + 10**9
    as_bytes = draw(st.booleans())

    def packed(values: list[int]) -> AnyValue:
        if as_bytes and all(-(2**63) <= v <= I64 for v in values):
            return AnyValue(bytes_value=int64_bytes(values))
        return AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in values]))

    names = {
        "offset": sc.STREAMSCOPE_CHUNKS_OFFSET_US,
        "tokens": sc.STREAMSCOPE_CHUNKS_TOKENS,
        "content": sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES,
        "wire": sc.STREAMSCOPE_CHUNKS_WIRE_BYTES,
    }
    attributes = [
        KeyValue(key=sc.STREAMSCOPE_SIDE, value=AnyValue(string_value=side)),
        KeyValue(key=sc.STREAMSCOPE_ENCODING, value=AnyValue(string_value="packed")),
        *(KeyValue(key=names[k], value=packed(v)) for k, v in arrays.items() if v is not None),
        *(KeyValue(key=f"fuzz.{i}", value=v) for i, v in enumerate(draw(st.lists(any_value, max_size=4)))),
    ]
    if bad == "offsets as a string":
        attributes[2] = KeyValue(key=sc.STREAMSCOPE_CHUNKS_OFFSET_US, value=AnyValue(string_value="0,1,2"))
    span = Span(
        trace_id=trace, span_id=span_id, name="chat", start_time_unix_nano=start, end_time_unix_nano=end,
        attributes=attributes,
    )  # fmt: skip
    return Sent(span, tenant, bad is None, len(offsets))


@st.composite
def requests(draw, prefix: bytes) -> list[tuple[str, list[Sent]]]:
    """Up to four requests, each from one tenant, its spans' ids distinct within it (a repeat in one request is a
    rejection of its own, tested elsewhere)."""
    sent = []
    for _ in range(draw(st.integers(1, 4))):
        token = draw(st.sampled_from(sorted(TOKENS)))
        chosen = draw(st.lists(spans(prefix, TOKENS[token]), min_size=1, max_size=5))
        unique = list({(s.span.trace_id, s.span.span_id): s for s in chosen}.values())
        sent.append((token, unique))
    return sent


@settings(
    max_examples=int(os.environ.get("STREAMSCOPE_FUZZ_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_every_acknowledged_span_is_stored_once_under_its_own_tenant(collector, data):
    prefix = uuid.uuid4().bytes[:8]
    expected: dict[tuple[str, str, str], int] = {}  # each good span's chunks, by tenant, trace and span id in hex
    for token, sent in data.draw(requests(prefix)):
        response = post(collector, trace_request([s.span for s in sent]).SerializeToString(), token=token)
        assert response.status_code == 200, response.text
        answer = ExportTraceServiceResponse.FromString(response.content).partial_success
        bad = [s for s in sent if not s.good]
        assert answer.rejected_spans == len(bad), answer.error_message
        for s in bad:
            assert f"span {s.span.span_id.hex() or '?'} of trace {s.span.trace_id.hex() or '?'}" in answer.error_message
        for s in sent:
            if s.good:
                expected.setdefault((s.tenant, s.span.trace_id.hex(), s.span.span_id.hex()), s.chunks)
    query = (
        "SELECT tenant, trace_id, span_id, count(), sum(chunk_count) FROM streams "
        f"WHERE startsWith(trace_id, '{prefix.hex()}') GROUP BY tenant, trace_id, span_id"
    )
    rows = sql_request(collector, query).json()["data"]
    stored = {(tenant, trace, span): (count, chunks) for tenant, trace, span, count, chunks in rows}
    assert stored == {key: (1, chunks) for key, chunks in expected.items()}
    chunk_rows = sql_request(
        collector,
        "SELECT tenant, lower(hex(trace_id_bytes)), count() FROM chunk_arrays "
        f"WHERE startsWith(hex(trace_id_bytes), upper('{prefix.hex()}')) GROUP BY tenant, trace_id_bytes",
    ).json()["data"]
    streams_per_trace: dict[tuple[str, str], int] = {}
    for tenant, trace, _ in expected:
        streams_per_trace[(tenant, trace)] = streams_per_trace.get((tenant, trace), 0) + 1
    assert {(tenant, trace): count for tenant, trace, count in chunk_rows} == streams_per_trace
