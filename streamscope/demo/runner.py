"""``streamscope demo``: record real streamed responses end to end and print their timing distributions.

Starts an embedded collector and the jittery demo engine on loopback, streams concurrent instrumented
requests against it (client spans from ``astream_sse``, server spans from ``ServerStream``), waits until the
collector has stored every stream, and summarises them with SQL on the store.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from collector.config import CollectorConfig
from collector.service import Collector
from ingest.summary import Summary, summarize
from streamscope import env
from streamscope._internal.httpx_client import astream_sse
from streamscope._internal.recorder import Encoding
from streamscope._internal.serving import BackgroundServer
from streamscope._internal.setup import setup
from streamscope.demo.jitter_server import JitterProfile, create_app
from streamscope.errors import StreamscopeError

CLIENT_SERVICE = "demo-client"
ENGINE_SERVICE = "demo-engine"


@dataclass(frozen=True)
class DemoConfig:
    streams: int = 200
    concurrency: int = 32
    storage_dsn: str = field(default_factory=env.default_storage_dsn)
    encoding: Encoding = "packed"
    seed: int | None = None
    profile: JitterProfile = field(default_factory=JitterProfile)
    store_timeout_s: float = 60.0


def run_demo(config: DemoConfig, console: Console | None = None) -> Summary:
    console = console or Console()
    stall_us = env.stall_threshold_us()
    collector = Collector(
        CollectorConfig(storage_dsn=config.storage_dsn, http_port=0, grpc_port=None, stall_threshold_us=stall_us)
    ).start()
    providers = []
    engine = None
    try:
        client_traces = setup(CLIENT_SERVICE, endpoint=collector.http_url, encoding=config.encoding, set_global=False)
        engine_traces = setup(ENGINE_SERVICE, endpoint=collector.http_url, encoding=config.encoding, set_global=False)
        providers = [client_traces, engine_traces]
        engine = BackgroundServer(
            create_app(config.profile, seed=config.seed, tracer_provider=engine_traces), name="demo-engine"
        ).start()
        since = datetime.now(UTC)
        console.print(
            f"collector {collector.http_url} · storage {config.storage_dsn} · engine http://127.0.0.1:{engine.port}"
        )
        failures = asyncio.run(_load(config, f"http://127.0.0.1:{engine.port}", client_traces, console))
        for provider in providers:
            provider.force_flush()
        _wait_until_stored(collector, config.streams - failures, since, config.store_timeout_s)
        assert collector.pipeline is not None
        summary = summarize(
            collector.query_client, service=CLIENT_SERVICE, side="client", since=since, stall_threshold_us=stall_us
        )
    finally:
        if engine is not None:
            engine.stop()
        for provider in providers:
            provider.shutdown()
        collector.stop()
    console.print(_table(summary, stall_us, config.encoding))
    if failures:
        console.print(f"[yellow]{failures} stream(s) failed on the client side[/yellow]")
    return summary


async def _load(config: DemoConfig, engine_url: str, tracer_provider, console: Console) -> int:
    gate = asyncio.Semaphore(config.concurrency)
    failures = 0
    body = {
        "model": "demo-llm",
        "messages": [{"role": "user", "content": "Tell me about token streams."}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    limits = httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency)
    async with httpx.AsyncClient(base_url=engine_url, timeout=30.0, limits=limits) as client:
        with Progress(
            TextColumn("streaming"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as progress:
            task = progress.add_task("streams", total=config.streams)

            async def one() -> None:
                nonlocal failures
                async with gate:
                    try:
                        async with astream_sse(
                            client, "POST", "/v1/chat/completions", json=body, tracer_provider=tracer_provider
                        ) as events:
                            async for _ in events:
                                pass
                    except httpx.HTTPError:
                        failures += 1
                    progress.advance(task)

            await asyncio.gather(*(one() for _ in range(config.streams)))
    return failures


def _wait_until_stored(collector: Collector, expected: int, since: datetime, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    query = "SELECT count() FROM streams WHERE service = {service:String} AND start_time >= {since:DateTime64(6)}"
    stored = 0
    while time.monotonic() < deadline:
        stored = collector.query_client.query(
            query, parameters={"service": CLIENT_SERVICE, "since": since}
        ).result_rows[0][0]
        if stored >= expected:
            return
        time.sleep(0.2)
    raise StreamscopeError(f"only {stored} of {expected} streams reached the store within {timeout_s:g} s")


def _table(summary: Summary, stall_us: int, encoding: str) -> Table:
    table = Table(title=f"streamscope demo · client side · {encoding} encoding", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    rows = [
        ("streams", f"{summary.streams}"),
        ("TTFT p50 / p95", f"{summary.ttft_p50_ms:.0f} ms / {summary.ttft_p95_ms:.0f} ms"),
        ("gap p50 / p95 / p99", f"{summary.gap_p50_ms:.1f} / {summary.gap_p95_ms:.1f} / {summary.gap_p99_ms:.1f} ms"),
        ("p99 across streams of per-stream p99", f"{summary.p99_of_p99_ms:.0f} ms"),
        (f"streams with a gap over {stall_us / 1000:.0f} ms", f"{summary.stalled_share:.1%}"),
        ("stored bytes per chunk", f"{summary.stored_bytes_per_chunk:.2f}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
