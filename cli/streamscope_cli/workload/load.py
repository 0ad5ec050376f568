"""Drive a scenario: start its engine nodes and proxy, send its planned streams with instrumented clients.

Laid out as a deployment: each engine node (with its GPU agent) and the proxy run in processes of their own,
the clients in this one. Client spans come from ``astream_sse`` (service ``sim-client``), server spans from the
engines' ``ServerStream`` (service ``sim-engine``), ground truth from what the engines and the proxy did; all of
it goes to the collector over OTLP. Clients cancel where the plan says, by leaving the stream early. Around the
run, ``host_load.HostActivity`` puts the scenario's load on the clients' host and watches their event loop,
recording what held the loop as ground truth of the client process.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from clickhouse_connect.driver.client import Client
from opentelemetry.sdk.trace import TracerProvider

from streamscope import astream_sse, otlp_exporter, setup
from streamscope.errors import StreamscopeError
from streamscope_cli.engine.process import SPANS, TRUTH, EngineProcess, NodeRun
from streamscope_cli.proxy.process import ProxyProcess
from streamscope_cli.workload.export_tally import SpanTally, Tally
from streamscope_cli.workload.ground_truth import GroundTruthSink
from streamscope_cli.workload.host_load import HostActivity
from streamscope_cli.workload.scenario import PlannedStream, Scenario, plan
from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger
from streamscope_ingest.analysis.attribution_job import AttributionJob

CLIENT_SERVICE = "sim-client"
WORKLOAD_SERVICE = "sim-workload"


@dataclass
class RunningWorkload:
    urls: dict[str, str]
    proxy_url: str | None
    engines: list[EngineProcess] = field(default_factory=list)
    proxy: ProxyProcess | None = None

    def url_for(self, stream: PlannedStream) -> str:
        base = self.proxy_url if stream.via_proxy and self.proxy_url else self.urls[stream.node]
        return f"{base}/v1/chat/completions"

    def go(self) -> None:
        """The run starts: each node's schedule (GPU episodes, a chunking change) counts from now."""
        for engine in self.engines:
            engine.go()

    def finish_schedules(self) -> None:
        """Block until every node made the one-off changes its schedule has."""
        for engine in self.engines:
            engine.finish_schedule()

    def stop(self, exports: dict[str, Tally] | None = None) -> None:
        """Stop the proxy and the nodes; what the nodes' exporters delivered is added to ``exports``, by kind."""
        if self.proxy is not None:
            self.proxy.stop()
        for engine in reversed(self.engines):
            engine.stop({} if exports is None else exports)


def start_workload(
    scenario: Scenario, *, collector_url: str, agents: bool = True, host: str = "127.0.0.1"
) -> RunningWorkload:
    """Start the scenario's engine nodes, each in a process of its own with its GPU agent (``agents``) beside it,
    and its proxy (``ProxyProcess``), on free loopback ports; all of them export to ``collector_url``."""
    workload = RunningWorkload(urls={}, proxy_url=None)
    try:
        for config in scenario.nodes:
            run = NodeRun(
                config,
                scenario.name,
                gpu_episodes=tuple(e for e in scenario.gpu_episodes if e.node == config.node),
                chunking_regression=(
                    scenario.chunking_regression
                    if scenario.chunking_regression and scenario.chunking_regression.node == config.node
                    else None
                ),
                host_load=tuple(h for h in scenario.host_load if h.target == "server" and h.node == config.node),
                seed=scenario.seed,
                agent=agents,
            )
            workload.engines.append(EngineProcess(run, collector_url=collector_url, host=host).start())
        for engine in workload.engines:
            workload.urls[engine.node] = engine.ready().url
        if scenario.proxy:
            workload.proxy = ProxyProcess(
                {
                    "upstream": workload.urls[scenario.proxy["fronts"]],
                    "node": scenario.proxy.get("node", "proxy"),
                    "seed": scenario.seed,
                    "impairments": scenario.proxy.get("impairments", []),
                },
                collector_url=collector_url,
                scenario=scenario.name,
                host=host,
            ).start()
            workload.proxy_url = workload.proxy.url
    except BaseException:
        workload.stop()
        raise
    return workload


@dataclass
class LoadReport:
    planned: int
    outcomes: Counter[str] = field(default_factory=Counter)
    duration_s: float = 0.0
    exports: dict[str, Tally] = field(default_factory=dict)
    """What the run's exporters delivered to the collector, by kind (final once ``run_load`` returns)."""

    @property
    def finished(self) -> int:
        return sum(self.outcomes.values())

    @property
    def not_exported(self) -> dict[str, int]:
        """Of each kind of telemetry, how many items an export failed to deliver (the collector has none of them)."""
        return {kind: tally.failed for kind, tally in self.exports.items() if tally.failed}


