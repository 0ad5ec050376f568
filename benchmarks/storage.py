"""Bytes on disk per chunk for the real ``chunks`` table, fed through the real decode and write path.

Builds OTLP requests of synthetic streams (the same generator as chunk_codecs.py), decodes them with
ingest.decode, writes them with ingest.writer into the embedded engine, merges, and reports compressed
bytes per chunk (all columns, and each column), plus bytes per stream for ``streams``.

    python -m benchmarks.storage [--streams 4000] [--chunks 250]
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from benchmarks.chunk_codecs import synthetic_chunks
from ingest import migrations, store
from ingest.decode import decode_traces
from ingest.writer import ClickHouseWriter
from streamscope import semconv as sc


def _ints(values: np.ndarray) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=int(v)) for v in values]))


def _text(value: str) -> AnyValue:
    return AnyValue(string_value=value)


def requests(streams: int, chunks: int, per_request: int = 200) -> list[ExportTraceServiceRequest]:
    data = synthetic_chunks(streams, chunks)
    bounds = np.flatnonzero(np.diff(data["stream"])) + 1
    pieces = np.split(np.arange(data["stream"].size), bounds)
    rng = np.random.default_rng(1)
    spans = []
    for index, rows in enumerate(pieces):
        start_ns = int(data["start_time"][rows[0]]) * 1000
        offsets = data["offset_us"][rows]
        spans.append(
            Span(
                trace_id=rng.bytes(16),
                span_id=rng.bytes(8),
                name="chat m",
                start_time_unix_nano=start_ns,
                end_time_unix_nano=start_ns + int(offsets[-1]) * 1000 + 1000,
                attributes=[
                    KeyValue(key=sc.STREAMSCOPE_SIDE, value=_text("client")),
                    KeyValue(key=sc.GEN_AI_PROVIDER_NAME, value=_text("openai")),
                    KeyValue(key=sc.GEN_AI_REQUEST_MODEL, value=_text(f"model-{index % 3}")),
                    KeyValue(key=sc.STREAMSCOPE_CHUNKS_OFFSET_US, value=_ints(offsets)),
                    KeyValue(key=sc.STREAMSCOPE_CHUNKS_TOKENS, value=_ints(data["tokens"][rows])),
                    KeyValue(key=sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES, value=_ints(data["content_bytes"][rows])),
                    KeyValue(key=sc.STREAMSCOPE_CHUNKS_WIRE_BYTES, value=_ints(data["wire_bytes"][rows])),
                ],
            )
        )
    resource = Resource(attributes=[KeyValue(key="service.name", value=_text("bench"))])
    batches = [spans[i : i + per_request] for i in range(0, len(spans), per_request)]
    return [
        ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=b)])])
        for b in batches
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=4000)
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        writer = ClickHouseWriter(client)
        for request in requests(args.streams, args.chunks):
            writer.write([decode_traces(request, tenant="default", stall_threshold_us=400_000)])
        for table in ("chunks", "streams"):
            client.command(f"OPTIMIZE TABLE {table} FINAL")
        rows, total = client.query(
            "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts "
            "WHERE database = currentDatabase() AND table = 'chunks' AND active"
        ).result_rows[0]
        stream_rows, stream_bytes = client.query(
            "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts "
            "WHERE database = currentDatabase() AND table = 'streams' AND active"
        ).result_rows[0]
        columns = client.query(
            "SELECT name, data_compressed_bytes FROM system.columns "
            "WHERE database = currentDatabase() AND table = 'chunks' ORDER BY data_compressed_bytes DESC"
        ).result_rows
    print(f"{rows:,} chunks in {stream_rows:,} streams")
    print(f"chunks: {total / rows:.3f} bytes per chunk on disk (compressed, all columns)")
    print(
        f"streams: {stream_bytes / stream_rows:.1f} bytes per stream; "
        f"{(total + stream_bytes) / rows:.3f} bytes per chunk counting both tables"
    )
    print(f"{'column':16} {'bytes/chunk':>12}")
    for name, size in columns:
        print(f"{name:16} {size / rows:12.3f}")


if __name__ == "__main__":
    main()
