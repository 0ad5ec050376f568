"""Query latency of every dashboard panel on the embedded engine, over 50,000 streams / about 10 million chunks.

The streams (the synthetic generator of chunk_codecs.py: lognormal gaps with rare stalls, spread over one
hour; every third calls a tool half way) go through the real decode and write path; the attribution job then
rates them, so the stall and quality panels have rows to read. Every distinct panel of every dashboard is
expanded as the Grafana plugin expands it, for a time range covering all the data (the worst case: nothing is
pruned by time), and so is every alert rule, as Grafana evaluates it at the end of the data; each is run
``--runs`` times through ``streamscope_ingest.store.sql.query_json``, the read path of ``streamscope sql`` and the alert
evaluation. The table gives each panel's median and worst time and the rows it returned.

The gap quantiles of ``model_texture`` come from ``gap_histograms`` (migration 0030), its per-stream medians and
``smoothing_trade``'s from ``stream_histograms`` and ``smoothing_histograms`` (migration 0032), those of
``stream_shape`` and ``chunk_economics`` from ``stream_histograms`` too (0033): the last lines give each figure's
largest error against ``quantileExact`` over the same rows (relative for times and rates, absolute for quality
indices). Sums, counts and the tokens per chunk are exact (``stream_totals``, 0033).

``--copies N`` then writes the stored streams N-1 more times straight into the store, each copy with its own
trace ids and whole hours earlier than the one before (``INSERT ... SELECT``, not the decode path; the gap
histograms copied with them): the same panels over N times the chunks, for sizes the decode path and the
attribution job would take too long to load. With ``--stacked`` the copies take the originals' times instead:
the same range at N times the rate, as a busier fleet fills it (the alert rules' windows hold N times the
streams).

    python -m benchmarks.query_latency [--quick] [--streams 50000] [--chunks 200] [--runs 5] [--copies 1] [--stacked]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta

from benchmarks.storage import requests
from streamscope_dashboards.alerts import RULES
from streamscope_dashboards.boards import BOARDS
from streamscope_dashboards.macros import QueryContext, expand, resolve
from streamscope_dashboards.panels.common import DEFAULTS, SIZED, TIMED, TOKENS_PER_S, UNTIMED_CHUNKS, streams_with
from streamscope_dashboards.panels.cost import CHUNK_ECONOMICS
from streamscope_dashboards.panels.quality import FLEET_STATS, MODEL_TEXTURE, SMOOTHING_TRADE, STREAM_SHAPE
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import migrations, sql
from streamscope_ingest.store.writer import ClickHouseWriter

TARGET_MS = 300


def load(client, streams: int, chunks: int) -> tuple[int, QueryContext]:
    """Write the streams and attribute them; returns the chunk count and a context spanning all of them."""
    writer = ClickHouseWriter(client)
    for request in requests(streams, chunks, per_request=500, tool_call_every=3):
        writer.insert(decode_traces(request, tenant="default"))
    AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(minutes=1))
    (total, first, last) = client.query("SELECT count(), min(start_time), max(start_time) FROM chunks").result_rows[0]
    first, last = (t.replace(tzinfo=UTC) if t.tzinfo is None else t for t in (first, last))
    return total, QueryContext(first - timedelta(minutes=1), last + timedelta(minutes=10), timedelta(seconds=5))


COPIED = (
    "streams",
    "chunk_arrays",
    "gap_histograms",
    "stream_histograms",
    "stream_totals",
    "stalls",
    "stream_quality",
    "stream_smoothing",
    "smoothing_histograms",
)
"""The tables the panels read, copied with their streams."""
_STORED_AT = ("ingested_at", "attributed_at")
_HOUR_US = 3_600_000_000


def copied_tables(client) -> list[str]:
    """``COPIED``, but those a build before migrations 0030, 0032 and 0033 lacks (the histograms and totals)."""
    return [table for table in COPIED if client.command(f"EXISTS TABLE {table}")]


def copy_streams(client, copies: int, ctx: QueryContext, stacked: bool = False) -> QueryContext:
    """Write every stored row ``copies - 1`` more times, each copy shifted back by the span of the originals
    (rounded up to whole hours, so the histograms' intervals stay whole; not at all if ``stacked``) and with trace
    ids that start with its number; returns a context spanning them all."""
    span_us = int((ctx.end - ctx.start).total_seconds() * 1e6)
    shift_us = 0 if stacked else -(-span_us // _HOUR_US) * _HOUR_US
    for table in copied_tables(client):
        columns = client.query(
            "SELECT name, type FROM system.columns WHERE database = currentDatabase() AND table = {t:String} "
            "AND default_kind NOT IN ('ALIAS', 'MATERIALIZED') ORDER BY position",
            parameters={"t": table},
        ).result_rows
        names = [name for name, _ in columns if name not in _STORED_AT]
        values = ", ".join(_copied(name, kind, shift_us) for name, kind in columns if name in names)
        client.command(  # one read of the originals for every copy
            f"INSERT INTO {table} ({', '.join(names)}) SELECT {values} "
            f"FROM {table} ARRAY JOIN range(1, {copies}) AS copy"
        )
    return QueryContext(ctx.start - timedelta(microseconds=shift_us * (copies - 1)), ctx.end, ctx.interval)


def _copied(name: str, kind: str, shift_us: int) -> str:
    prefix = "leftPad(lower(hex(toUInt32(copy))), 8, '0')"
    if name == "trace_id":
        return f"concat({prefix}, substring(trace_id, 9))"
    if name == "trace_id_bytes":
        return f"toFixedString(unhex(concat({prefix}, substring(lower(hex(trace_id_bytes)), 9))), 16)"
    if "DateTime" in kind:
        return f"{name} - toIntervalMicrosecond({shift_us} * copy)"
    return name


def rule_queries(ctx: QueryContext) -> dict[str, str]:
    """Every alert rule's SQL as Grafana sends it when it evaluates the rule at the end of the data (its range
    before that)."""
    return {
        f"alert {rule.uid.removeprefix('streamscope-')}": expand(
            rule.sql, QueryContext(ctx.end - timedelta(seconds=rule.range_s), ctx.end, timedelta(seconds=1))
        )
        for rule in RULES
    }


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


EXACT_GAPS_SQL = """
SELECT model, quantilesExact(0.5, 0.95, 0.99)(gap_us)[1] / 1000 AS gap_p50_ms,
    quantilesExact(0.5, 0.95, 0.99)(gap_us)[2] / 1000 AS gap_p95_ms,
    quantilesExact(0.5, 0.95, 0.99)(gap_us)[3] / 1000 AS gap_p99_ms
