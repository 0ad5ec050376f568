"""``streamscope demo``: a scenario end to end on this machine, then its timing distributions.

Starts an embedded collector, runs the scenario's workload against it (engine nodes, the impairment proxy,
instrumented clients; ``mixed`` by default), waits until every stream is stored, attributes the stalls, and
summarises them with SQL on the store, next to the ground truth of what was injected. With ``chat_port`` it
then serves the demo chat page (``streamscope_cli.demo.chat``) against the same collector until Ctrl-C.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from streamscope import Encoding, env, set_default_encoding
from streamscope_cli.demo.chat import serve_chat, start_chat
from streamscope_cli.workload.evaluate import busy_machine
from streamscope_cli.workload.load import LoadReport, attribute_settled, describe, run_load, wait_until_stored
from streamscope_cli.workload.scenario import load_scenario, plan
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_dashboards.fleet import Summary, summarize
from streamscope_dashboards.macros import QueryContext
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution_job import AttributionJob, PeriodicAttribution
from streamscope_ingest.analysis.evaluation import STALL_CAUSES, Score, score
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.store import sql


@dataclass(frozen=True)
class DemoConfig:
    scenario: str = "mixed"
    streams: int | None = None
    """Override the scenario's number of streams (for a quicker run)."""
    storage_dsn: str = field(default_factory=env.default_storage_dsn)
    encoding: Encoding = "packed"
    store_timeout_s: float = 60.0
    chat_port: int | None = None
    """After the run, serve the demo chat page on this port until Ctrl-C (None: finish)."""


def run_demo(config: DemoConfig, console: Console | None = None) -> Summary:
    console = console or Console()
    scenario = load_scenario(config.scenario)
    if config.streams is not None:
        scenario = replace(scenario, load=replace(scenario.load, streams=config.streams))
    set_default_encoding(config.encoding)
    stall = StallRule.configured()
    stall_us = stall.threshold_us
    with console.status(f"starting the collector on {config.storage_dsn}"):
        collector = Collector(
            CollectorConfig(
                storage_dsn=config.storage_dsn,
                http_port=0,
                grpc_port=None,
                stall=stall,
                attribution_interval_s=None,  # attributed once, below, when the run is complete
                cors_origins=_chat_origins(config.chat_port),
            )
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
        client = collector.query_client
        with console.status(f"storing the {report.planned} streams") as status:
            wait_until_stored(client, report.planned, since, config.store_timeout_s)
            status.update("attributing their stalls (the engines' last events first)")
            attribute_settled(client)
            status.update("summarising, and scoring the stalls against the ground truth")
            ctx = QueryContext(since - timedelta(seconds=1), datetime.now(UTC), timedelta(seconds=10))
            summary = summarize(lambda query: sql.parse_result(sql.query_json(client, query)), ctx, stall_us)
            params = {"since": since}
            scored = score(client, since, stall)
        records = client.query(
            "SELECT cause, count() FROM ground_truth WHERE start_time >= {since:DateTime64(6)} "
            "GROUP BY cause ORDER BY cause",
            parameters=params,
        ).result_rows
        truth = _injected([r for r in records if not scored.machine_own(r[0])], scored)
        own = _injected([r for r in records if scored.machine_own(r[0])], scored)
        stalls = client.query(
            "SELECT cause, count() FROM stalls WHERE start_time >= {since:DateTime64(6)} GROUP BY cause ORDER BY cause",
            parameters=params,
        ).result_rows
        slow_starts = client.query(
            "SELECT cause, count() FROM slow_starts WHERE start_time >= {since:DateTime64(6)} "
            "GROUP BY cause ORDER BY cause",
            parameters=params,
        ).result_rows
        engine_events = client.query(
            "SELECT kind, count() FROM engine_events WHERE start_time >= {since:DateTime64(6)} "
            "GROUP BY kind ORDER BY kind",
            parameters=params,
        ).result_rows
        if note := busy_machine(scored):
            console.print(f"[bold yellow]{note}[/bold yellow]")
        console.print(
            _table(
                summary,
                stall_us,
                config.encoding,
                report,
                {
                    "injected causes (ground truth), by the stalls they made": truth,
                    "this machine's own pauses (not injected), by the stalls they made": own,
                    "attributed stalls": stalls,
                    "attributed slow starts (first token 1 s or more late)": slow_starts,
                    "engine events (GPU agents)": engine_events,
                },
            )
        )
        if config.chat_port is not None:
            _serve_chat(collector, config.chat_port, console)
    finally:
        collector.stop()
    console.print(f"Next: streamscope report --storage {config.storage_dsn} --since 10m")
    return summary


def _injected(records: Sequence[Sequence[Any]], scored: Score) -> list[tuple[str, str]]:
    """Each injected cause with what it did to the client: the stalls and slow starts it made (the units of the
    attributed rows beside it) and the records that slowed content by less than either; a cause that makes no
    stalls (a change of chunking) by its records."""
    found = []
    for cause, n in records:
        if cause not in STALL_CAUSES:
            found.append((cause, str(n)))
            continue
        waits = sum(count for (label, _), count in scored.confusion.items() if label == cause)
        starts = scored.slow_start_labels[cause]
        slowed = scored.injected[cause] - scored.made_a_stall[cause]
        made = f"{waits - starts} stalls" + (f", {starts} slow starts" if starts else "")
        found.append((cause, made + (f" ({slowed} slowed, no stall)" if slowed else "")))
    return found


def _chat_origins(port: int | None) -> tuple[str, ...]:
    return () if port is None else (f"http://127.0.0.1:{port}", f"http://localhost:{port}")


def _serve_chat(collector: Collector, port: int, console: Console) -> None:
    """The chat page on ``port`` until Ctrl-C, its streams attributed every few seconds meanwhile."""
    client = store.connect(collector.target)  # the job's own connection: one per thread on the embedded engine
    attribution = PeriodicAttribution(AttributionJob(client, settle_s=2.0), interval_s=2.0).start()
    try:
        serve_chat(start_chat(collector.http_url, port=port), announce=console.print)
    finally:
        attribution.stop()
        client.close()


def _table(
    summary: Summary, stall_us: int, encoding: str, report: LoadReport, counts: dict[str, Sequence[Sequence[Any]]]
) -> Table:
    table = Table(title=f"streamscope demo · client side · {encoding} encoding", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    outcomes = ", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items()))
    rows = [*summary.rows(stall_us), ("outcomes", outcomes)]
    rows += [(title, ", ".join(f"{name} {n}" for name, n in found) or "none") for title, found in counts.items()]
    for name, value in rows:
        table.add_row(name, value)
    return table
