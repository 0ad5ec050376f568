"""What `streamscope gpu-agent` does around the agent: print one scrape, or run until a signal."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable

from streamscope_collector.serving import stop_on_signals, wait_until_set
from streamscope_gpu_agent.agent import GpuAgent
from streamscope_gpu_agent.samples import Sample


def print_samples(samples: list[Sample], as_json: bool) -> None:
    if as_json:
        print(json.dumps([dataclasses.asdict(s) for s in samples], indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table("source", "metric", "engine", "gpu", "value")
    for s in samples:
        table.add_row(s.source, s.metric, s.engine, s.gpu_uuid, f"{s.value:g}")
    Console().print(table)


def run_agent(agent: GpuAgent, announce: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """Start the agent and block until SIGINT/SIGTERM (or ``stop``), then stop it cleanly."""
    with stop_on_signals(stop or threading.Event()) as stop:
        agent.start()
        config = agent.config
        announce(f"gpu agent for {config.node}: engine {config.engine_url or 'none'} -> {config.collector_url}")
        try:
            wait_until_set(stop)
        finally:
            agent.stop()
