"""What many tests share: hand-built OTLP stream spans (written through the real decoder and writer), requests to a
running collector, reading its /metrics as Prometheus does, waiting for a condition, free ports, the ``streamscope``
command run as a process, and a tracer provider that keeps its spans in memory."""

from __future__ import annotations

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import httpx
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client.parser import text_string_to_metric_families

from streamscope import semconv as sc
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.decode.request_log import Received, with_request_row
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store.writer import ClickHouseWriter

T = TypeVar("T")

T0 = 1_800_000_000_000_000_000  # ns: a fixed start, far from the partitions other tests write


def any_value(value: str | int | float | bool | Sequence[int] | Sequence[str]) -> AnyValue:
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    return AnyValue(array_value=ArrayValue(values=[any_value(v) for v in value]))


def int64s(value: bytes) -> list[int]:
    """A packed array as the SDK sets it (little-endian int64s, 8 bytes each), read without the collector's code."""
    return list(struct.unpack(f"<{len(value) // 8}q", value))


def stream_span(
    trace: int,
    span: int,
    *,
    side: str,
    offsets_ms: Sequence[float],
    tokens: Sequence[int],
    content_bytes: Sequence[int] | None = None,
    wire_bytes: Sequence[int] | None = None,
    paint_delay_us: Sequence[int] | None = None,
    render_us: Sequence[int] | None = None,
    start_ns: int = T0,
    attributes: dict[str, str | int | float | bool] | None = None,
) -> Span:
    """A packed stream span; content bytes default to 4 per token, wire bytes to 0 (unknown), and a browser's
    paint and render arrays are sent when given."""
    content = list(content_bytes) if content_bytes is not None else [4 * t for t in tokens]
    browser = {sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US: paint_delay_us, sc.STREAMSCOPE_CHUNKS_RENDER_US: render_us}
    values: dict[str, str | int | float | bool | Sequence[int]] = {
        sc.STREAMSCOPE_SIDE: side,
        sc.STREAMSCOPE_ENCODING: "packed",
        sc.STREAMSCOPE_CHUNKS_OFFSET_US: [round(o * 1000) for o in offsets_ms],
        sc.STREAMSCOPE_CHUNKS_TOKENS: list(tokens),
        sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES: content,
        sc.STREAMSCOPE_CHUNKS_WIRE_BYTES: list(wire_bytes) if wire_bytes is not None else [0] * len(content),
        **{name: list(v) for name, v in browser.items() if v is not None},
        **(attributes or {}),
    }
    end_ns = start_ns + round((offsets_ms[-1] if offsets_ms else 0) * 1e6) + 1_000_000
    return Span(
        trace_id=trace.to_bytes(16, "big"),
        span_id=span.to_bytes(8, "big"),
        name="chat",
        start_time_unix_nano=start_ns,
        end_time_unix_nano=end_ns,
        attributes=[KeyValue(key=k, value=any_value(v)) for k, v in values.items()],
    )


def event_span(span_byte: int, events: list[tuple[int, str, dict[str, AnyValue]]]) -> Span:
    """A span in the events encoding: (offset in µs, event name, attributes) per event, in the order given."""
    start_ns = T0
    span = Span(
        trace_id=bytes([span_byte]) * 16,
        span_id=bytes([span_byte]) * 8,
        name="chat m",
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + 1_000_000_000,
        attributes=[
            KeyValue(key=sc.STREAMSCOPE_SIDE, value=AnyValue(string_value="client")),
            KeyValue(key=sc.STREAMSCOPE_ENCODING, value=AnyValue(string_value="events")),
        ],
    )
    for offset_us, name, attributes in events:
        event = span.events.add(name=name, time_unix_nano=start_ns + offset_us * 1000)
        event.attributes.extend(KeyValue(key=k, value=v) for k, v in attributes.items())
    return span


def plain_stream_span(span_byte: int, offsets: list[int], tokens: list[int] | None = None) -> Span:
    """A minimal client stream span, ids ``span_byte`` repeated: µs offsets, a token a chunk unless given, 4 content
    bytes a chunk, and no resource or other attributes."""

    def ints(values: list[int]) -> AnyValue:
        return AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in values]))

    tokens = tokens if tokens is not None else [1] * len(offsets)
    return Span(
        trace_id=bytes([span_byte]) * 16,
        span_id=bytes([span_byte]) * 8,
        name="chat m",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + 1_000_000_000,
        attributes=[
            KeyValue(key=sc.STREAMSCOPE_SIDE, value=AnyValue(string_value="client")),
            KeyValue(key=sc.STREAMSCOPE_ENCODING, value=AnyValue(string_value="packed")),
            KeyValue(key=sc.STREAMSCOPE_CHUNKS_OFFSET_US, value=ints(offsets)),
            KeyValue(key=sc.STREAMSCOPE_CHUNKS_TOKENS, value=ints(tokens)),
            KeyValue(key=sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES, value=ints([4] * len(offsets))),
        ],
    )


