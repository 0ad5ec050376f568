"""`streamscope gpu-agent`: run the node's telemetry agent, or print one scrape to check what it reads.

The agent and the collector's signal handling are imported when the command runs, so `streamscope --help`
does not load them.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from streamscope_cli.options import collector_option, fail_plainly

if TYPE_CHECKING:
    from streamscope_gpu_agent.agent import GpuAgent
    from streamscope_gpu_agent.events import EngineEvent
    from streamscope_gpu_agent.samples import Sample


@click.command("gpu-agent")
@click.option("--node", required=True, help="This node's name, as the engine's server spans carry it.")
@click.option("--engine-url", default=None, metavar="URL", help="The engine's metrics endpoint (…/metrics).")
@collector_option("OTLP/HTTP base URL of the collector the agent sends to.")
@click.option("--engine-interval-ms", default=250, show_default=True, type=click.IntRange(10, 600_000))
@click.option("--gpu-interval-ms", default=1000, show_default=True, type=click.IntRange(10, 600_000))
@click.option(
    "--dcgm-url",
    default=None,
    metavar="URL",
    help="Read the GPUs from NVIDIA's dcgm-exporter (…:9400/metrics) instead of through NVML.",
)
@click.option("--no-gpu", is_flag=True, help="Do not read the GPUs (engine telemetry only).")
@click.option(
    "--once",
    is_flag=True,
    help="Print what the agent would report first (two engine scrapes an interval apart, the GPUs read once: "
    "samples and events) and exit.",
)
@click.option("--json", "as_json", is_flag=True, help="With --once: print JSON.")
@fail_plainly
def gpu_agent(
    node: str,
    engine_url: str | None,
    collector_url: str,
    engine_interval_ms: int,
    gpu_interval_ms: int,
    dcgm_url: str | None,
    no_gpu: bool,
    once: bool,
    as_json: bool,
) -> None:
    """Sample the serving engine and the GPUs of this node and send them to the collector.

    \b
    Examples:
      streamscope gpu-agent --node gpu-7 --engine-url http://127.0.0.1:8000/metrics
      streamscope gpu-agent --node gpu-7 --engine-url http://127.0.0.1:8000/metrics --once --json
      streamscope gpu-agent --node gpu-7 --engine-url http://127.0.0.1:8000/metrics \
          --dcgm-url http://127.0.0.1:9400/metrics
    """
    if no_gpu and dcgm_url:
        raise click.UsageError("--no-gpu reads no GPU, so --dcgm-url would be ignored: give one of them")
    from streamscope_gpu_agent.agent import AgentConfig, GpuAgent

    config = AgentConfig(
        node=node,
        engine_url=engine_url,
        collector_url=None if once else collector_url,
        engine_interval_s=engine_interval_ms / 1000,
        gpu_interval_s=gpu_interval_ms / 1000,
        dcgm_url=dcgm_url,
        gpu=not no_gpu,
    )
    agent = GpuAgent(config)
    if once:
        print_report(*agent.collect_once(), as_json)
    else:
        run_agent(agent, announce=click.echo)


def print_report(samples: list[Sample], events: list[EngineEvent], as_json: bool) -> None:
    """Show a report as the agent would send it, to check an engine's metrics before running the agent."""
    if as_json:
        report = {
            "samples": [dataclasses.asdict(s) for s in samples],
            "events": [dataclasses.asdict(e) for e in events],
        }
        print(json.dumps(report, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("source", "metric", "engine", "gpu", "value", title="samples")
    for s in samples:
        table.add_row(s.source, s.metric, s.engine, s.gpu_uuid, f"{s.value:g}")
    Console().print(table)
    found = Table("kind", "engine", "gpu", "magnitude", "lasted", title="events")
    for e in events:
        lasted = "" if e.end_ns is None else f"{(e.end_ns - e.start_ns) / 1e9:.2f} s"
        found.add_row(e.kind, e.engine, e.gpu_uuid, f"{e.magnitude:g}", lasted)
    Console().print(found if events else "no events")


def run_agent(agent: GpuAgent, announce: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """Start the agent and block until SIGINT/SIGTERM (or ``stop``), then stop it cleanly."""
    from streamscope_collector.serving import stop_on_signals, wait_until_set

    with stop_on_signals(stop or threading.Event()) as stop:
        agent.start()
        config = agent.config
        announce(f"gpu agent for {config.node}: engine {config.engine_url or 'none'} -> {config.collector_url}")
        try:
            wait_until_set(stop)
        finally:
            agent.stop()
