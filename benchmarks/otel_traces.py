"""The baseline store: the OpenTelemetry Collector ClickHouse exporter's ``otel_traces`` table.

The DDL is the exporter's newest ``traces_table.sql`` (without the full-text indexes, so with its bloom-filter
fallback), and ``otel_traces_block`` maps OTLP spans to its rows the way its ``exporter_traces.go`` does:
hex ids, kind and status as enum names, every attribute value stringified, and each span event as one
element of the ``Events`` nested arrays. So a stream recorded with the events encoding is stored as the
exporter would store it. (The exporter itself is a Go program that cannot be built here; the benchmarks
compare the two tables on the same engine.)
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
from clickhouse_connect.driver.client import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from streamscope_ingest.decode.attributes import attribute_map, stringify

DDL = """
CREATE TABLE IF NOT EXISTS otel_traces (
    Timestamp DateTime64(9) CODEC(Delta(8), ZSTD(1)),
    TraceId String CODEC(ZSTD(1)),
    SpanId String CODEC(ZSTD(1)),
    ParentSpanId String CODEC(ZSTD(1)),
    TraceState String CODEC(ZSTD(1)),
    SpanName LowCardinality(String) CODEC(ZSTD(1)),
    SpanKind LowCardinality(String) CODEC(ZSTD(1)),
    ServiceName LowCardinality(String) CODEC(ZSTD(1)),
    ResourceAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    ScopeName String CODEC(ZSTD(1)),
    ScopeVersion String CODEC(ZSTD(1)),
    SpanAttributes Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    Duration UInt64 CODEC(T64, ZSTD(1)),
    StatusCode LowCardinality(String) CODEC(ZSTD(1)),
    StatusMessage String CODEC(ZSTD(1)),
    Events Nested (
        Timestamp DateTime64(9),
        Name LowCardinality(String),
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    Links Nested (
        TraceId String,
        SpanId String,
        TraceState String,
        Attributes Map(LowCardinality(String), String)
    ) CODEC(ZSTD(1)),
    ResourceAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2),
        CAST(ResourceAttributes, 'Array(Tuple(String, String))')),
    SpanAttributeItems Array(String) ALIAS arrayMap(kv -> concat(kv.1, '=', kv.2),
        CAST(SpanAttributes, 'Array(Tuple(String, String))')),
    INDEX idx_trace_id TraceId TYPE bloom_filter(0.001) GRANULARITY 1,
    INDEX idx_res_attr_key mapKeys(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_res_attr_value mapValues(ResourceAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_key mapKeys(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_span_attr_value mapValues(SpanAttributes) TYPE bloom_filter(0.01) GRANULARITY 1,
    INDEX idx_duration Duration TYPE minmax GRANULARITY 1,
    INDEX idx_lower_span_name lower(SpanName) TYPE tokenbf_v1(32768, 3, 0) GRANULARITY 8
) ENGINE = MergeTree()
PARTITION BY toDate(Timestamp)
PRIMARY KEY (ServiceName, SpanName, toDateTime(Timestamp))
ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)
SETTINGS index_granularity = 8192, ttl_only_drop_parts = 1
"""

_ATTRS = pa.map_(pa.string(), pa.string())
_NS = pa.timestamp("ns", tz="UTC")
SCHEMA = pa.schema(
    [
        ("Timestamp", _NS),
        ("TraceId", pa.string()),
        ("SpanId", pa.string()),
        ("ParentSpanId", pa.string()),
        ("TraceState", pa.string()),
        ("SpanName", pa.string()),
        ("SpanKind", pa.string()),
        ("ServiceName", pa.string()),
        ("ResourceAttributes", _ATTRS),
        ("ScopeName", pa.string()),
        ("ScopeVersion", pa.string()),
        ("SpanAttributes", _ATTRS),
        ("Duration", pa.uint64()),
        ("StatusCode", pa.string()),
        ("StatusMessage", pa.string()),
        ("Events.Timestamp", pa.list_(_NS)),
        ("Events.Name", pa.list_(pa.string())),
        ("Events.Attributes", pa.list_(_ATTRS)),
        ("Links.TraceId", pa.list_(pa.string())),
        ("Links.SpanId", pa.list_(pa.string())),
        ("Links.TraceState", pa.list_(pa.string())),
        ("Links.Attributes", pa.list_(_ATTRS)),
    ]
)


def create(client: Client) -> None:
    client.command(DDL)


def _attributes(attributes: Iterable[KeyValue]) -> list[tuple[str, str]]:
    """Attributes as the exporter's ``AsString`` gives them: scalars as text, arrays and maps as JSON."""
    return [(key, stringify(value)) for key, value in attribute_map(attributes).items()]


def otel_traces_block(request: ExportTraceServiceRequest) -> pa.Table:
    """``request``'s spans as ``otel_traces`` rows."""
    rows: dict[str, list] = {name: [] for name in SCHEMA.names}
    for resource_spans in request.resource_spans:
        resource = _attributes(resource_spans.resource.attributes)
        service = dict(resource).get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                row = {
                    "Timestamp": span.start_time_unix_nano,
                    "TraceId": span.trace_id.hex(),
                    "SpanId": span.span_id.hex(),
                    "ParentSpanId": span.parent_span_id.hex(),
                    "TraceState": span.trace_state,
                    "SpanName": span.name,
                    "SpanKind": Span.SpanKind.Name(span.kind),
                    "ServiceName": service,
                    "ResourceAttributes": resource,
                    "ScopeName": scope_spans.scope.name,
                    "ScopeVersion": scope_spans.scope.version,
                    "SpanAttributes": _attributes(span.attributes),
                    "Duration": span.end_time_unix_nano - span.start_time_unix_nano,
                    "StatusCode": Status.StatusCode.Name(span.status.code),
                    "StatusMessage": span.status.message,
                    "Events.Timestamp": [e.time_unix_nano for e in span.events],
                    "Events.Name": [e.name for e in span.events],
                    "Events.Attributes": [_attributes(e.attributes) for e in span.events],
                    "Links.TraceId": [link.trace_id.hex() for link in span.links],
                    "Links.SpanId": [link.span_id.hex() for link in span.links],
                    "Links.TraceState": [link.trace_state for link in span.links],
                    "Links.Attributes": [_attributes(link.attributes) for link in span.links],
                }
                for name, value in row.items():
                    rows[name].append(value)
    return pa.Table.from_pydict(rows, schema=SCHEMA)