def request_of(*spans: Span) -> ExportTraceServiceRequest:
    """``spans`` in one request, without a resource."""
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ScopeSpans(spans=list(spans))])])


def good_body() -> bytes:
    """A valid protobuf request body: one client stream of 3 chunks."""
    return request_of(plain_stream_span(1, [10, 20, 30])).SerializeToString()


def batch(span_byte: int, tenant: str, chunks: int = 3) -> DecodedBatch:
    """A request's batch: one stream span of ``chunks`` chunks, and the request's log row."""
    request = request_of(plain_stream_span(span_byte, list(range(chunks))))
    decoded = decode_traces(request, tenant=tenant)
    size = request.ByteSize()
    received = Received("http", "protobuf", "identity", size, size)
    with_request_row(decoded, tenant=tenant, signal="traces", received=received)
    return decoded


def trace_request(spans: Sequence[Span], service: str = "app", scope: str = "") -> ExportTraceServiceRequest:
    resource = Resource(attributes=[KeyValue(key="service.name", value=any_value(service))])
    scope_spans = ScopeSpans(scope=InstrumentationScope(name=scope), spans=list(spans))
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[scope_spans])])


def store_spans(client, spans: Sequence[Span], service: str = "app", scope: str = "") -> None:
    """Decode ``spans`` (sent by the instrumentation ``scope``) as the collector does and write them."""
    decoded = decode_traces(trace_request(spans, service, scope), tenant="t")
    assert not decoded.rejected, decoded.rejection_message("span")
    ClickHouseWriter(client).write([decoded])


def otlp_json(request: ExportTraceServiceRequest) -> bytes:
    """``request`` in OTLP JSON, as browsers and JSON exporters send it: ids in hex, not proto3's base64."""
    document = json_format.MessageToDict(request)
    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(document).encode()


def metric(base_url: str, name: str, **labels: str) -> float:
    """The value of sample ``name`` with ``labels`` (0 when absent, as for a counter never incremented)."""
    text = httpx.get(f"{base_url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return 0.0


PROTOBUF = {"content-type": "application/x-protobuf"}


class HttpService(Protocol):
    """Anything serving HTTP at ``http_url``, such as ``streamscope_collector.service.Collector``."""

    @property
    def http_url(self) -> str: ...


def _bearer(token: str | None) -> dict[str, str]:
    """The authorization header for ``token``, or none."""
    return {"authorization": f"Bearer {token}"} if token else {}


def post(
    collector: HttpService,
    body: bytes,
    *,
    path: str = "/v1/traces",
    headers: Mapping[str, str] | None = None,
    token: str | None = None,
    timeout: float = 30.0,
) -> httpx.Response:
    """POST ``body`` to ``collector`` at ``path``: as protobuf unless ``headers`` are given, with ``token`` as a
    bearer token when there is one."""
    sent = {**(PROTOBUF if headers is None else headers), **_bearer(token)}
    return httpx.post(f"{collector.http_url}{path}", content=body, headers=sent, timeout=timeout)


class SqlService(HttpService, Protocol):
    """A collector serving the SQL route: ``http_url`` and the token it takes."""

    @property
    def operator_token(self) -> str: ...


def sql_request(
    collector: SqlService, query: str, token: str | None = None, *, timeout: float = 30.0
) -> httpx.Response:
    """``query`` through the collector's SQL route, as ``streamscope sql`` sends it: as the operator, unless
    another ``token`` is given."""
    headers = _bearer(token or collector.operator_token)
    return httpx.post(f"{collector.http_url}/api/v1/sql", json={"query": query}, headers=headers, timeout=timeout)


def wait_until(condition: Callable[[], T], what: str, timeout_s: float = 60.0, interval_s: float = 0.05) -> T:
    """Call ``condition`` every ``interval_s`` until it returns a truthy value, and return that value."""
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(interval_s)
    return value


def wait_for_rows(
    client: Any, sql: str, expected: int, parameters: Mapping[str, Any] | None = None, timeout_s: float = 10.0
) -> None:
    """Wait until the count ``sql`` selects reaches ``expected``."""
    wait_until(
        lambda: client.query(sql, parameters=parameters).result_rows[0][0] >= expected,
        f"{sql} to reach {expected}",
        timeout_s,
    )


def free_port() -> int:
    """A loopback port nothing listens on (at the time of asking)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


STREAMSCOPE = [sys.executable, "-m", "streamscope_cli.main"]


def run(*args: str, env_extra: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``streamscope *args`` as a process, its output captured as text."""
    env = {**os.environ, "COLUMNS": "200", **(env_extra or {})}
    return subprocess.run([*STREAMSCOPE, *args], capture_output=True, text=True, timeout=timeout, env=env)


def memory_provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    """A TracerProvider whose spans are kept in memory, and the exporter that keeps them."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter
