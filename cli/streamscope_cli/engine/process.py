"""A simulated engine node in a process of its own, as a serving node is another machine in a deployment.

In the clients' process, a node would slow whenever the clients' host is busy (it would wait for their
interpreter), and a starved client would look like a slow engine: a correlation no deployment has. In its own
process it is scheduled as any server on a busy machine is. Its spans and ground truth travel over OTLP to the
collector, and its GPU agent runs beside it, as on a serving node. A watchdog on the loop that serves it records
each time that loop ran late as ``server_host`` ground truth: the serving process's own host, which the server
spans' host watch reports.

The child is ``python -m streamscope_cli.engine.process COLLECTOR_URL HOST``. It reads one line, the node's
``NodeRun`` (pickled, base64), prints the port it bound, and starts the scenario's schedule for the node (GPU
episodes, a chunking change) when it reads ``go``, and says when it made the chunking change. It serves until
SIGTERM, then prints what its exporters delivered as one JSON line.
"""

from __future__ import annotations

import base64
import json
import pickle
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import httpx

from streamscope.errors import StreamscopeError
from streamscope_cli.child import START_TIMEOUT_S, STOP_TIMEOUT_S, ChildProcess
from streamscope_cli.engine.app import NodeConfig
from streamscope_cli.workload.export_tally import Tally

if TYPE_CHECKING:
    from streamscope_cli.engine.app import EngineNode
    from streamscope_cli.workload.host_load import HostActivity
    from streamscope_cli.workload.scenario import ChunkingRegression, GpuEpisode, HostLoad

ENGINE_SERVICE = "sim-engine"
GPU_INTERVAL_S = 0.25
"""The agents read the simulated GPUs as often as the engines: a throttle opens and closes within a second."""
CHANGED = "chunking changed"
"""What the child prints once it made its chunking change."""
SPANS = "engine spans"
TRUTH = "ground-truth records"


@dataclass(frozen=True)
class NodeRun:
    """What one node's process serves and does on its own clock."""

    config: NodeConfig
    scenario: str
    gpu_episodes: tuple[GpuEpisode, ...] = ()
    chunking_regression: ChunkingRegression | None = None
    host_load: tuple[HostLoad, ...] = ()
    """Blocks of the node's serving loop (``target: server``)."""
    seed: int = 0
    agent: bool = True
    """A GPU agent beside the node, reading its /metrics and its simulated GPU's dcgm-exporter endpoint."""


class EngineProcess:
    """One node served by a child process on a free port of ``host``, exporting to ``collector_url``."""

    def __init__(self, run: NodeRun, *, collector_url: str, host: str = "127.0.0.1") -> None:
        self.node = run.config.node
        self._regression = run.chunking_regression
        self._run = base64.b64encode(pickle.dumps(run)).decode()
        self._host = host
        self._child = ChildProcess(
            "streamscope_cli.engine.process", collector_url, host, name=f"engine {run.config.node}"
        )
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> EngineProcess:
        """Start the child; ``ready`` waits for it (start several, then wait for each)."""
        self._child.start()
        self._child.send(self._run)
        return self

    def ready(self) -> EngineProcess:
        self.port = self._child.port()
        return self

    def go(self) -> None:
        """The run starts now: the node's schedule counts from here."""
        self._child.send("go")

    def finish_schedule(self) -> None:
        """Block until the node made the one-off change its schedule has (a chunking change), if any: a run lasts
        until then, even when its streams ended earlier."""
        if self._regression is not None:
            said = self._child.line(self._regression.at_s + STOP_TIMEOUT_S)
            if said != CHANGED:
                raise StreamscopeError(f"{self._child.name} did not make its chunking change (it printed {said!r})")

    def stop(self, exports: dict[str, Tally]) -> None:
        """SIGTERM: in-flight streams finish, the exporters flush; what they delivered is added to ``exports``."""
        printed = self._child.stop().strip().splitlines()
        counts = json.loads(printed[-1]) if printed and printed[-1].startswith("{") else {}
        for kind, (exported, failed) in counts.items():
            exports.setdefault(kind, Tally()).add(exported, failed)


