"""The clients of a real-engine evaluation, in a process of their own: instrumented streams through the gateway (or
the impairment proxy in front of it), and the injector that sends long prompts at the times the plan gives.

The injector knows when each long prompt was sent and when its answer came back (its prefill ran in between, on
the engine's continuous-batching scheduler, sharing its steps with every stream decoding there), and the clients
know which of their streams were mid-answer then and which of their events arrived in that window: that is the
ground truth of ``prefill_interference``, one record per stream it overlapped, from the load generator alone,
never from the engine's telemetry. The clients' own event loop is watched as in the simulated runs
(``host_load.HostActivity``: ``client_host`` records).

Run as ``python -m streamscope_cli.workload.llama_clients`` with the plan (``ClientPlan``, JSON) on stdin; prints
how the streams ended, as JSON, on stdout.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx
from opentelemetry import context as otel_context
from opentelemetry import trace

from streamscope import astream_sse, otlp_exporter, setup
from streamscope.formats import make_format
from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_cli.workload.ground_truth import FIRST_TOKEN, GroundTruth, GroundTruthSink
from streamscope_cli.workload.host_load import HostActivity
from streamscope_cli.workload.scenario import HostLoad
from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger

CLIENT_SERVICE = "llama-client"
ARRIVALS = "arrivals"
"""``detail.indices`` of a record whose chunks are those the client received in its window (through a proxy that
held them, the engine may have emitted them before): scoring prefers the path's own record of what it held."""
INJECTOR_SERVICE = "llama-injector"


@dataclass(frozen=True)
class PlannedRequest:
    at_s: float
    url: str
    """The chat completions URL: the gateway's, or the proxy's in front of it."""
    max_tokens: int
    prompt: str


@dataclass(frozen=True)
class LongPrompt:
    at_s: float
    url: str
    prompt: str


@dataclass(frozen=True)
class SlotFill:
    """``requests`` long generations sent at once, to take every slot of the engine for a while."""

    at_s: float
    url: str
    requests: int
    max_tokens: int


@dataclass(frozen=True)
class ClientPlan:
    scenario: str
    seed: int
    collector_url: str
    node: str
    """The engine's node, as its agent and the gateway name it (the node of the ground truth the injector writes)."""
    streams: list[PlannedRequest]
    long_prompts: list[LongPrompt] = field(default_factory=list)
    host_load: list[HostLoad] = field(default_factory=list)
    concurrency: int = 8
    slot_fills: list[SlotFill] = field(default_factory=list)
    slots: int = 8
    """The engine's slots (``--parallel``): a request sent while this many of the process's are running waits."""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> ClientPlan:
        raw = json.loads(text)
        return cls(
            **{
                **raw,
                "streams": [PlannedRequest(**s) for s in raw["streams"]],
                "long_prompts": [LongPrompt(**p) for p in raw["long_prompts"]],
                "host_load": [HostLoad(**h) for h in raw["host_load"]],
                "slot_fills": [SlotFill(**f) for f in raw["slot_fills"]],
            }
        )


@dataclass
class Received:
    """One stream as its client saw it: its trace, when each event arrived and whether it carried content (wall
    clock, ns)."""

    trace_id: str
    arrivals_ns: list[int] = field(default_factory=list)
    content: list[bool] = field(default_factory=list)
    sent_ns: int = 0
    """When its request was sent."""

    def first_content(self) -> int | None:
        """The index of the first event that carried content, if any did."""
        return next((i for i, has in enumerate(self.content) if has), None)


