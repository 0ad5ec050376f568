"""Bytes on disk per chunk for every table a stream writes, fed through the real decode and write path and the
attribution job, against the OpenTelemetry Collector ClickHouse exporter's ``otel_traces`` holding the same
streams as span events.

Builds OTLP requests of synthetic streams (the same generator as chunk_codecs.py), decodes them with
streamscope_ingest.decode.traces, writes them with streamscope_ingest.store.writer into the embedded engine (the
chunks, the streams and the rollups the writer keeps), runs the attribution job over them (stalls, quality,
smoothing), merges, and reports compressed bytes per chunk: every table, each table, and each column of
``chunk_arrays``. The same spans, each chunk turned into a ``streamscope.chunk`` event as the events encoding sends
it, go into ``otel_traces`` (``benchmarks.otel_traces``) on the same engine.

The last lines say how little any lossless store could take: the information the chunks carry, as the
entropy of the stored values' distribution (ClickHouse's ``entropy``), the gaps on their own and the other
values together. The gaps' alone is a floor for every store of these chunks, ours and the baseline's.

    python -m benchmarks.storage [--quick] [--streams 4000] [--chunks 250]
"""

from __future__ import annotations

import argparse
import tempfile
from datetime import UTC, datetime

import numpy as np
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from benchmarks import otel_traces
from benchmarks.chunk_codecs import synthetic_chunks
from streamscope import semconv as sc
from streamscope_dashboards.panels.common import STORED_BYTES_SQL, STREAM_TABLES
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import migrations
from streamscope_ingest.store.writer import ClickHouseWriter


def _ints(values: np.ndarray) -> AnyValue:
    return AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=int(v)) for v in values]))


def _text(value: str) -> AnyValue:
    return AnyValue(string_value=value)


def _tool_call(index: int, chunks: int, every: int) -> list[KeyValue]:
    if not every or index % every:
        return []
    return [KeyValue(key=sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK, value=AnyValue(int_value=chunks // 2))]


def requests(
    streams: int, chunks: int, per_request: int = 200, tool_call_every: int = 0
) -> list[ExportTraceServiceRequest]:
    """The synthetic streams as OTLP requests; with ``tool_call_every`` n, every n-th stream calls a tool at its
    middle chunk (``streamscope.first_tool_call_chunk``)."""
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
                    *_tool_call(index, rows.size, tool_call_every),
                ],
            )
        )
    resource = Resource(attributes=[KeyValue(key="service.name", value=_text("bench"))])
    batches = [spans[i : i + per_request] for i in range(0, len(spans), per_request)]
    return [
        ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource, scope_spans=[ScopeSpans(spans=b)])])
        for b in batches
    ]


def as_events(request: ExportTraceServiceRequest) -> ExportTraceServiceRequest:
    """``request`` with each stream's packed arrays sent as one ``streamscope.chunk`` event per chunk instead."""
    events = ExportTraceServiceRequest()
    events.CopyFrom(request)
    for span in (span for rs in events.resource_spans for ss in rs.scope_spans for span in ss.spans):
        sent = {
            kv.key: [v.int_value for v in kv.value.array_value.values]
            for kv in span.attributes
            if kv.key in sc.PACKED_ARRAYS
        }
        kept = [kv for kv in span.attributes if kv.key not in sc.PACKED_ARRAYS]
        del span.attributes[:]
        span.attributes.extend([*kept, KeyValue(key=sc.STREAMSCOPE_ENCODING, value=_text("events"))])
        pairs = zip(sc.CHUNK_EVENT_ATTRIBUTES, sc.PACKED_ARRAYS[1:])
        present = [(event_name, name) for event_name, name in pairs if name in sent]
        for offset, *chunk in zip(sent[sc.STREAMSCOPE_CHUNKS_OFFSET_US], *(sent[name] for _, name in present)):
            event = span.events.add(name=sc.CHUNK_EVENT, time_unix_nano=span.start_time_unix_nano + offset * 1000)
            event.attributes.extend(
                KeyValue(key=event_name, value=AnyValue(int_value=v)) for (event_name, _), v in zip(present, chunk)
            )
    return events


_ENTROPY = (
    "SELECT entropy(gap_us), entropy((kind, tokens, content_bytes, wire_bytes, paint_delay_us, render_us)) FROM chunks"
)
"""Bits of information per chunk in the gaps, and in the chunk's other values together (plug-in estimates from
the values' frequencies, which understate it if anything)."""


NOT_A_STREAMS = ("otel_traces", migrations.MIGRATIONS_TABLE)
"""Tables in the store that no stream writes: the baseline's, and the schema's record."""


