"""Why a stream's first token came late: the client's wait split by the points that saw it.

A slow start is a client stream whose first content arrived ``slow_start_us`` (1 s, the quality indices'
first-token deadline) or more after its request. Its wait splits in three, each part measured on one host:

- the upstream's: from the request reaching the server (or the gateway in front of an engine that records nothing)
  to its first content, the engine's queue, the prompt's prefill and the first step;
- the client host's: the time the client's own host did not run the reader before the first content arrived (its
  host watch);
- the path's: the rest, the request's way there and the first content's way back.

The largest part names the cause. The upstream's, by what its node and its own host did meanwhile:

1. ``gpu_fault``: the node's GPU stopped running work meanwhile (an XID error, the GPU lost or unavailable):
   requests pile up behind it, so the queue it made is not the cause.
2. ``queue``: the request waited to be admitted. Where the engine says how long (its span's
   ``gen_ai.latency.time_in_queue``, vLLM's name: from the arrival to the first scheduling), for at least half the
   upstream's wait; otherwise when the node had requests waiting for a free slot meanwhile (the agent's
   ``requests_waiting`` above 0, or a queue spike), every slot busy and the request one of those waiting.
   A request the engine admitted sooner waited for something else, though others queued: ``kv_pressure`` when the
   node preempted requests meanwhile (the request lost its KV cache before its first token, or shared its steps with
   the re-prefills of those that did), else the causes below.
3. ``prefill_interference``: another request's prefill burst ran in the wait (the node's ``prefill_burst``), and
   the stream's own prompt was too short to have made it (under half the burst's tokens).
4. ``server_host``: the serving process's own host did not run it for most of the wait.
5. otherwise ``unknown``: the stream's own prefill, or an engine slow for reasons nothing seen tells.

The client host's part is ``client_host``. The path's is named by the first chunk's own hold on the way back, how
much longer it took than the stream's quickest chunk (``attribution.Arrivals``), when that hold is at least a lost
segment's retransmission timeout and a third of the wait (a request slow on its way there is nothing these causes
name): ``network_buffering`` in a stream whose path held it all along (its stalls a buffering gateway's flushes: the
first chunk waited for the gateway's first), else ``connection``; ``unknown`` otherwise. A stream with no upstream
side is judged by its host alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_ingest.analysis.attribution import (
    GPU_FAULTS,
    INFERRED,
    PREEMPTION,
    SEEN,
    UNEXPLAINED,
    UNKNOWN,
    Arrivals,
    NodeEvent,
    Timeline,
    events_during,
)

WAITING = "requests_waiting"
"""The node events of requests waiting for a slot, as the pass reads them from the agent's samples."""
QUEUE_EVENTS = frozenset({WAITING, "queue_spike"})


@dataclass(frozen=True)
class FirstTokenRules:
    slow_start_us: int = 1_000_000
    """A first content chunk this late after the request is a slow start (the first-token deadline of the quality
    indices, ``analysis.verdicts.QualityTargets``)."""
    event_slack_us: int = 300_000
    """Engine samples come every 250 ms: a state may have begun this long before the sample that saw it."""
    server_host_share: float = 0.5
    """The serving process's host not running it for this share of the upstream's wait made it."""
    queue_share: float = 0.5
    """The engine's own time in queue, this share of the upstream's wait, made it."""
    path_floor_us: int = 200_000
    """A first chunk later on the path than the stream's quickest by less than TCP's minimum retransmission timeout
    was queueing or jitter."""
    path_share: float = 1 / 3
    """A first chunk held on the path for less than this share of the wait did not make it."""


@dataclass
class SlowStart:
    start_us: int
    """When the request was sent (the client's clock)."""
    ttft_us: int
    upstream_us: int | None
    """The upstream side's own wait for its first content (None: no upstream side recorded)."""
    host_us: int
    path_us: int | None
    cause: str = UNKNOWN
    confidence: float = UNEXPLAINED
    evidence: dict[str, str] = field(default_factory=dict)

    @property
    def end_us(self) -> int:
        return self.start_us + self.ttft_us


def _first_content(timeline: Timeline) -> tuple[int, int] | None:
    """When a side's first content came (µs from its start), and how long its own host did not run it before (0
    when not watched); None when it had none."""
    index, offsets, _ = timeline.content()
    if not index.size:
        return None
    host = timeline.host_delays(index[:1])
    return int(offsets[0]), 0 if host is None else int(host[0])


