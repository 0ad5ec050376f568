"""`streamscope load`: drive a scenario against a running collector, as a long-lived demo stack does."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from streamscope_cli.options import collector_option, fail_plainly

if TYPE_CHECKING:
    from streamscope_cli.workload.load import LoadReport
    from streamscope_cli.workload.scenario import Scenario


@click.command()
@click.argument("scenario")
@collector_option("OTLP/HTTP base URL of the collector that receives spans and ground truth.")
@click.option("--loop", is_flag=True, help="Run the scenario again and again (for a long-lived demo stack).")
@fail_plainly
def load(scenario: str, collector_url: str, loop: bool) -> None:
    """Drive SCENARIO (a shipped name or a YAML file) with instrumented clients.

    Starts the scenario's engine nodes and proxy, sends its streams, and exports client spans, server
    spans and ground truth to the collector. Exits 1 when some of them could not be exported (with --loop,
    says so and goes on). Shipped scenarios: steady, prefill-storm, kv-pressure,
    spec-collapse, gateway-buffering, flaky-network, chunking-regression, mixed.

    \b
    Example:
      streamscope load kv-pressure --collector http://127.0.0.1:4318
    """
    from streamscope_cli.workload.scenario import load_scenario

    spec = load_scenario(scenario)
    while True:
        report = _run_with_progress(spec, collector_url)
        click.echo(", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items())))
        if report.not_exported:
            lost = ", ".join(f"{n} {kind}" for kind, n in report.not_exported.items())
            click.echo(f"not exported to {collector_url} (is a collector listening there?): {lost}", err=True)
            if not loop:
                raise SystemExit(1)
        if not loop:
            break


def _run_with_progress(spec: Scenario, collector_url: str) -> LoadReport:
    """One run of the scenario, with a progress bar."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from streamscope_cli.workload.load import describe, run_load
    from streamscope_cli.workload.scenario import plan

    with Progress(TextColumn(spec.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
        task = progress.add_task("streams", total=len(plan(spec)))
        report = run_load(
            spec,
            collector_url,
            on_start=lambda workload: progress.console.print(describe(workload)),
            on_stream_done=lambda outcome: progress.advance(task),
        )
    return report