def _serve(collector_url: str, host: str) -> None:
    from streamscope import otlp_exporter, setup
    from streamscope_cli.engine.app import EngineNode
    from streamscope_cli.workload.export_tally import SpanTally
    from streamscope_cli.workload.host_load import HostActivity
    from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger
    from streamscope_collector.serving import BackgroundServer, stop_on_signals, wait_until_set
    from streamscope_gpu_agent.agent import AgentConfig, GpuAgent

    run: NodeRun = pickle.loads(base64.b64decode(sys.stdin.readline()))
    tallies = {SPANS: Tally(), TRUTH: Tally()}
    traces = setup(ENGINE_SERVICE, set_global=False, exporter=SpanTally(otlp_exporter(collector_url), tallies[SPANS]))
    logs = ground_truth_logger(ENGINE_SERVICE, collector_url, tallies[TRUTH])
    sink = OtlpGroundTruthSink(logs, scenario=run.scenario)
    node = EngineNode(run.config, sink=sink, tracer_provider=traces)
    serving = HostActivity(run.host_load, seed=run.seed, sink=sink, node=run.config.node, cause="server_host")
    watched = _Watched(node.app, serving)
    server = BackgroundServer(watched, host, 0, name=f"engine-{run.config.node}")
    url = f"http://{host}:{server.port}"
    agent = (
        GpuAgent(
            AgentConfig(
                node=run.config.node,
                engine_url=f"{url}/metrics",
                collector_url=collector_url,
                dcgm_url=f"{url}/dcgm/metrics",
                gpu_interval_s=GPU_INTERVAL_S,
            )
        )
        if run.agent
        else None
    )
    stop = threading.Event()
    try:
        with stop_on_signals(stop):
            server.start()
            # the first request starts the serving loop's watchdog
            httpx.get(f"{url}/health", timeout=START_TIMEOUT_S, trust_env=False).raise_for_status()
            if agent is not None:
                agent.start()
            print(server.port, flush=True)
            threading.Thread(target=_schedule_on_go, args=(run, node, stop), daemon=True).start()
            wait_until_set(stop)
    finally:
        if agent is not None:
            agent.stop()
        server.stop()
        traces.shutdown()
        logs.shutdown()
        print(json.dumps({kind: [t.exported, t.failed] for kind, t in tallies.items()}), flush=True)


class _Watched:
    """The node's app, with a watchdog on the loop that serves it (and the scenario's blocks of that loop), started
    by the first request (the loop runs only then): each time the serving loop ran late is ``server_host`` ground
    truth of the node, as the clients' watchdog records their own host's."""

    def __init__(self, app: Any, activity: HostActivity) -> None:
        self.app, self._activity, self._started = app, activity, False

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if not self._started:
            self._started = True
            await self._activity.__aenter__()  # its tasks end with the loop
        await self.app(scope, receive, send)


def _schedule_on_go(run: NodeRun, node: EngineNode, stop: threading.Event) -> None:
    """Once ``go`` arrives: each GPU episode at its start and every period after, the chunking change at its
    time, until the node stops."""
    if sys.stdin.readline().strip() != "go":
        return
    started = time.monotonic()
    for episode in run.gpu_episodes:
        threading.Thread(target=_repeat, args=(episode, node, stop, started), daemon=True).start()
    regression = run.chunking_regression
    if regression is not None and not stop.wait(regression.at_s):
        node.set_output(replace(node.output, tokens_per_chunk=regression.tokens_per_chunk))
        print(CHANGED, flush=True)


def _repeat(episode: GpuEpisode, node: EngineNode, stop: threading.Event, started: float) -> None:
    at = episode.start_s
    while not stop.wait(max(0.0, at - (time.monotonic() - started))):
        episode.begin(node.gpu)
        at += episode.every_s


if __name__ == "__main__":
    _serve(*sys.argv[1:3])