FROM chunks
WHERE $__timeFilter(start_time) AND side = 'client' AND kind = 'content' GROUP BY model
"""
EXACT_STREAMS_SQL = f"""
SELECT model, quantileExact(0.5)(tokens_per_s) AS tokens_per_s_p50,
    quantileExact(0.5)(tool_call_pause_us) / 1000 AS tool_call_pause_ms_p50
FROM {streams_with(f"{TOKENS_PER_S} AS tokens_per_s")}
WHERE $__timeFilter(start_time) AND side = 'client' GROUP BY model
"""
EXACT_SMOOTHING_SQL = f"""
SELECT depth_ms, quantileExact(0.5)(added_end_us) / 1000 AS added_end_p50_ms,
    quantileExact(0.5)(longest_gap_before_us) / 1000 AS longest_gap_p50_before_ms,
    quantileExact(0.5)(longest_gap_after_us) / 1000 AS longest_gap_p50_after_ms,
    quantileExact(0.5)(fluidity_before) AS fluidity_p50_before,
    quantileExact(0.5)(fluidity_after) AS fluidity_p50_after,
    quantileExact(0.5)(andes_before) AS andes_qoe_p50_before, quantileExact(0.5)(andes_after) AS andes_qoe_p50_after
FROM stream_smoothing
WHERE $__timeFilter(start_time) AND side = 'client'
    AND (trace_id, span_id) NOT IN (SELECT trace_id, span_id FROM streams WHERE {UNTIMED_CHUNKS})
GROUP BY depth_ms
"""
EXACT_SHAPE_SQL = """
SELECT model, quantileExact(0.5)(tokens_per_s) AS tokens_per_s_p50,
    quantileExact(0.5)(first_byte_lead_us) / 1000 AS first_byte_lead_ms_p50,
    quantileExact(0.5)(head_burst_ratio) AS head_burst_ratio_p50
FROM stream_metrics
WHERE $__timeFilter(start_time) AND side = 'client' GROUP BY model
"""
EXACT_CHUNK_PACE_SQL = f"""
SELECT model, quantileExact(0.5)(chunks_per_s) AS chunks_per_s_p50
FROM stream_metrics
WHERE $__timeFilter(start_time) AND side = 'client' AND {SIZED} GROUP BY model
"""
EXACT_FLEET_SQL = f"""
SELECT quantileExact(0.5)(ttft_us) / 1000 AS ttft_p50_ms, quantileExact(0.95)(ttft_us) / 1000 AS ttft_p95_ms,
    quantileExactIf(0.99)(gap_p99_us, {TIMED}) / 1000 AS p99_of_p99_ms