def stream_tables(client) -> list[tuple[str, int, int]]:
    """Every table with rows but the baseline's and the schema's, with its rows and compressed bytes, largest
    first."""
    return client.query(
        "SELECT table, sum(rows), sum(data_compressed_bytes) AS bytes FROM system.parts "
        "WHERE database = currentDatabase() AND active AND table NOT IN {skip:Array(String)} "
        "GROUP BY table HAVING sum(rows) > 0 ORDER BY bytes DESC",
        parameters={"skip": list(NOT_A_STREAMS)},
    ).result_rows


def on_disk(client, table: str) -> tuple[int, int]:
    """Rows and compressed bytes of ``table``'s active parts."""
    return client.query(
        "SELECT sum(rows), sum(data_compressed_bytes) FROM system.parts "
        "WHERE database = currentDatabase() AND table = {table:String} AND active",
        parameters={"table": table},
    ).result_rows[0]


def rewritten_wide(client, table: str) -> int:
    """Compressed bytes of ``table`` once its data is rewritten as wide parts, which keep a file per column and so
    have per-column sizes in ``system.columns``. The table's own parts stay compact up to a size this benchmark
    does not reach (migration 0035)."""
    client.command(f"ALTER TABLE {table} MODIFY SETTING min_bytes_for_wide_part = 0")
    client.command(f"OPTIMIZE TABLE {table} FINAL")
    return on_disk(client, table)[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="400 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=4000)
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    args = parser.parse_args()
    streams = 400 if args.quick else args.streams
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        otel_traces.create(client)
        writer = ClickHouseWriter(client)
        for request in requests(streams, args.chunks):
            writer.write([decode_traces(request, tenant="default")])
            client.insert_arrow("otel_traces", otel_traces.otel_traces_block(as_events(request)))
        AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC))
        tables = [name for name, _, _ in stream_tables(client)]
        for table in [*tables, "otel_traces"]:
            client.command(f"OPTIMIZE TABLE {table} FINAL")
        every = stream_tables(client)
        sizes = {table: (table_rows, size) for table, table_rows, size in every}
        total = sizes["chunk_arrays"][1]
        (rows,) = client.query("SELECT count() FROM chunks").result_rows[0]
        stream_rows, stream_bytes = sizes["streams"]
        (baseline_chunks,) = client.query("SELECT sum(length(Events.Name)) FROM otel_traces").result_rows[0]
        baseline_bytes = on_disk(client, "otel_traces")[1]
        gap_bits, other_bits = client.query(_ENTROPY).result_rows[0]
        wide_total = rewritten_wide(client, "chunk_arrays")
        columns = client.query(
            "SELECT name, data_compressed_bytes FROM system.columns "
            "WHERE database = currentDatabase() AND table = 'chunk_arrays' "
            "ORDER BY data_compressed_bytes DESC"
        ).result_rows
        (ours,) = client.query(STORED_BYTES_SQL).result_rows[0]  # the figure the demo and chunk_economics show
    baseline = baseline_bytes / baseline_chunks
    print(f"{rows:,} chunks in {stream_rows:,} streams")
    print(f"every table a stream writes: {ours:.3f} bytes per chunk on disk (compressed)")
    uncounted = [table for table, _, _ in every if table not in STREAM_TABLES]
    if uncounted:
        print(f"tables with rows the figure leaves out (not in STREAM_TABLES): {', '.join(uncounted)}")
    print(f"{'table':22} {'rows':>10} {'bytes/chunk':>12}")
    for table, table_rows, size in every:
        print(f"{table:22} {table_rows:10,} {size / rows:12.3f}")
    print(
        f"chunks alone: {total / rows:.3f} bytes per chunk (chunk_arrays, all columns); streams "
        f"{stream_bytes / stream_rows:.1f} bytes per stream"
    )
    print(
        f"otel_traces: {baseline:.3f} bytes per chunk ({baseline_chunks:,} chunk events); every table of ours takes "
        f"{ours / baseline:.2f}x that, chunk_arrays alone {total / rows / baseline:.2f}x"
    )
    print(
        f"information: the gaps carry {gap_bits:.2f} bits a chunk ({gap_bits / 8:.3f} bytes), the other values "
        f"{other_bits:.2f} bits; 10x smaller than otel_traces is {baseline / 10:.3f} bytes a chunk"
    )
    print(f"{'column':16} {'bytes/chunk':>12}  (rewritten as a wide part: {wide_total / rows:.3f} bytes per chunk)")
    for name, size in columns:
        print(f"{name:16} {size / rows:12.3f}")


if __name__ == "__main__":
    main()