async def drive(
    scenario: Scenario,
    workload: RunningWorkload,
    *,
    client_traces: TracerProvider | None,
    on_stream_done: Callable[[str], None] = lambda outcome: None,
    sink: GroundTruthSink | None = None,
) -> LoadReport:
    """Send every planned stream at its time; returns how each one ended (completed/cancelled/error...).

    The scenario's host load runs meanwhile, and the loop's watchdog; their ground truth goes to ``sink``.
    """
    streams = plan(scenario)
    report = LoadReport(planned=len(streams))
    gate = asyncio.Semaphore(scenario.load.concurrency)
    limits = httpx.Limits(max_connections=scenario.load.concurrency * 2, max_keepalive_connections=64)
    on_clients = [load for load in scenario.host_load if load.target != "server"]  # a server's runs on its node
    host = HostActivity(on_clients, seed=scenario.seed, sink=sink, node=CLIENT_SERVICE)
    async with host, httpx.AsyncClient(timeout=httpx.Timeout(120.0, connect=10.0), limits=limits) as client:

        async def one(stream: PlannedStream) -> None:
            await asyncio.sleep(max(0.0, stream.at_s - (time.monotonic() - started)))
            if stream.storm:  # storm prompts do not wait for a client slot: they arrive regardless
                outcome = await _stream(client, workload.url_for(stream), stream, client_traces)
            else:
                async with gate:
                    outcome = await _stream(client, workload.url_for(stream), stream, client_traces)
            report.outcomes[outcome] += 1
            on_stream_done(outcome)

        started = time.monotonic()
        workload.go()
        await asyncio.gather(*(one(stream) for stream in streams))
        await asyncio.to_thread(workload.finish_schedules)
    report.duration_s = time.monotonic() - started
    return report


async def _stream(
    client: httpx.AsyncClient, url: str, stream: PlannedStream, tracer_provider: TracerProvider | None
) -> str:
    try:
        async with astream_sse(client, "POST", url, json=stream.body(), tracer_provider=tracer_provider) as events:
            received = 0
            async for event in events:
                received += bool(event.payload)
                if stream.cancel_after_chunks is not None and received >= stream.cancel_after_chunks:
                    return "cancelled"
        return "completed"
    except httpx.RemoteProtocolError:
        return "disconnected"
    except httpx.HTTPError:
        return "error"


def run_load(
    scenario: Scenario,
    collector_url: str,
    *,
    agents: bool = True,
    on_start: Callable[[RunningWorkload], None] = lambda workload: None,
    on_stream_done: Callable[[str], None] = lambda outcome: None,
) -> LoadReport:
    """Run ``scenario`` end to end, exporting spans and ground truth to the collector at ``collector_url``.

    With ``agents``, a GPU agent beside each engine node scrapes its /metrics into the collector meanwhile, and
    the node's simulated GPU from the dcgm-exporter endpoint the node serves (there is no NVML to read).
    """
    exports = {"client stream spans": Tally(), SPANS: Tally(), TRUTH: Tally()}
    client_traces = setup(
        CLIENT_SERVICE,
        set_global=False,
        exporter=SpanTally(otlp_exporter(collector_url), exports["client stream spans"]),
    )
    truth_logs = ground_truth_logger(WORKLOAD_SERVICE, collector_url, exports[TRUTH])
    sink = OtlpGroundTruthSink(truth_logs, scenario=scenario.name)
    workload = start_workload(scenario, collector_url=collector_url, agents=agents)
    try:
        on_start(workload)
        report = asyncio.run(
            drive(scenario, workload, client_traces=client_traces, on_stream_done=on_stream_done, sink=sink)
        )
    finally:
        workload.stop(exports)
        for provider in (client_traces, truth_logs):
            provider.shutdown()
    report.exports = exports  # counted to the end as the providers shut down above
    return report


def describe(workload: RunningWorkload) -> str:
    """Where the workload's parts listen, in a line for people watching a run."""
    engines = ", ".join(f"{node} {url}" for node, url in workload.urls.items())
    return f"engines {engines}" + (f" · proxy {workload.proxy_url}" if workload.proxy_url else "")


def wait_until_stored(
    client: Client, expected: int, since: datetime, timeout_s: float, service: str = CLIENT_SERVICE
) -> None:
    """Block until ``expected`` streams of ``service`` started since ``since`` are in the store (spans arrive
    batched)."""
    deadline = time.monotonic() + timeout_s
    query = "SELECT count() FROM streams WHERE service = {service:String} AND start_time >= {since:DateTime64(6)}"
    stored = 0
    while time.monotonic() < deadline:
        stored = client.query(query, parameters={"service": service, "since": since}).result_rows[0][0]
        if stored >= expected:
            return
        time.sleep(0.2)
    raise StreamscopeError(f"only {stored} of {expected} streams reached the store within {timeout_s:g} s")


def attribute_settled(client: Client, settle_s: float = 2.0) -> int:
    """Once a run is stored: wait ``settle_s`` for the agents' last events, then attribute every stream now.

    Runs that end (demo, eval) do this instead of the collector's periodic job, which holds streams back
    until they settle and would race this pass for the watermark. Returns the stalls written.
    """
    time.sleep(settle_s)
    return AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC))
