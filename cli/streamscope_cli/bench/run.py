"""``streamscope bench``: load an endpoint, record its streams into an embedded collector, print the run's figures.

Laid out as a deployment: the endpoint is whatever the URL names (the load never shares its process), the
impairment proxy (``--impair``) and the GPU agent (``--metrics-url``) run in processes of their own, and the
clients in this one, recorded by the SDK with the run's id and label on their resource, so ``compare`` can find
the run again in the store.
"""

from __future__ import annotations

import asyncio
import re
import secrets
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from streamscope import otlp_exporter, setup
from streamscope.errors import ConfigError, StreamscopeError
from streamscope.semconv import STREAMSCOPE_BENCH_LABEL, STREAMSCOPE_BENCH_RUN
from streamscope_cli.bench.driver import BenchReport, drive
from streamscope_cli.bench.figures import RunStreams, read_run, stalls_by_cause
from streamscope_cli.bench.plan import BenchPlan
from streamscope_cli.child import CommandProcess
from streamscope_cli.workload.export_tally import SpanTally, Tally

if TYPE_CHECKING:
    from streamscope_collector.service import Collector

BENCH_SERVICE = "streamscope-bench"
BENCH_GATEWAY_SERVICE = "streamscope-bench-gateway"


@dataclass(frozen=True)
class BenchRun:
    """What a finished run gives: its streams, its stalls by cause, how its clients saw it end."""

    streams: RunStreams
    stalls: list[tuple[str, int]]
    report: BenchReport
    not_exported: int
    engine_events: list[tuple[str, int]] | None = None
    """What the GPU agent derived from the engine's /metrics during the run, by kind (None: not scraped)."""
    engine_scrapes: int = 0
    """How many times the agent read the engine's /metrics during the run."""


