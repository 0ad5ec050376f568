"""Chunks as rows (the ``chunks`` table) against one row per stream holding its chunks' columns as arrays:
the engine's insert cost, bytes on disk, and two panels' queries, on the same decoded streams.

The streams are the synthetic ones of ``benchmarks.storage``, decoded by ``ingest.decode``. The array layout
is ``chunks``'s own columns, read from the migrated table: those that repeat the stream's value once per row,
the per-chunk ones as arrays (with the same codecs), ``seq`` left out as the array index. Both tables take the
same inserts of ``--per-insert`` streams, alternating which goes first, with merges stopped, so only the insert
is timed: the process's CPU time over all threads. Then both are merged (``OPTIMIZE … FINAL``) and measured on
disk. The ITL heatmap panel runs as the plugin expands it, over the rows; over the arrays with array functions;
and over the arrays through a view that turns them back into rows (``ARRAY JOIN``), the SQL unchanged. So does
a per-model query of the gap quantiles. Each answer is compared with the rows'.

    python -m benchmarks.chunk_layout [--quick] [--streams 4000] [--chunks 250] [--per-insert 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import re
import statistics
import tempfile
import time
from datetime import UTC, timedelta

import numpy as np
import pyarrow as pa

from benchmarks.storage import on_disk, requests
from dashboards.macros import QueryContext, resolve
from dashboards.panels import DEFAULTS, ITL_HEATMAP
from ingest import migrations, sql, store
from ingest.decode import decode_traces

ARRAYS = "chunk_arrays"
ARRAYS_AS_ROWS = "chunk_arrays_as_rows"
NAMES = {"chunks": "rows (chunks)", ARRAYS: "arrays, one row per stream", ARRAYS_AS_ROWS: "arrays, as rows"}
PER_CHUNK = ("kind", "gap_us", "tokens", "content_bytes", "wire_bytes", "paint_delay_us", "render_us")
"""The columns that vary from chunk to chunk; every other column of ``chunks`` but ``seq`` is the stream's."""
GAP_QUANTILES = """SELECT model, count() AS gaps, quantilesExact(0.5, 0.95, 0.99)(gap_us) AS q, max(gap_us) AS worst
FROM {table}
WHERE side = 'client' AND kind = 'content'
GROUP BY model
ORDER BY model"""
GAP_QUANTILES_OVER_ARRAYS = f"""SELECT model, sum(length(content_gaps)) AS gaps,
    quantilesExactArray(0.5, 0.95, 0.99)(content_gaps) AS q, max(arrayMax(content_gaps)) AS worst
FROM (
    SELECT model, arrayFilter((g, k) -> k = 'content', gap_us, kind) AS content_gaps FROM {ARRAYS}
    WHERE side = 'client'
)
WHERE notEmpty(content_gaps)
GROUP BY model
ORDER BY model"""


def create_array_tables(client) -> None:
    """The array layout of ``chunks``'s current columns and codecs, and the view that makes rows of it again."""
    columns = client.query(
        "SELECT name, type, compression_codec FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'chunks' AND default_kind = '' AND name != 'seq' "
        "ORDER BY position"
    ).result_rows
    ddl = ",\n".join(
        f"{name} {f'Array({kind})' if name in PER_CHUNK else kind} {codec}" for name, kind, codec in columns
    )
    client.command(
        f"CREATE TABLE {ARRAYS} ({ddl}) ENGINE = MergeTree PARTITION BY toDate(start_time) "
        "ORDER BY (tenant, service, side, toStartOfMinute(start_time), trace_id_bytes, span_id_bytes)"
    )
    per_stream = [name for name, _, _ in columns if name not in PER_CHUNK]
    client.command(
        f"CREATE VIEW {ARRAYS_AS_ROWS} AS SELECT {', '.join(per_stream)}, "
        "lower(hex(trace_id_bytes)) AS trace_id, lower(hex(span_id_bytes)) AS span_id, "
        f"toUInt32(position - 1) AS seq, {', '.join(PER_CHUNK)} "
        f"FROM {ARRAYS} ARRAY JOIN arrayEnumerate(gap_us) AS position, {', '.join(PER_CHUNK)}"
    )


def as_arrays(chunks: pa.Table) -> pa.Table:
    """One row per stream: its first row's per-stream values, and its chunks' values as lists."""
    firsts = np.flatnonzero(chunks["seq"].to_numpy() == 0)
    offsets = pa.array(np.append(firsts, chunks.num_rows).astype(np.int32))
    columns = {
        name: pa.ListArray.from_arrays(offsets, column.combine_chunks())
        if name in PER_CHUNK
        else column.take(pa.array(firsts))
        for name, column in zip(chunks.column_names, chunks.columns)
        if name != "seq"
    }
    return pa.table(columns)


