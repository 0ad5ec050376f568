"""Chunks as rows against one row per stream holding its chunks' columns as arrays (``chunk_arrays``, what
ingest writes since migration 0020): the engine's insert cost, bytes on disk, and two panels' queries, on the
same decoded streams.

The streams are the synthetic ones of ``benchmarks.storage``, decoded by
``streamscope_ingest.decode.traces``. The row layout is
``chunk_arrays``'s own columns, read from the migrated table, with the arrays unrolled into one row a chunk and
``seq`` added to the key: the ``chunks`` table before migration 0020. Both tables take the same inserts of
``--per-insert`` streams, alternating which goes first, with merges stopped, so only the insert is timed: the
process's CPU time over all threads. Then both are merged (``OPTIMIZE … FINAL``) and measured on disk. The ITL
heatmap counted from raw chunks (the panel's answer while routes are chosen) runs as the plugin expands it over
the rows; over the arrays with array functions; and over the ``chunks`` view that unrolls the arrays
(``ARRAY JOIN``). So does a per-model query of
the gap quantiles. Each answer is compared with the rows'.

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
import pyarrow.compute as pc

from benchmarks.storage import on_disk, requests
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import DEFAULTS
from streamscope_dashboards.panels.quality import raw_itl_heatmap
from streamscope_ingest import store
from streamscope_ingest.blocks import columns
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import migrations, sql

ROWS = "chunk_rows"
_ARRAY = re.compile(r"^Array\((.*)\)$")
ARRAYS = "chunk_arrays"
ARRAYS_AS_ROWS = "chunks"
NAMES = {ROWS: "rows, one a chunk", ARRAYS: "arrays, one row per stream", ARRAYS_AS_ROWS: "arrays, as rows (chunks)"}
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


def _item_type(kind: str) -> str:
    """The type of an array's items, or the type itself."""
    return _ARRAY.sub(r"\1", kind)


def create_row_table(client) -> None:
    """``chunk_arrays``'s columns and codecs with the arrays unrolled, ``seq`` in the key: one row a chunk."""
    stored = client.query(
        "SELECT name, type, compression_codec FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'chunk_arrays' ORDER BY position"
    ).result_rows
    ddl = ",\n".join(f"{name} {_item_type(kind)} {codec}" for name, kind, codec in stored)
    client.command(
        f"CREATE TABLE {ROWS} ({ddl}, seq UInt32 CODEC(Delta, ZSTD(1))) ENGINE = MergeTree "
        "PARTITION BY toDate(start_time) "
        "ORDER BY (tenant, service, side, toStartOfMinute(start_time), trace_id_bytes, span_id_bytes, seq)"
    )


def as_rows(arrays: pa.Table) -> pa.Table:
    """A ``chunk_arrays`` block as one row a chunk: the stream's values repeated, ``seq`` its index."""
    lengths = pc.list_value_length(arrays["gap_us"]).to_numpy()
    owner = pa.array(np.repeat(np.arange(arrays.num_rows), lengths))
    rows = {
        name: columns.per_chunk(arrays, name) if pa.types.is_list(column.type) else column.combine_chunks().take(owner)
        for name, column in zip(arrays.column_names, arrays.columns)
    }
    rows["seq"] = pa.array(np.concatenate([np.arange(n) for n in lengths] or [[]]).astype(np.uint32))
    return pa.table(rows)


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
    """The raw heatmap's SQL with each bucket counted in the streams' arrays of content gaps."""
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
        decode_traces(r, tenant="default").blocks[ARRAYS]
        for r in requests(streams, args.chunks, per_request=args.per_insert)
    ]
    layouts = {ROWS: [as_rows(block) for block in decoded], ARRAYS: decoded}
    chunks = sum(block.num_rows for block in layouts[ROWS])
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        create_row_table(client)
        client.command("SYSTEM STOP MERGES")
        inserts: dict[str, list[tuple[float, float]]] = {table: [] for table in layouts}
        for round_ in range(rounds):
            for table in sorted(layouts, reverse=round_ % 2 == 1):
                inserts[table].append(timed_inserts(client, table, layouts[table]))
        client.command("SYSTEM START MERGES")
        for table in layouts:
            client.command(f"OPTIMIZE TABLE {table} FINAL")
        first, last = client.query(f"SELECT min(start_time), max(start_time) FROM {ROWS}").result_rows[0]
        first, last = (t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in (first, last))
        span = QueryContext(first - timedelta(minutes=1), last + timedelta(minutes=1), timedelta(seconds=5))
        heatmap = resolve(raw_itl_heatmap() + "\nORDER BY time", span, DEFAULTS)
        queries = {
            ROWS: (heatmap.replace("FROM chunks", f"FROM {ROWS}"), GAP_QUANTILES.format(table=ROWS)),
            ARRAYS: (heatmap_over_arrays(heatmap), GAP_QUANTILES_OVER_ARRAYS),
            ARRAYS_AS_ROWS: (heatmap, GAP_QUANTILES.format(table=ARRAYS_AS_ROWS)),
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
        same = (heatmap_rows, quantile_rows) == (answers[ROWS][0][1], answers[ROWS][1][1])
        if layout in inserts:
            wall = statistics.median(w for w, _ in inserts[layout])
            cpu = statistics.median(c for _, c in inserts[layout])
            measured = f"{chunks / wall:15,.0f} {cpu / chunks * 1e6:12.2f} {stored[layout] / chunks:11.3f}"
        else:
            measured = f"{'':15} {'':12} {'':11}"
        print(f"{name:32} {measured} {heatmap_ms:10.1f} {quantiles_ms:12.1f} {'yes' if same else 'NO'}")


if __name__ == "__main__":
    main()
