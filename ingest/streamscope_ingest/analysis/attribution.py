"""Stall attribution: find the stalls of one stream and name what caused each, with the evidence used.

A stall is a gap between content chunks over the absolute threshold, or well over the stream's own median
(a stream that normally ticks every 40 ms stalls at 200 ms), in what the reader saw: a browser's chunks count
from the frame that painted them. For each client stall:

0. On a browser, the part of the gap after the chunk that ended it had arrived is the screen's: the page had the
   chunk and had not shown it (the app's render work, or a main thread too busy to paint). When it is the larger
   part, the cause is ``client_render``; the rest of the gap, waiting for the chunk, is judged as below.

1. The client chunk is aligned with the server's emission of the same content by cumulative content bytes
   (proxies re-chunk, never change content). Timestamps are only ever subtracted on one host: each chunk's
   path delay is its client offset minus its server offset, less the stream's smallest such difference (the
   constant between the two starts cancels), i.e. how much longer than the stream's quickest chunk it spent
   between the server and the client.
2. The client's wait splits in two: the chunk that ended the stall was late on the path for its path delay
   (at most the whole gap), and before that the client was waiting on the server. The larger part names the
   cause, so a gap where the engine stalled and a gateway then held what it emitted goes to whichever held
   it longer; the other part, when it is a sizeable share of the gap, is named as ``secondary_cause`` in
   the evidence. (Comparing the two sides' gaps alone is not enough: a gateway that had been holding the
   previous chunk absorbs a server delay that happened meanwhile.)
3. The path's part: the network delayed it. A buffering gateway (``network_buffering``) holds every chunk,
   the first one included, so the first chunk is late on the path (not the client's time to first content,
   which also holds the request's way to the server that a slow proxy or client stretches); delays that
   recur in one stream point the same way. A single delay after an on-time start is a ``connection``
   hiccup. In a buffered stream so is a delay far longer than its siblings, and a delay of content that had
   already been sent when the previous chunk arrived and that the path then held clearly longer than the
   gateway holds a chunk: a flush releases everything it holds, a stalled connection leaves the rest behind.
4. The server's part: the engine on the stream's node. Its events in the gap's window decide: a prefill burst
   (``prefill_interference``), a preemption or KV high-water (``kv_pressure``), a draft acceptance drop
   (``spec_decode``). With none of them, speculative decoding being active on the node is the remaining
   explanation for a slow rhythm (``spec_decode``, lower confidence); otherwise ``unknown``. Either way a
   draft collapse is believed only if the rhythm could be that slow: it leaves one token per step where the
   node's steps gave its acceptance length, so it stretches the stream's usual server gap by about that
   factor, never into a freeze many times longer (``unknown``, with the bound in the evidence).
5. Across streams: a late arrival on one stream is that connection's, but when a host the stream shares with
   others (its client process, its serving node) held at least half of its other streams that had content due
   over the same time and released them at about the same instant, the host paused (a CPU-starved client or
   load generator, a serving process busy after stamping its chunks): ``unknown``, with the count in the
   evidence, and left out of the stream's network stalls. Streams behind a gateway are no witnesses (a flush
   may come at any time); a stream behind one that held its first chunk is not checked (its gateway explains
   its gaps). A pause that held only this one stream still reads as the network's. Likewise on the server
   side: a preemption or a draft collapse delays the requests it hits, so a server gap that most of the
   node's other streams shared was the node being slow for all (a long step, a busy host): ``unknown``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

ENGINE_EVENT_CAUSES = (
    ("prefill_burst", "prefill_interference"),
    ("preemption", "kv_pressure"),
    ("kv_high_water", "kv_pressure"),
    ("spec_acceptance_drop", "spec_decode"),
)
"""Engine event kinds and the cause they point to, strongest evidence first."""
PER_REQUEST_CAUSES = ("kv_pressure", "spec_decode")
"""Engine causes that delay the requests they hit (a preempted sequence, rejected drafts), not the whole node
(a prefill in the batch delays every sequence decoding with it)."""


@dataclass(frozen=True)
class StallRules:
    absolute_us: int = 400_000
    relative_factor: float = 3.0
    relative_floor_us: int = 150_000
    server_share: float = 0.5
    """The server's part of a client gap at least this share of it: the delay was at (or before) the server."""
    secondary_share: float = 0.25
    """The other part at least this share of the gap is named in the evidence as the secondary cause."""
    event_slack_us: int = 300_000
    """Engine events are sampled every 250 ms: one may have begun this long before it was seen (a long step
    started before the interval that counted it, a level crossed before the sample that saw it). It was over by
    the sample that closed it, so it explains a gap only if it had not ended before the gap began."""
    recurring_network_stalls: int = 2
    """This many network stalls of about one length (within ``hiccup_factor`` of their median) make a stream a
    buffering gateway's: it flushes on a period, where pauses and hiccups come in all lengths."""
    held_first_chunk_us: int = 250_000
    """The first content chunk this late on the path (see ``Arrivals``): the path held it."""
    hiccup_factor: float = 1.5
    hiccup_extra_us: int = 500_000
    """In a buffered stream, a network gap this many times the median network gap, and this much longer, is a
    connection hiccup on top of the gateway (a flush stretched by a slowish server is neither)."""
    left_behind_us: int = 150_000
    left_behind_extra_us: int = 100_000
    """In a buffered stream, content already sent this long before the previous chunk arrived, that the path then
    delayed this much more than the gateway holds a chunk, was not held by a flush (a flush releases all it
    holds): a connection hiccup."""
    release_slack_us: int = 60_000
    """Arrivals this close together (twice as long after) were released by the same event: a host resuming,
    stream after stream."""
    shared_hold_share: float = 0.5
    """A stream held at least this share as long as a stall's wait on the path, and released with it, was held by
    the same pause."""
    due_slack_us: int = 5_000
    """When a chunk was due (sent, plus its stream's quickest path) is known to within about this much."""
    spec_step_slack: float = 2.0
    """A draft collapse stretches a server gap by the acceptance length, and the step itself by up to this
    factor (the draft and verify passes grow with the batch): the longest gap it can make, over the usual."""
    collapse_neighbours: int = 3
    collapse_rhythm: float = 2.0
    """A collapse slows a stretch: the ``collapse_neighbours`` server gaps on one side of its stall average at
    least this many usual gaps (it leaves one token per step where several came; a rejection streak at normal
    acceptance slows a chunk or two)."""