def new_run_id() -> str:
    """A run id that sorts by time and does not collide: ``20261129T011500-a3f2c1``."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(3)}"


def parse_impairment(spec: str) -> dict[str, Any]:
    """``KIND:key=value,...`` (``stall:duration_ms=300,probability=0.05``) as the proxy's rule mapping; the proxy's
    own check says what is wrong with a value."""
    kind, _, rest = spec.partition(":")
    rule: dict[str, Any] = {"kind": kind.strip()}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(
                f"--impair {spec!r}: {item!r} is not key=value (e.g. stall:duration_ms=300,probability=0.05)"
            )
        rule[key.strip()] = _value(value.strip())
    return rule


def _value(text: str) -> Any:
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    try:
        return float(text)
    except ValueError:
        return text


def run_bench(plan: BenchPlan, *, storage_dsn: str, otlp_port: int | None = None, **options: Any) -> BenchRun:
    """Run ``plan`` against its endpoint with an embedded collector on ``storage_dsn``, listening on ``otlp_port``
    if given (an instrumented endpoint exports its own side there, and the run waits for it); the run's figures
    (``options``: those of ``bench_into``)."""
    from streamscope_collector.config import CollectorConfig
    from streamscope_collector.service import Collector

    collector = Collector(
        CollectorConfig(storage_dsn=storage_dsn, http_port=otlp_port or 0, grpc_port=None, attribution_interval_s=None)
    ).start()
    try:
        return bench_into(collector, plan, endpoint_side=otlp_port is not None, **options)
    finally:
        collector.stop()


def bench_into(
    collector: Collector,
    plan: BenchPlan,
    *,
    impairments: Sequence[dict[str, Any]] = (),
    gateway: bool = False,
    endpoint_side: bool = False,
    metrics_url: str | None = None,
    node: str | None = None,
    store_timeout_s: float = 120.0,
    announce: Callable[[str], None] = print,
    on_done: Callable[[str], None] = lambda outcome: None,
) -> BenchRun:
    """Run ``plan`` against its endpoint, recorded into ``collector`` (which attributes nothing by itself: the run
    is attributed once stored); the run's figures. With ``gateway``, the streams go through a recording gateway in
    front of the endpoint (the path's impairments, if any, between the clients and it), so stalls are split
    between the endpoint and the path. With ``endpoint_side``, the endpoint records its own side into
    ``collector`` too: the run waits a while for it (an exporter sends in batches)."""
    from streamscope_cli.workload.load import attribute_settled, wait_until_stored

    client = collector.query_client
    if stored_streams(client, plan.run_id):
        raise ConfigError(f"--run-id {plan.run_id} names a run already in this store: give another, or none")
    tally = Tally()
    node = node or urlsplit(plan.url).netloc
    with ExitStack() as parts:
        if gateway:
            plan = replace(plan, url=_gateway(plan, node, collector.http_url, parts, announce))
        if impairments:
            plan = replace(plan, url=_impaired(plan, impairments, collector.http_url, parts, announce))
        if metrics_url:
            _start_agent(metrics_url, node, collector.http_url, parts, announce)
        announce(f"run {plan.run_id}{f' ({plan.label})' if plan.label else ''}: {plan.describe()}")
        provider = setup(
            BENCH_SERVICE,
            set_global=False,
            exporter=SpanTally(otlp_exporter(collector.http_url), tally),
            resource_attributes={STREAMSCOPE_BENCH_RUN: plan.run_id, STREAMSCOPE_BENCH_LABEL: plan.label},
        )
        try:
            report = asyncio.run(drive(plan, provider, on_done))
        finally:
            provider.shutdown()
    announce(f"storing the run's {tally.exported} streams, then attributing their stalls")
    since = datetime.fromtimestamp(report.started_ns / 1e9, UTC)
    wait_until_stored(client, tally.exported, since, store_timeout_s, service=BENCH_SERVICE)
    if gateway:  # its spans arrive on their own; a stream that never reached it has none (an error before it)
        try:
            wait_until_stored(client, report.sent, since, 10.0, service=BENCH_GATEWAY_SERVICE)
        except StreamscopeError as exc:
            announce(f"the gateway's side: {exc}; attributed without it where it is missing")
    if endpoint_side:
        served = wait_for_served(client, plan.run_id, report.sent, ENDPOINT_SIDE_WAIT_S)
        announce(f"the endpoint's own side: {served} of {report.sent} streams" + (
            "" if served == report.sent else " (is it exporting to this run's collector? attributed without it)"
        ))  # fmt: skip
    attribute_settled(client)
    query = _query(client)
    run = BenchRun(read_run(query, plan.run_id), stalls_by_cause(query, plan.run_id), report, tally.failed)
    return replace(run, **_engine(client, node, report)) if metrics_url else run


def _impaired(
    plan: BenchPlan,
    impairments: Sequence[dict[str, Any]],
    collector_url: str,
    parts: ExitStack,
    announce: Callable[[str], None],
) -> str:
    """Start the impairment proxy in front of the plan's server; the same API URL through it."""
    from streamscope_cli.proxy.process import ProxyProcess

    url = urlsplit(plan.url)
    upstream = f"{url.scheme}://{url.netloc}"
    config = {"upstream": upstream, "node": "bench-impairment", "seed": plan.seed, "impairments": list(impairments)}
    try:
        proxy = ProxyProcess(config, collector_url=collector_url, scenario="bench").start()
    except ValueError as exc:
        raise ConfigError(f"--impair: {exc}") from None
    parts.callback(proxy.stop)
    announce(f"impairment proxy {proxy.url} -> {upstream} ({len(impairments)} rules)")
    return proxy.url + url.path


def _gateway(plan: BenchPlan, node: str, collector_url: str, parts: ExitStack, announce: Callable[[str], None]) -> str:
    """Start ``streamscope gateway`` in front of the plan's server, recording into the run's collector as the
    gateway side of each stream (its upstream named ``node``, as the GPU agent names it); the API URL through it."""
    url = urlsplit(plan.url)
    upstream = f"{url.scheme}://{url.netloc}"
    arguments = ["--upstream", upstream, "--port", "0", "--collector", collector_url, "--node", node]
    gateway = parts.enter_context(CommandProcess("gateway", *arguments, "--service-name", BENCH_GATEWAY_SERVICE))
    announce(f"recording gateway {gateway.listening_url} -> {upstream}")
    return gateway.listening_url + url.path


def _start_agent(
    metrics_url: str, node: str, collector_url: str, parts: ExitStack, announce: Callable[[str], None]
) -> None:
    """The GPU agent reading the engine's /metrics into the run's collector (no GPU read: it is not this host's)."""
    agent = CommandProcess(
        "gpu-agent", "--node", node, "--engine-url", metrics_url, "--collector", collector_url, "--no-gpu"
    )
    parts.enter_context(agent)
    announce(f"gpu agent reading {metrics_url} as node {node}")


def stored_streams(client: Any, run_id: str) -> int:
    """How many client streams of the run ``run_id`` the store holds."""
    return int(
        client.query(
            f"SELECT count() FROM streams WHERE side = 'client' AND resource_attributes['{STREAMSCOPE_BENCH_RUN}'] = "
            "{run:String}",
            parameters={"run": run_id},
        ).result_rows[0][0]
    )


ENDPOINT_SIDE_WAIT_S = 15.0
"""How long a run waits for an instrumented endpoint's own spans once its clients' are stored: an exporter sends
its batches every few seconds (OpenTelemetry's default: 5)."""


def wait_for_served(client: Any, run_id: str, expected: int, timeout_s: float) -> int:
    """How many of the run's streams have a server side stored, once ``expected`` do or ``timeout_s`` passed."""
    query = (
        "SELECT uniqExact(trace_id) FROM streams WHERE side = 'server' AND trace_id IN (SELECT trace_id FROM streams "
        f"WHERE side = 'client' AND resource_attributes['{STREAMSCOPE_BENCH_RUN}'] = {{run:String}})"
    )
    deadline = time.monotonic() + timeout_s
    while True:
        served = int(client.query(query, parameters={"run": run_id}).result_rows[0][0])
        if served >= expected or time.monotonic() >= deadline:
            return served
        time.sleep(0.2)


def _engine(client: Any, node: str, report: BenchReport) -> dict[str, Any]:
    """The agent's scrapes of the engine during the run, and the events it derived, by kind."""
    window = (
        "node_name = {node:String} AND start_time BETWEEN fromUnixTimestamp64Nano({start:Int64}) "
        "AND fromUnixTimestamp64Nano({end:Int64})"
    )
    parameters = {"node": node, "start": report.started_ns, "end": report.ended_ns}
    events = client.query(
        f"SELECT kind, count() AS n FROM engine_events WHERE {window} GROUP BY kind ORDER BY n DESC, kind",
        parameters=parameters,
    ).result_rows
    scrapes = client.query(
        f"SELECT count() FROM engine_samples WHERE {window.replace('start_time', 'time')} AND metric = 'engine_up'",
        parameters=parameters,
    ).result_rows[0][0]
    return {"engine_events": [(str(kind), int(n)) for kind, n in events], "engine_scrapes": int(scrapes)}


def _query(client: Any) -> Callable[[str], Any]:
    from streamscope_ingest.store import sql

    return lambda text: sql.parse_result(sql.query_json(client, text))
