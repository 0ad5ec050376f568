"""``streamscope demo``: a scenario end to end on this machine, then its timing distributions.

Starts an embedded collector, runs the scenario's workload against it (engine nodes, the impairment proxy,
instrumented clients; ``mixed`` by default), waits until every stream is stored, and summarises them with
SQL on the store, next to the ground truth of what was injected.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from collector.config import CollectorConfig
from collector.service import Collector
from ingest.summary import Summary, summarize
from streamscope import env
from streamscope._internal.recorder import Encoding, set_default_encoding
from streamscope.workload.load import CLIENT_SERVICE, LoadReport, describe, run_load, wait_until_stored
from streamscope.workload.scenario import load_scenario, plan


@dataclass(frozen=True)
class DemoConfig:
    scenario: str = "mixed"
    streams: int | None = None
    """Override the scenario's number of streams (for a quicker run)."""
    storage_dsn: str = field(default_factory=env.default_storage_dsn)
    encoding: Encoding = "packed"
    store_timeout_s: float = 60.0


def run_demo(config: DemoConfig, console: Console | None = None) -> Summary:
    console = console or Console()
    scenario = load_scenario(config.scenario)
    if config.streams is not None:
        scenario = replace(scenario, load=replace(scenario.load, streams=config.streams))
    set_default_encoding(config.encoding)
    stall_us = env.stall_threshold_us()
    collector = Collector(
        CollectorConfig(storage_dsn=config.storage_dsn, http_port=0, grpc_port=None, stall_threshold_us=stall_us)
    ).start()
    try:
        since = datetime.now(UTC)
        console.print(f"scenario [bold]{scenario.name}[/bold]: {scenario.description}")
        with Progress(
            TextColumn("streaming"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("streams", total=len(plan(scenario)))
            report = run_load(
                scenario,
                collector.http_url,
                on_start=lambda workload: console.print(
                    f"collector {collector.http_url} · storage {config.storage_dsn} · {describe(workload)}"
                ),
                on_stream_done=lambda outcome: progress.advance(task),
            )
        wait_until_stored(collector.query_client, report.planned, since, config.store_timeout_s)
        summary = summarize(collector.query_client, service=CLIENT_SERVICE, side="client", since=since, slo_us=stall_us)
        truth = collector.query_client.query(
            "SELECT cause, count() FROM ground_truth WHERE start_time >= {since:DateTime64(6)} "
            "GROUP BY cause ORDER BY cause",
            parameters={"since": since},
        ).result_rows
        engine_events = collector.query_client.query(
            "SELECT kind, count() FROM engine_events WHERE start_time >= {since:DateTime64(6)} "
            "GROUP BY kind ORDER BY kind",
            parameters={"since": since},
        ).result_rows
    finally:
        collector.stop()
    console.print(_table(summary, stall_us, config.encoding, report, truth, engine_events))
    return summary


def _table(
    summary: Summary, stall_us: int, encoding: str, report: LoadReport, truth: list[tuple], engine_events: list[tuple]
) -> Table:
    table = Table(title=f"streamscope demo · client side · {encoding} encoding", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items()))
    rows = [
        ("streams", f"{summary.streams}"),
        ("outcomes", outcomes),
        ("TTFT p50 / p95", f"{summary.ttft_p50_ms:.0f} ms / {summary.ttft_p95_ms:.0f} ms"),
        ("gap p50 / p95 / p99", f"{summary.gap_p50_ms:.1f} / {summary.gap_p95_ms:.1f} / {summary.gap_p99_ms:.1f} ms"),
        ("p99 across streams of per-stream p99", f"{summary.p99_of_p99_ms:.0f} ms"),
        (f"ITL goodput (every gap within {stall_us / 1000:.0f} ms)", f"{summary.itl_goodput:.1%}"),
        ("first byte to first content, median", f"{summary.first_byte_lead_ms:.1f} ms"),
        (
            "tokens per chunk / wire bytes per content byte",
            f"{summary.tokens_per_chunk:.2f} / {summary.wire_per_content_byte:.1f}",
        ),
        ("cancelled or disconnected", f"{summary.cancel_rate:.1%}"),
        ("stored bytes per chunk", f"{summary.stored_bytes_per_chunk:.2f}"),
        ("injected causes (ground truth)", ", ".join(f"{cause} {n}" for cause, n in truth) or "none"),
        ("engine events (GPU agents)", ", ".join(f"{kind} {n}" for kind, n in engine_events) or "none"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