@dataclass(frozen=True)
class Timeline:
    """One side of one stream: absolute start (µs, that host's clock) and per-chunk offsets and content bytes;
    on a browser, how long after its arrival each chunk was painted (0: not measured)."""

    start_us: int
    offsets_us: np.ndarray
    content_bytes: np.ndarray
    paint_delay_us: np.ndarray | None = None

    def content(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices of content chunks, their offsets (arrivals), and cumulative content bytes up to each."""
        index = np.flatnonzero(self.content_bytes > 0)
        return index, self.offsets_us[index], np.cumsum(self.content_bytes)[index]

    def shown(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices of content chunks, their arrivals, and when each was on screen: its arrival, or the frame that
        painted it where that was measured (never before an earlier chunk was shown)."""
        index = np.flatnonzero(self.content_bytes > 0)
        arrived = self.offsets_us[index]
        if self.paint_delay_us is None:
            return index, arrived, arrived
        return index, arrived, np.maximum.accumulate(arrived + self.paint_delay_us[index])


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
    path_delay_us: int | None = None
    """How late the chunk that ended the stall was on the path (see ``Arrivals``)."""
    screen_us: int = 0
    """The end of the gap the chunk that ended it had already arrived for (a browser that painted it late)."""
    evidence: dict[str, str] = field(default_factory=dict)

    @property
    def wait_us(self) -> int:
        """The part of the gap spent waiting for the chunk to arrive."""
        return self.gap_us - self.screen_us

    @property
    def arrived_us(self) -> int:
        return self.end_us - self.screen_us


def find_stalls(timeline: Timeline, rules: StallRules) -> list[Stall]:
    """The stalls of what the reader saw (see ``Timeline.shown``), each with the screen's part of it."""
    index, arrived, shown = timeline.shown()
    if index.size < 2:
        return []
    gaps = np.diff(shown)
    median = float(np.median(gaps))
    stalled = (gaps >= rules.absolute_us) | (
        (gaps >= rules.relative_floor_us) & (gaps >= rules.relative_factor * max(median, 1.0))
    )
    return [
        Stall(
            seq=int(index[k + 1]),
            start_us=timeline.start_us + int(shown[k]),
            end_us=timeline.start_us + int(shown[k + 1]),
            gap_us=int(gaps[k]),
            screen_us=int(min(gaps[k], shown[k + 1] - arrived[k + 1])),
            evidence={"median_gap_ms": f"{median / 1000:.1f}"},
        )
        for k in np.flatnonzero(stalled)
    ]


@dataclass(frozen=True)
class Arrivals:
    """When one stream's content reached the client (µs, client clock), and how late each chunk was on the path:
    how much longer than the stream's quickest chunk it took from the server's emission to the client's receipt.
    Each side's offsets are durations on its own host and the constant between the two starts cancels, so no
    clock offset enters."""

    times_us: np.ndarray
    path_us: np.ndarray
    sent_us: np.ndarray
    """When the server emitted its content chunks (µs, the serving node's clock)."""

    @classmethod
    def of(cls, client: Timeline, server: Timeline) -> Arrivals:
        _, c_offsets, c_cumulative = client.content()
        s_index, s_offsets, s_cumulative = server.content()
        lag = c_offsets - s_offsets[np.minimum(np.searchsorted(s_cumulative, c_cumulative), s_index.size - 1)]
        return cls(client.start_us + c_offsets, lag - lag.min(), server.start_us + s_offsets)

    def held_through(self, due_from_us: int, silent_from_us: int, end_us: int, rules: StallRules) -> bool | None:
        """Whether this stream's content was held with a late chunk that was due at ``due_from_us`` and kept the
        client waiting on the path from ``silent_from_us`` to ``end_us``: nothing due in that wait arrived during
        it, and content due since ``due_from_us`` came at ``end_us`` (False: content due in the wait arrived
        meanwhile). None when this stream says nothing about that hold: nothing of it was due, it is behind a
        gateway (its first chunk held; a flush may come at any time), or it was held only briefly."""
        due = self.times_us - self.path_us
        in_wait = (due >= silent_from_us - rules.due_slack_us) & (due <= end_us - rules.release_slack_us)
        if np.any(in_wait & (self.times_us < end_us - rules.release_slack_us)):
            return False
        # a host catching up after a pause releases its streams one after another
        released = (self.times_us >= end_us - rules.release_slack_us) & (
            self.times_us <= end_us + 2 * rules.release_slack_us
        )
        held = released & (due >= due_from_us - rules.due_slack_us) & (due <= end_us - rules.release_slack_us)
        if (
            self.path_us[0] >= rules.held_first_chunk_us
            or not held.any()
            or self.path_us[held].max() < rules.shared_hold_share * (end_us - silent_from_us)
        ):
            return None
        return True

    def silent_through(self, start_us: int, end_us: int, rules: StallRules) -> bool | None:
        """Whether the server emitted none of this stream's content well inside ``start_us``..``end_us`` (server
        clock); None when the stream was not being served across that window."""
        if not self.sent_us.size or self.sent_us[0] > start_us or self.sent_us[-1] < end_us:
            return None
        inside = (self.sent_us > start_us + rules.due_slack_us) & (self.sent_us < end_us - rules.due_slack_us)
        return not inside.any()


@dataclass(frozen=True)
class SharedHost:
    """A host a stream shares with other streams over the same time (its client process, its serving node)."""

    kind: str
    """``client process`` or ``node``."""
    name: str
    peers: Sequence[Arrivals]


def attribute(
    client: Timeline,
    server: Timeline | None,
    node_events: list[NodeEvent],
    *,
    spec_active: bool,
    rules: StallRules,
    spec_accept_length: float | None = None,
    shared_hosts: Callable[[], Iterable[SharedHost]] | None = None,
) -> list[Stall]:
    """The client's stalls, each with a cause, a confidence and its evidence. ``spec_accept_length`` is the
    node's tokens per speculative step (None: not reported); ``shared_hosts`` gives, when asked, the hosts this
    stream shares with others (its client process, its serving node)."""
    stalls = find_stalls(client, rules)
    waiting = [stall for stall in stalls if not _on_screen(stall, rules)]
    if not waiting:
        return stalls
    if server is None or not server.content()[0].size:
        for stall in waiting:
            stall.evidence["server"] = "no server span for this trace"
        return stalls
    c_index, _, c_cumulative = client.content()
    s_index, s_offsets, s_cumulative = server.content()
    arrivals = Arrivals.of(client, server)
    s_gaps = np.diff(s_offsets)
    network: list[Stall] = []
    hosts: list[SharedHost] | None = None
    for stall in waiting:
        k = int(np.searchsorted(c_index, stall.seq))
        before, through = c_cumulative[k - 1], c_cumulative[k]
        # the server chunk that completed the content the client had, and the one that completed what arrived
        j_before = min(int(np.searchsorted(s_cumulative, before)), s_index.size - 1)
        j_through = min(int(np.searchsorted(s_cumulative, through)), s_index.size - 1)
        server_gap = int(s_offsets[j_through] - s_offsets[j_before])
        stall.server_gap_us, stall.server_seq = server_gap, int(s_index[j_through])
        stall.path_delay_us = int(arrivals.path_us[k])
        wait = stall.wait_us
        server_part = _server_part(wait, stall.path_delay_us)
        path_part = wait - server_part
        stall.evidence.update(
            server_gap_ms=f"{server_gap / 1000:.1f}",
            client_gap_ms=f"{stall.gap_us / 1000:.1f}",
            path_delay_ms=f"{stall.path_delay_us / 1000:.1f}",
            server_part_ms=f"{server_part / 1000:.1f}",
        )
        window = (server.start_us + int(s_offsets[j_before]), server.start_us + int(s_offsets[j_through]))
        engine, confidence, engine_evidence = _engine_cause(window, node_events, spec_active, rules)
        if engine == "spec_decode":
            ruled_out = _not_a_collapse(s_gaps, j_before, j_through, spec_accept_length, rules)
            if ruled_out:
                engine, confidence = "unknown", 0.3
                engine_evidence["spec_decode_ruled_out"] = ruled_out
        if server_part >= rules.server_share * wait:
            stall.cause, stall.confidence = engine, confidence
            stall.evidence.update(engine_evidence)
            if engine in PER_REQUEST_CAUSES and shared_hosts is not None:
                hosts = list(shared_hosts()) if hosts is None else hosts
                _node_slow(stall, window, hosts, rules)
            if path_part >= rules.secondary_share * stall.gap_us:
                stall.evidence["secondary_cause"] = "network"
            continue
        if server_part >= rules.secondary_share * stall.gap_us:
            stall.evidence["secondary_cause"] = engine
        network.append(stall)
    if network and shared_hosts is not None and arrivals.path_us[0] < rules.held_first_chunk_us:
        # (behind a gateway that held the first chunk, the gateway's flushes explain the gaps)
        hosts = list(shared_hosts()) if hosts is None else hosts
        network = [stall for stall in network if not _shared_pause(stall, hosts, rules)]
    _network_causes(network, int(arrivals.path_us[0]), rules)
    return stalls


def _on_screen(stall: Stall, rules: StallRules) -> bool:
    """Whether the page had the chunk that ended ``stall`` for most of it (``client_render``); notes a sizeable
    screen part as the secondary cause otherwise."""
    if not stall.screen_us:
        return False
    stall.evidence["screen_part_ms"] = f"{stall.screen_us / 1000:.1f}"
    if stall.screen_us >= rules.server_share * stall.gap_us:
        stall.cause, stall.confidence = "client_render", 0.85
        stall.evidence["waiting_part_ms"] = f"{stall.wait_us / 1000:.1f}"
        return True
    if stall.screen_us >= rules.secondary_share * stall.gap_us:
        stall.evidence["secondary_cause"] = "client_render"
    return False


def _network_causes(network: list[Stall], first_chunk_held: int, rules: StallRules) -> None:
    """A buffering gateway or a connection hiccup, for the stalls the path caused."""
    buffering = first_chunk_held >= rules.held_first_chunk_us or _recurring([s.wait_us for s in network], rules)
    if not network:
        return
    typical = float(np.median([stall.wait_us for stall in network]))
    added = [stall.wait_us - (stall.server_gap_us or 0) for stall in network]  # what the path added in the wait
    held = max(first_chunk_held, float(np.median(added)))  # how long the gateway holds: its first chunk, or typically
    for stall, path_added in zip(network, added, strict=True):
        assert stall.path_delay_us is not None
        already_sent = stall.path_delay_us - stall.wait_us  # before the previous chunk arrived
        left_behind = already_sent >= rules.left_behind_us and path_added - held >= rules.left_behind_extra_us
        stands_out = stall.wait_us > rules.hiccup_factor * typical and stall.wait_us - typical >= rules.hiccup_extra_us
        hiccup = not buffering or left_behind or (len(network) >= 2 and stands_out)
        stall.cause = "connection" if hiccup else "network_buffering"
        stall.confidence = 0.75 if hiccup else 0.85
        stall.evidence["network_stalls_in_stream"] = str(len(network))
        stall.evidence["first_chunk_path_delay_ms"] = f"{first_chunk_held / 1000:.1f}"
        if already_sent > 0:
            stall.evidence["sent_before_previous_arrived_ms"] = f"{already_sent / 1000:.1f}"


def _server_part(gap_us: int, path_delay_us: int) -> int:
    """The part of a client gap spent waiting on the server: the client waited on the path for as long as the
    chunk that ended the gap was late on it (at most the whole gap), and on the server before that."""
    return gap_us - min(gap_us, path_delay_us)


def _recurring(network_gaps: list[int], rules: StallRules) -> bool:
    """Whether enough of a stream's network stalls are of about one length, as a gateway's flushes are."""
    if len(network_gaps) < rules.recurring_network_stalls:
        return False
    typical = float(np.median(network_gaps))
    alike = [gap for gap in network_gaps if typical / rules.hiccup_factor <= gap <= typical * rules.hiccup_factor]
    return len(alike) >= rules.recurring_network_stalls


def _shared_pause(stall: Stall, hosts: list[SharedHost], rules: StallRules) -> bool:
    """Whether a host this stream shares held at least half of its other streams that tell (``held_through``)
    while this chunk was late on the path, until the same instant; if so the stall is ``unknown``, with that in
    the evidence."""
    assert stall.path_delay_us is not None
    due_from = stall.arrived_us - stall.path_delay_us
    silent_from = max(due_from, stall.start_us)  # the client waited on the path from here
    for host in hosts:
        verdicts = [peer.held_through(due_from, silent_from, stall.arrived_us, rules) for peer in host.peers]
        held, telling = verdicts.count(True), len(verdicts) - verdicts.count(None)
        if held and 2 * held >= telling:
            stall.cause, stall.confidence = "unknown", 0.5
            stall.evidence["held_together_with"] = f"{held} of {telling} streams in flight on {host.kind} {host.name}"
            return True
    return False


def _node_slow(stall: Stall, window: tuple[int, int], hosts: list[SharedHost], rules: StallRules) -> None:
    """A cause that acts on one request (its preemption, its drafts rejected) does not silence the node's other
    streams; when most of those being served emitted nothing over the same window, the node was slow for all
    of them (a step that took long, a busy host): ``unknown``, with that in evidence."""
    for host in hosts:
        if host.kind != "node":
            continue
        verdicts = [peer.silent_through(*window, rules) for peer in host.peers]
        silent, served = verdicts.count(True), len(verdicts) - verdicts.count(None)
        if silent and 2 * silent > served:
            stall.evidence["not_blamed"] = stall.cause
            stall.cause, stall.confidence = "unknown", 0.5
            stall.evidence["silent_together_with"] = f"{silent} of {served} streams served on node {host.name}"


def _not_a_collapse(
    server_gaps: np.ndarray, first: int, last: int, accept_length: float | None, rules: StallRules
) -> str | None:
    """Why the server's wait from content chunk ``first`` to ``last`` cannot be a draft collapse, if it cannot:
    a collapse holds for a stretch of the answer, so the chunks beside the wait came slowly too (a streak of
    drafts rejected at normal acceptance delays one chunk and is over), and it leaves one token per step where
    steps gave ``accept_length``, so the wait is at most about that many usual gaps."""
    if not server_gaps.size:
        return None  # one server chunk: no rhythm to judge by
    usual = float(np.median(server_gaps))
    if accept_length is not None:
        bound = rules.spec_step_slack * accept_length * usual
        if server_gaps[first:last].sum() > bound:
            return f"at {accept_length:.1f} tokens per step a collapse stretches the usual gap to {bound / 1000:.1f} ms"
    side = rules.collapse_neighbours
    beside = [server_gaps[max(first - side, 0) : first], server_gaps[last : last + side]]
    pace = max((float(gaps.mean()) for gaps in beside if gaps.size), default=0.0)
    if pace < rules.collapse_rhythm * usual:
        return f"the chunks beside it came {pace / max(usual, 1.0):.1f}x the usual gap apart, not a slowed stretch"
    return None


def _engine_cause(
    window: tuple[int, int], events: list[NodeEvent], spec_active: bool, rules: StallRules
) -> tuple[str, float, dict[str, str]]:
    """What the node's engine did in the server gap's window: a cause, its confidence and the evidence."""
    seen = {e.kind for e in events if e.start_us - rules.event_slack_us <= window[1] and e.end_us >= window[0]}
    for kind, cause in ENGINE_EVENT_CAUSES:
        if kind in seen:
            return cause, 0.85, {"node_events": ",".join(sorted(seen))}
    if spec_active:
        return "spec_decode", 0.6, {"node": "speculative decoding active, no other engine event"}
    return "unknown", 0.3, {"node": "server late, no engine event in the window"}