def prefill_truths(
    node: str, windows: list[tuple[int, int]], streams: list[Received], slack_ns: int = 50_000_000
) -> list[GroundTruth]:
    """For each long prompt's prefill (sent, answered: wall ns), a record on every stream that was mid-answer then
    (content before it was answered and after it was sent), naming the events that arrived after the stream's
    longest wait began and by the answer (the engine's numbering: the gateway forwards each event as it came) and,
    as its magnitude, that wait: the longest between content events from the last before it was sent (or the
    first) to the first after it was answered (or the stream's last).

    The prefill starts somewhere in the window, after the gateway and the engine's scheduler took the prompt: a
    stream may get content out in between (even its first), and what it waits for is what came after."""
    truths = []
    for sent, answered in windows:
        for stream in streams:
            content = [t for t, has in zip(stream.arrivals_ns, stream.content, strict=True) if has]
            if not content or content[0] >= answered or content[-1] <= sent:
                continue
            first = max((i for i, t in enumerate(content) if t <= sent), default=0)
            # "answered" is the injector's clock, late when its host is held: a last event before it was held too
            last = min((i for i, t in enumerate(content) if t > answered), default=len(content) - 1)
            if last == first:
                continue
            longest, began = max((b - a, a) for a, b in itertools.pairwise(content[first : last + 1]))
            held = tuple(i for i, t in enumerate(stream.arrivals_ns) if max(sent, began) < t <= answered + slack_ns)
            truths.append(
                GroundTruth(
                    Cause.PREFILL_INTERFERENCE,
                    node,
                    sent,
                    answered,
                    trace_id=stream.trace_id,
                    chunk_indices=held,
                    magnitude=longest / 1e9,
                    detail={"kind": "long_prompt", "prefill_ms": f"{(answered - sent) / 1e6:.1f}", "indices": ARRIVALS},
                )
            )
    return truths


def first_token_truths(
    node: str, slots: int, busy: list[tuple[int, int]], prefills: list[tuple[int, int]], streams: list[Received]
) -> list[GroundTruth]:
    """What kept each stream from its first token, from what this process sent the engine (``busy``: each request's
    sent and done, wall ns, the streams' own among them) and the long prompts' prefills (sent, answered).

    A stream sent while ``slots`` of the other requests were running waited for a slot: ``queue``, from its request
    to its first content. One that had not had it when a long prompt was sent, and was sent before that was
    answered (and not queued), waited for the prompt's prefill: ``prefill_interference``, from its request (or the
    prompt's) to its first content (or the answer). Each is a first token's wait (``detail.kind = first_token``),
    its magnitude the stream's whole wait."""
    truths = []
    for stream in streams:
        first = stream.first_content()
        if first is None:
            continue
        got, sent = stream.arrivals_ns[first], stream.sent_ns
        wait = (got - sent) / 1e9
        running = sum(1 for start, done in busy if start < sent < done)
        if running >= slots:
            cause, window = Cause.QUEUE, (sent, got)
            detail = {"kind": FIRST_TOKEN, "running": str(running)}
        else:
            prefill = next(((p, a) for p, a in prefills if sent < a and got > p), None)
            if prefill is None:
                continue
            cause, window = Cause.PREFILL_INTERFERENCE, (max(sent, prefill[0]), min(got, prefill[1]))
            detail = {"kind": FIRST_TOKEN, "prefill_ms": f"{(prefill[1] - prefill[0]) / 1e6:.1f}"}
        truths.append(
            GroundTruth(
                cause, node, *window, trace_id=stream.trace_id, chunk_indices=(first,), magnitude=wait, detail=detail
            )
        )
    return truths


