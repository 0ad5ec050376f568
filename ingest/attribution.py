"""Stall attribution: find the stalls of one stream and name what caused each, with the evidence used.

A stall is a gap between content chunks over the absolute threshold, or well over the stream's own median
(a stream that normally ticks every 40 ms stalls at 200 ms). For each client stall:

1. The client chunk is aligned with the server's emission of the same content by cumulative content bytes
   (proxies re-chunk, never change content), and the two gaps are compared. Timestamps are only ever
   subtracted on one host; the two sides are compared by their gaps.
2. The server emitted on time, the client received late: the network delayed it. A buffering gateway
   (``network_buffering``) holds every chunk, the first one included, so the client's time to first content
   exceeds the server's by much more than a network round trip (both are durations on their own host, so no
   clock offset enters); delays that recur in one stream point the same way. A single delay after an on-time
   start is a ``connection`` hiccup, and so is a delay far longer than its siblings in a buffered stream
   (a gateway flushes on a period; a hiccup on top of it stands out).
3. The server was late too: the engine on the stream's node. Its events in the gap's window decide:
   a prefill burst (``prefill_interference``), a preemption or KV high-water (``kv_pressure``), a draft
   acceptance drop (``spec_decode``). With none of them, speculative decoding being active on the node is
   the remaining explanation for a slow rhythm (``spec_decode``, lower confidence); otherwise ``unknown``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

NETWORK_CAUSES = ("network_buffering", "connection")
ENGINE_EVENT_CAUSES = (
    ("prefill_burst", "prefill_interference"),
    ("preemption", "kv_pressure"),
    ("kv_high_water", "kv_pressure"),
    ("spec_acceptance_drop", "spec_decode"),
)
"""Engine event kinds and the cause they point to, strongest evidence first."""


@dataclass(frozen=True)
class StallRules:
    absolute_us: int = 400_000
    relative_factor: float = 3.0
    relative_floor_us: int = 150_000
    server_share: float = 0.5
    """A server gap at least this share of the client's means the delay was at (or before) the server."""
    event_slack_us: int = 300_000
    """Engine events are sampled every 250 ms: a gap's window is widened by this much to meet them."""
    recurring_network_stalls: int = 2
    """This many network stalls in one stream make it a buffering gateway rather than a hiccup."""
    held_first_chunk_us: int = 250_000
    """Client time to first content exceeding the server's by this much: the path held the first chunk."""
    hiccup_factor: float = 1.5
    hiccup_extra_us: int = 500_000
    """In a buffered stream, a network gap this many times the median network gap, and this much longer, is a
    connection hiccup on top of the gateway (a flush stretched by a slowish server is neither)."""


@dataclass(frozen=True)
class Timeline:
    """One side of one stream: absolute start (µs, that host's clock) and per-chunk offsets and content bytes."""

    start_us: int
    offsets_us: np.ndarray
    content_bytes: np.ndarray

    def content(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices of content chunks, their offsets, and cumulative content bytes up to each."""
        index = np.flatnonzero(self.content_bytes > 0)
        return index, self.offsets_us[index], np.cumsum(self.content_bytes)[index]


@dataclass(frozen=True)
class NodeEvent:
    kind: str
    start_us: int
    end_us: int


@dataclass
class Stall:
    seq: int
    start_us: int
    end_us: int
    gap_us: int
    cause: str = "unknown"
    confidence: float = 0.3
    server_gap_us: int | None = None
    server_seq: int | None = None
    evidence: dict[str, str] = field(default_factory=dict)


def find_stalls(timeline: Timeline, rules: StallRules) -> list[Stall]:
    index, offsets, _ = timeline.content()
    if index.size < 2:
        return []
    gaps = np.diff(offsets)
    median = float(np.median(gaps))
    stalled = (gaps >= rules.absolute_us) | (
        (gaps >= rules.relative_floor_us) & (gaps >= rules.relative_factor * max(median, 1.0))
    )
    return [
        Stall(
            seq=int(index[k + 1]),
            start_us=timeline.start_us + int(offsets[k]),
            end_us=timeline.start_us + int(offsets[k + 1]),
            gap_us=int(gaps[k]),
            evidence={"median_gap_ms": f"{median / 1000:.1f}"},
        )
        for k in np.flatnonzero(stalled)
    ]


def attribute(
    client: Timeline,
    server: Timeline | None,
    node_events: list[NodeEvent],
    *,
    spec_active: bool,
    rules: StallRules,
) -> list[Stall]:
    """The client's stalls, each with a cause, a confidence and its evidence."""
    stalls = find_stalls(client, rules)
    if not stalls:
        return stalls
    if server is None:
        for stall in stalls:
            stall.evidence["server"] = "no server span for this trace"
        return stalls
    c_index, _, c_cumulative = client.content()
    s_index, s_offsets, s_cumulative = server.content()
    network: list[Stall] = []
    for stall in stalls:
        k = int(np.searchsorted(c_index, stall.seq))
        before, through = c_cumulative[k - 1], c_cumulative[k]
        # the server chunk that completed the content the client had, and the one that completed what arrived
        j_before = min(int(np.searchsorted(s_cumulative, before)), s_index.size - 1)
        j_through = min(int(np.searchsorted(s_cumulative, through)), s_index.size - 1)
        server_gap = int(s_offsets[j_through] - s_offsets[j_before])
        stall.server_gap_us, stall.server_seq = server_gap, int(s_index[j_through])
        stall.evidence["server_gap_ms"] = f"{server_gap / 1000:.1f}"
        stall.evidence["client_gap_ms"] = f"{stall.gap_us / 1000:.1f}"
        if server_gap < rules.server_share * stall.gap_us:
            network.append(stall)
            continue
        window = (server.start_us + int(s_offsets[j_before]), server.start_us + int(s_offsets[j_through]))
        _engine_cause(stall, window, node_events, spec_active, rules)
    first_chunk_lag = int(client.content()[1][0] - s_offsets[0])
    held_from_start = first_chunk_lag >= rules.held_first_chunk_us
    buffering = held_from_start or len(network) >= rules.recurring_network_stalls
    typical = float(np.median([s.gap_us for s in network])) if network else 0.0
    for stall in network:
        stands_out = stall.gap_us > rules.hiccup_factor * typical and stall.gap_us - typical >= rules.hiccup_extra_us
        hiccup = not buffering or (len(network) >= 2 and stands_out)
        stall.cause = "connection" if hiccup else "network_buffering"
        stall.confidence = 0.75 if hiccup else 0.85
        stall.evidence["network_stalls_in_stream"] = str(len(network))
        stall.evidence["first_chunk_lag_ms"] = f"{first_chunk_lag / 1000:.1f}"
    return stalls


def _engine_cause(
    stall: Stall, window: tuple[int, int], events: list[NodeEvent], spec_active: bool, rules: StallRules
) -> None:
    low, high = window[0] - rules.event_slack_us, window[1] + rules.event_slack_us
    seen = {e.kind for e in events if e.start_us <= high and e.end_us >= low}
    for kind, cause in ENGINE_EVENT_CAUSES:
        if kind in seen:
            stall.cause, stall.confidence = cause, 0.85
            stall.evidence["node_events"] = ",".join(sorted(seen))
            return
    if spec_active:
        stall.cause, stall.confidence = "spec_decode", 0.6
        stall.evidence["node"] = "speculative decoding active, no other engine event"
        return
    stall.evidence["node"] = "server late, no engine event in the window"