def attribute_start(
    client: Timeline,
    upstream: Timeline | None,
    events: list[NodeEvent],
    *,
    prompt_tokens: int | None = None,
    queued_us: int | None = None,
    path_buffered: bool = False,
    rules: FirstTokenRules | None = None,
) -> SlowStart | None:
    """The slow start of ``client``, with its cause; None when its first content came in time (or never).

    ``upstream`` is the stream's server or gateway side, ``events`` its node's, ``prompt_tokens`` the stream's own
    prompt and ``queued_us`` the upstream's own time in queue, when known; ``path_buffered``: the stream's stalls
    were a buffering gateway's."""
    rules = rules or FirstTokenRules()
    first = _first_content(client)
    if first is None or first[0] < rules.slow_start_us:
        return None
    ttft, host = first
    upstream_first = _first_content(upstream) if upstream is not None else None
    if upstream is None or upstream_first is None:
        start = SlowStart(client.start_us, ttft, None, host, None)
        start.evidence["host_delay_ms"] = _ms(host)
        if host >= rules.server_host_share * ttft:
            start.cause, start.confidence = Cause.CLIENT_HOST, SEEN
        return start
    upstream_us, server_host = upstream_first
    path = max(ttft - upstream_us - host, 0)
    start = SlowStart(client.start_us, ttft, upstream_us, host, path)
    start.evidence.update(upstream_ms=_ms(upstream_us), host_delay_ms=_ms(host), path_ms=_ms(path))
    largest = max(upstream_us, host, path)
    if largest == host:
        start.cause, start.confidence = Cause.CLIENT_HOST, SEEN
    elif largest == upstream_us:
        window = (upstream.start_us, upstream.start_us + upstream_us)
        start.cause, start.confidence, found = _upstream_cause(
            window, events, server_host, prompt_tokens, queued_us, rules
        )
        start.evidence.update(found)
    else:
        # the first chunk's lateness over the stream's quickest (both ways), the host's part taken out
        late = max(int(Arrivals.of(client, upstream).path_us[0]) - host, 0)
        start.evidence["path_late_ms"] = _ms(late)
        if late >= max(rules.path_floor_us, rules.path_share * ttft):
            start.cause = Cause.NETWORK_BUFFERING if path_buffered else Cause.CONNECTION
            start.confidence = INFERRED
    return start


def _upstream_cause(
    window: tuple[int, int],
    events: list[NodeEvent],
    server_host_us: int,
    prompt_tokens: int | None,
    queued_us: int | None,
    rules: FirstTokenRules,
) -> tuple[str, float, dict[str, str]]:
    """What kept the upstream from its first content over ``window`` (its clock)."""
    seen = events_during(window, events, rules.event_slack_us)
    kinds = {e.kind for e in seen}
    evidence = {"node_events": ",".join(sorted(kinds))} if kinds else {}
    if server_host_us:
        evidence["server_host_delay_ms"] = _ms(server_host_us)
    if queued_us is not None:
        evidence["time_in_queue_ms"] = _ms(queued_us)
    if kinds & GPU_FAULTS:
        return Cause.GPU_FAULT, SEEN, evidence
    if queued_us is not None:
        if queued_us >= rules.queue_share * (window[1] - window[0]):
            return Cause.QUEUE, SEEN, evidence
        if PREEMPTION in kinds:
            return Cause.KV_PRESSURE, INFERRED, evidence
    elif kinds & QUEUE_EVENTS:
        return Cause.QUEUE, SEEN, evidence
    bursts = [e for e in seen if e.kind == "prefill_burst"]
    if bursts:
        largest = max((e.magnitude for e in bursts if e.magnitude is not None), default=None)
        if prompt_tokens is None or largest is None or prompt_tokens < largest / 2:
            return Cause.PREFILL_INTERFERENCE, SEEN, evidence
        evidence["own_prompt_tokens"] = str(prompt_tokens)
    if server_host_us >= rules.server_host_share * (window[1] - window[0]):
        return Cause.SERVER_HOST, SEEN, evidence
    return UNKNOWN, UNEXPLAINED, {**evidence, "node": "upstream slow to its first content, nothing seen explains it"}


def _ms(us: int) -> str:
    return f"{us / 1000:.1f}"