FROM stream_metrics
WHERE $__timeFilter(start_time) AND side = 'client'
"""
SKETCHED = (
    # panel, the SQL of the exact figures, the key column (None: one row), the columns compared, relative (else
    # absolute) errors
    (MODEL_TEXTURE, EXACT_GAPS_SQL, "model", ("gap_p50_ms", "gap_p95_ms", "gap_p99_ms"), True),
    (MODEL_TEXTURE, EXACT_STREAMS_SQL, "model", ("tokens_per_s_p50", "tool_call_pause_ms_p50"), True),
    (SMOOTHING_TRADE, EXACT_SMOOTHING_SQL, "depth_ms",
     ("added_end_p50_ms", "longest_gap_p50_before_ms", "longest_gap_p50_after_ms"), True),
    (SMOOTHING_TRADE, EXACT_SMOOTHING_SQL, "depth_ms",
     ("fluidity_p50_before", "fluidity_p50_after", "andes_qoe_p50_before", "andes_qoe_p50_after"), False),
    (STREAM_SHAPE, EXACT_SHAPE_SQL, "model", ("tokens_per_s_p50", "first_byte_lead_ms_p50", "head_burst_ratio_p50"),
     True),
    (CHUNK_ECONOMICS, EXACT_CHUNK_PACE_SQL, "model", ("chunks_per_s_p50",), True),
    (FLEET_STATS, EXACT_FLEET_SQL, None, ("ttft_p50_ms", "ttft_p95_ms", "p99_of_p99_ms"), True),
)  # fmt: skip
"""The figures panels read from histograms (migrations 0030, 0032 and 0033), against quantileExact over the rows."""


def sketch_errors(client, ctx: QueryContext) -> list[str]:
    """For each line of ``SKETCHED``, the largest error over the panel's rows of each figure it shows."""
    lines = []
    for panel, exact_sql, key, names, relative in SKETCHED:
        shown = _rows(client, resolve(panel.sql, ctx, DEFAULTS))
        exact = {row[key] if key else None: row for row in _rows(client, resolve(exact_sql, ctx, DEFAULTS))}
        worst = {}
        for name in names:
            pairs = [(row[name], exact[row[key] if key else None][name]) for row in shown if row[name] is not None]
            errors = [abs(got / want - 1) if relative else abs(got - want) for got, want in pairs if want]
            worst[name] = max(errors, default=0.0)
        shown_as = "{:.3%}" if relative else "{:.4f}"
        listed = ", ".join(f"{name} {shown_as.format(error)}" for name, error in worst.items())
        kind = "relative" if relative else "absolute"
        lines.append(f"{panel.key} against quantileExact, largest {kind} error: {listed}")
    return lines


def _rows(client, query: str) -> list[dict]:
    result = client.query(query)
    return [dict(zip(result.column_names, row)) for row in result.result_rows]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1,000 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=50_000)
    parser.add_argument("--chunks", type=int, default=200, help="mean chunks per stream")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--copies", type=int, default=1, help="store the streams this many times (see above)")
    parser.add_argument("--stacked", action="store_true", help="the copies at the originals' times (see above)")
    args = parser.parse_args()
    streams = 1_000 if args.quick else args.streams
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        t0 = time.perf_counter()
        chunks, ctx = load(client, streams, args.chunks)
        loaded_s = time.perf_counter() - t0
        if args.copies > 1:
            ctx = copy_streams(client, args.copies, ctx, args.stacked)
            stored = "SELECT (SELECT uniqExact(trace_id) FROM streams), (SELECT sum(length(gap_us)) FROM chunk_arrays)"
            streams, chunks = client.query(stored).result_rows[0]
            for table in copied_tables(client):
                client.command(f"OPTIMIZE TABLE {table}")  # settle the parts as merges would over the hour
        results = []
        for key, query in {**panel_queries(client, ctx), **rule_queries(ctx)}.items():
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                document = sql.query_json(client, query)
                times.append((time.perf_counter() - t0) * 1000)
            results.append((key, statistics.median(times), max(times), len(sql.parse_result(document).rows)))
        errors = sketch_errors(client, ctx)
    how = f"loaded and attributed in {loaded_s:.0f} s"
    how += f", then stored {args.copies} times{' at the same times' if args.stacked else ''}" if args.copies > 1 else ""
    print(f"{streams:,} streams, {chunks:,} chunks ({how}); {args.runs} runs each")
    print(f"{'panel or alert rule':28} {'median ms':>10} {'max ms':>8} {'rows':>6}")
    for key, median, worst, rows in sorted(results, key=lambda r: -r[1]):
        print(f"{key:28} {median:10.1f} {worst:8.1f} {rows:6}")
    over = [key for key, median, _, _ in results if median > TARGET_MS]
    slowest = max(median for _, median, _, _ in results)
    print(f"{len(results)} queries; slowest median {slowest:.0f} ms; over {TARGET_MS} ms: {len(over)} {over or ''}")
    print("\n".join(errors))


if __name__ == "__main__":
    main()
