"""Send a bench run's requests and record every stream with the SDK (client side), as an application would.

A closed loop keeps ``concurrency`` streams open (each client sends its next request when its last one ends); an
open loop sends at Poisson arrival times whatever is in flight, so a slow endpoint builds a queue, as users do to a
real service. Warm-up requests go first (as many at once as the run opens), read to their end and not recorded.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from streamscope import astream_sse
from streamscope_cli.bench.plan import FORMATS, BenchPlan, BenchRequest, arrival_gaps, requests

TIMEOUT = httpx.Timeout(300.0, connect=10.0)


@dataclass
class BenchReport:
    """How the run's streams ended, as their client saw them, and when it sent."""

    outcomes: Counter[str] = field(default_factory=Counter)
    started_ns: int = 0
    """Wall clock when the first recorded request was sent."""
    ended_ns: int = 0
    """Wall clock when the last stream ended."""

    @property
    def sent(self) -> int:
        return sum(self.outcomes.values())


async def drive(
    plan: BenchPlan, tracer_provider: Any, on_done: Callable[[str], None] = lambda outcome: None
) -> BenchReport:
    """Warm up, then send the run's requests; each stream is recorded through ``tracer_provider``."""
    pending = requests(plan)
    # as many connections kept alive as may be open: a stream never pays a new connection another just closed
    most = plan.concurrency * 2 if plan.concurrency else None
    limits = httpx.Limits(max_connections=most, max_keepalive_connections=most)
    async with httpx.AsyncClient(timeout=TIMEOUT, limits=limits) as client:
        warming = list(itertools.islice(pending, plan.warmup))
        for at in range(0, len(warming), plan.concurrency or 8):  # as many at once as the run opens
            batch = warming[at : at + (plan.concurrency or 8)]
            await asyncio.gather(*(_send(client, plan, request, None) for request in batch))
        report = BenchReport(started_ns=time.time_ns())

        async def one(request: BenchRequest) -> None:
            outcome = await _send(client, plan, request, tracer_provider)
            report.outcomes[outcome] += 1
            on_done(outcome)

        if plan.concurrency:
            await _closed_loop(plan, pending, one)
        else:
            await _open_loop(plan, pending, one)
    report.ended_ns = time.time_ns()
    return report


async def _closed_loop(plan: BenchPlan, pending: Iterator[BenchRequest], one: Callable[[BenchRequest], Any]) -> None:
    assert plan.concurrency is not None
    taken = _taker(plan, pending)

    async def client() -> None:
        while (request := taken()) is not None:
            await one(request)

    await asyncio.gather(*(client() for _ in range(plan.concurrency)))


async def _open_loop(plan: BenchPlan, pending: Iterator[BenchRequest], one: Callable[[BenchRequest], Any]) -> None:
    taken = _taker(plan, pending)
    started = time.monotonic()
    at = 0.0
    streams = []
    for gap in arrival_gaps(plan):
        at += gap
        await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
        if (request := taken()) is None:
            break
        streams.append(asyncio.ensure_future(one(request)))
    await asyncio.gather(*streams)


def _taker(plan: BenchPlan, pending: Iterator[BenchRequest]) -> Callable[[], BenchRequest | None]:
    """The next request to send, or None once the run has sent its count or its duration is over."""
    deadline = None if plan.duration_s is None else time.monotonic() + plan.duration_s
    sent = 0

    def taken() -> BenchRequest | None:
        nonlocal sent
        if (plan.requests is not None and sent >= plan.requests) or (deadline and time.monotonic() >= deadline):
            return None
        sent += 1
        return next(pending)

    return taken


async def _send(client: httpx.AsyncClient, plan: BenchPlan, request: BenchRequest, tracer_provider: Any) -> str:
    """One stream read to its end; how it ended. Recorded when a ``tracer_provider`` is given."""
    try:
        if tracer_provider is None:
            async with client.stream("POST", plan.endpoint, json=request.body, headers=request.headers) as response:
                response.raise_for_status()
                async for _ in response.aiter_raw():
                    pass
            return "completed"
        async with astream_sse(
            client,
            "POST",
            plan.endpoint,
            format=FORMATS[plan.api],
            operation="text_completion" if plan.api == "completions" else "chat",
            request_model=plan.model,
            tracer_provider=tracer_provider,
            json=request.body,
            headers=request.headers,
        ) as events:
            async for _ in events:
                pass
        return "completed"
    except httpx.TimeoutException:
        return "timeout"
    except (httpx.RemoteProtocolError, httpx.ReadError):
        return "disconnected"
    except Exception:  # an HTTP error status, a refused connection, anything else: that stream failed, the run goes on
        return "error"