def timed_inserts(client, table: str, blocks: list[pa.Table]) -> tuple[float, float]:
    """Wall and CPU seconds (all threads) to insert ``blocks`` into an emptied ``table``."""
    client.command(f"TRUNCATE TABLE {table}")
    cpu, wall = time.process_time(), time.perf_counter()
    for block in blocks:
        client.insert_arrow(table, block, settings={"insert_deduplicate": 0})
    return time.perf_counter() - wall, time.process_time() - cpu


def timed_query(client, query: str, runs: int = 5) -> tuple[float, list]:
    """Median milliseconds of ``query``, and its rows."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        document = sql.query_json(client, query)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), sql.parse_result(document).rows


def heatmap_over_arrays(over_rows: str) -> str:
    """The heatmap panel's SQL with each bucket counted in the streams' arrays of content gaps."""
    buckets = re.sub(r"countIf\((.+?)\) AS", r"sum(arrayCount(gap_us -> \1, gaps)) AS", over_rows)
    head, where = buckets.split("FROM chunks\nWHERE ", 1)
    where, tail = where.split(" AND kind = 'content'\n", 1)
    return (
        f"{head}FROM (SELECT start_time, arrayFilter((g, k) -> k = 'content', gap_us, kind) AS gaps "
        f"FROM {ARRAYS} WHERE {where})\n{tail}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="400 streams, one round: the same table, sooner")
    parser.add_argument("--streams", type=int, default=4000)
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    parser.add_argument("--per-insert", type=int, default=400, help="streams per insert")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    streams, rounds = (400, 1) if args.quick else (args.streams, args.rounds)
    decoded = [
        decode_traces(r, tenant="default", stall_threshold_us=400_000).blocks["chunks"]
        for r in requests(streams, args.chunks, per_request=args.per_insert)
    ]
    layouts = {"chunks": decoded, ARRAYS: [as_arrays(block) for block in decoded]}
    chunks = sum(block.num_rows for block in decoded)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        create_array_tables(client)
        client.command("SYSTEM STOP MERGES")
        inserts: dict[str, list[tuple[float, float]]] = {table: [] for table in layouts}
        for round_ in range(rounds):
            for table in sorted(layouts, reverse=round_ % 2 == 1):
                inserts[table].append(timed_inserts(client, table, layouts[table]))
        client.command("SYSTEM START MERGES")
        for table in layouts:
            client.command(f"OPTIMIZE TABLE {table} FINAL")
        first, last = client.query("SELECT min(start_time), max(start_time) FROM chunks").result_rows[0]
        first, last = (t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in (first, last))
        span = QueryContext(first - timedelta(minutes=1), last + timedelta(minutes=1), timedelta(seconds=5))
        heatmap = resolve(ITL_HEATMAP.sql, span, DEFAULTS)
        queries = {
            "chunks": (heatmap, GAP_QUANTILES.format(table="chunks")),
            ARRAYS: (heatmap_over_arrays(heatmap), GAP_QUANTILES_OVER_ARRAYS),
            ARRAYS_AS_ROWS: (
                heatmap.replace("FROM chunks", f"FROM {ARRAYS_AS_ROWS}"),
                GAP_QUANTILES.format(table=ARRAYS_AS_ROWS),
            ),
        }
        answers = {layout: [timed_query(client, q) for q in pair] for layout, pair in queries.items()}
        stored = {table: on_disk(client, table)[1] for table in layouts}
    print(f"{chunks:,} chunks in {streams:,} streams; inserts of {args.per_insert} streams, merges stopped")
    print(
        f"{'layout':32} {'insert chunks/s':>15} {'CPU µs/chunk':>12} {'bytes/chunk':>11} {'heatmap ms':>10} "
        f"{'quantiles ms':>12} same"
    )
    for layout, name in NAMES.items():
        (heatmap_ms, heatmap_rows), (quantiles_ms, quantile_rows) = answers[layout]
        same = (heatmap_rows, quantile_rows) == (answers["chunks"][0][1], answers["chunks"][1][1])
        if layout in inserts:
            wall = statistics.median(w for w, _ in inserts[layout])
            cpu = statistics.median(c for _, c in inserts[layout])
            measured = f"{chunks / wall:15,.0f} {cpu / chunks * 1e6:12.2f} {stored[layout] / chunks:11.3f}"
        else:
            measured = f"{'':15} {'':12} {'':11}"
        print(f"{name:32} {measured} {heatmap_ms:10.1f} {quantiles_ms:12.1f} {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
