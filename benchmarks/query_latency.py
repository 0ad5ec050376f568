"""Query latency of every dashboard panel on the embedded engine, over 50,000 streams / about 10 million chunks.

The streams (the synthetic generator of chunk_codecs.py: lognormal gaps with rare stalls, spread over one
hour) go through the real decode and write path; the attribution job then rates them, so the stall and
quality panels have rows to read. Every distinct panel of every dashboard is expanded as the Grafana plugin
expands it, for a time range covering all the data (the worst case: nothing is pruned by time), and run
``--runs`` times through ``streamscope_ingest.store.sql.query_json``, the read path of ``streamscope sql`` and the alert
evaluation. The table gives each panel's median and worst time and the rows it returned.

    python -m benchmarks.query_latency [--quick] [--streams 50000] [--chunks 200] [--runs 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

from benchmarks.storage import requests
from streamscope_dashboards.boards import BOARDS
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels import DEFAULTS
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import migrations, sql
from streamscope_ingest.store.writer import ClickHouseWriter

TARGET_MS = 300


def load(client, streams: int, chunks: int) -> tuple[int, QueryContext]:
    """Write the streams and attribute them; returns the chunk count and a context spanning all of them."""
    writer = ClickHouseWriter(client)
    for request in requests(streams, chunks, per_request=500):
        writer.insert(decode_traces(request, tenant="default", stall_threshold_us=400_000))
    AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(minutes=1))
    (total, first, last) = client.query("SELECT count(), min(start_time), max(start_time) FROM chunks").result_rows[0]
    first, last = (t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in (first, last))
    return total, QueryContext(first - timedelta(minutes=1), last + timedelta(minutes=10), timedelta(seconds=5))


def panel_queries(client, ctx: QueryContext) -> dict[str, str]:
    """Every distinct panel's SQL as the plugin sends it; trace panels draw the stream with the longest stall."""
    worst = client.query("SELECT trace_id FROM stalls ORDER BY gap_us DESC LIMIT 1").result_rows
    trace = worst[0][0] if worst else client.query("SELECT any(trace_id) FROM streams").result_rows[0][0]
    queries: dict[str, str] = {}
    for board in BOARDS:
        for panel in board.panels:
            if panel.key not in queries:
                text = panel.bind(trace_id=trace) if panel.variables else panel.sql
                queries[panel.key] = resolve(text, ctx, DEFAULTS)
    return queries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5,000 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=50_000)
    parser.add_argument("--chunks", type=int, default=200, help="mean chunks per stream")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    streams = 5_000 if args.quick else args.streams
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        t0 = time.perf_counter()
        chunks, ctx = load(client, streams, args.chunks)
        loaded_s = time.perf_counter() - t0
        results = []
        for key, query in panel_queries(client, ctx).items():
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                document = sql.query_json(client, query)
                times.append((time.perf_counter() - t0) * 1000)
            results.append((key, statistics.median(times), max(times), len(sql.parse_result(document).rows)))
    print(f"{streams:,} streams, {chunks:,} chunks (loaded and attributed in {loaded_s:.0f} s); {args.runs} runs each")
    print(f"{'panel':28} {'median ms':>10} {'max ms':>8} {'rows':>6}")
    for key, median, worst, rows in sorted(results, key=lambda r: -r[1]):
        print(f"{key:28} {median:10.1f} {worst:8.1f} {rows:6}")
    over = [key for key, median, _, _ in results if median > TARGET_MS]
    slowest = max(median for _, median, _, _ in results)
    print(f"{len(results)} panels; slowest median {slowest:.0f} ms; over {TARGET_MS} ms: {len(over)} {over or ''}")


if __name__ == "__main__":
    main()