async def _stream(client: httpx.AsyncClient, request: PlannedRequest, provider: Any, received: list[Received]) -> str:
    trace_id = secrets.randbits(128) or 1
    parent = trace.NonRecordingSpan(
        trace.SpanContext(trace_id, secrets.randbits(64) or 1, is_remote=True, trace_flags=trace.TraceFlags(1))
    )
    token = otel_context.attach(trace.set_span_in_context(parent))
    seen = Received(f"{trace_id:032x}", sent_ns=time.time_ns())
    received.append(seen)
    reader = make_format("openai-chat")  # what carried content, as the SDK's recording tells it
    body = {
        "messages": [{"role": "user", "content": request.prompt}],
        "max_tokens": request.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    try:
        async with astream_sse(client, "POST", request.url, json=body, tracer_provider=provider) as events:
            async for event in events:
                seen.arrivals_ns.append(time.time_ns())
                seen.content.append(bool(reader.read(event.event, event.payload).text))
        return "completed"
    except httpx.RemoteProtocolError:
        return "disconnected"
    except httpx.HTTPError:
        return "error"
    finally:
        otel_context.detach(token)


async def _long_prompt(client: httpx.AsyncClient, prompt: LongPrompt, windows: list[tuple[int, int]]) -> None:
    body = {"messages": [{"role": "user", "content": prompt.prompt}], "max_tokens": 1}
    sent = time.time_ns()
    response = await client.post(prompt.url, json=body)
    if response.status_code == 200:
        windows.append((sent, time.time_ns()))


async def _fill(client: httpx.AsyncClient, fill: SlotFill, filled: list[tuple[int, int]]) -> None:
    """One long generation of a slot fill, kept in ``filled`` (sent, done) once answered."""
    body = {"messages": [{"role": "user", "content": "fill"}], "max_tokens": fill.max_tokens, "ignore_eos": True}
    sent = time.time_ns()
    response = await client.post(fill.url, json=body)
    if response.status_code == 200:
        filled.append((sent, time.time_ns()))


async def run(plan: ClientPlan, sink: GroundTruthSink, provider: Any) -> Counter[str]:
    outcomes: Counter[str] = Counter()
    received: list[Received] = []
    windows: list[tuple[int, int]] = []
    filled: list[tuple[int, int]] = []
    gate = asyncio.Semaphore(plan.concurrency)
    started = time.monotonic()
    fills = sum(f.requests for f in plan.slot_fills)
    limits = httpx.Limits(max_connections=plan.concurrency * 2 + len(plan.long_prompts) + fills)
    host = HostActivity(plan.host_load, seed=plan.seed, sink=sink, node=CLIENT_SERVICE)
    async with host, httpx.AsyncClient(timeout=httpx.Timeout(300.0, connect=10.0), limits=limits) as client:

        async def one(request: PlannedRequest) -> None:
            await asyncio.sleep(max(0.0, request.at_s - (time.monotonic() - started)))
            async with gate:
                outcomes[await _stream(client, request, provider, received)] += 1

        async def inject(prompt: LongPrompt) -> None:
            await asyncio.sleep(max(0.0, prompt.at_s - (time.monotonic() - started)))
            await _long_prompt(client, prompt, windows)

        async def fill(slots: SlotFill) -> None:
            await asyncio.sleep(max(0.0, slots.at_s - (time.monotonic() - started)))
            await asyncio.gather(*(_fill(client, slots, filled) for _ in range(slots.requests)))

        await asyncio.gather(
            *(one(r) for r in plan.streams),
            *(inject(p) for p in plan.long_prompts),
            *(fill(f) for f in plan.slot_fills),
        )
    busy = filled + windows + [(r.sent_ns, r.arrivals_ns[-1]) for r in received if r.arrivals_ns]
    truths = prefill_truths(plan.node, windows, received)
    truths += first_token_truths(plan.node, plan.slots, busy, windows, received)
    for truth in truths:
        sink.record(truth)
    outcomes["long prompts answered"] = len(windows)
    outcomes["slot fills answered"] = len(filled)
    return outcomes


def main() -> None:
    plan = ClientPlan.from_json(sys.stdin.read())
    provider = setup(CLIENT_SERVICE, set_global=False, exporter=otlp_exporter(plan.collector_url))
    logs = ground_truth_logger(INJECTOR_SERVICE, plan.collector_url)
    try:
        outcomes = asyncio.run(run(plan, OtlpGroundTruthSink(logs, scenario=plan.scenario), provider))
    finally:
        provider.shutdown()
        logs.shutdown()
    json.dump(dict(outcomes), sys.stdout)


if __name__ == "__main__":
    main()
