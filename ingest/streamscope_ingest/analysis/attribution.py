"""Stall attribution: find the stalls of one stream and name what caused each, with the evidence used.

A stall is what ``streamscope_ingest.blocks.stalls`` says, in what the reader saw: a browser's chunks count from
the frame that painted them. For each client stall:

0. On a browser, the part of the gap after the chunk that ended it had arrived is the screen's: the page had the
   chunk and had not shown it (the app's render work, or a main thread too busy to paint). When it is the larger
   part, the cause is ``client_render``; the rest of the gap, waiting for the chunk, is judged as below.

1. The client chunk is aligned with the server's emission of the same content by cumulative content bytes
   (proxies re-chunk, never change content). Timestamps are only ever subtracted on one host: each chunk's
   path delay is its client offset minus its server offset, less the stream's smallest such difference (the
   constant between the two starts cancels), i.e. how much longer than the stream's quickest chunk it spent
   between the server and the client.
2. The client's wait splits in three: the chunk that ended the stall was late on the path for its path delay
   (at most the whole gap), and before that the client was waiting on the server. Of the path's part, the time
   the client's own host did not run the reader (``Timeline.host_delay_us``, when the SDK watched its host:
   an event loop running late, a process starved of CPU, a page's long task) is the host's. The largest part
   names the cause, so a gap where the engine stalled and a gateway then held what it emitted goes to whichever
   held it longer; the second part, when it is a sizeable share of the gap, is named as ``secondary_cause`` in
   the evidence. (Comparing the two sides' gaps alone is not enough: a gateway that had been holding the
   previous chunk absorbs a server delay that happened meanwhile.)
3. The host's part: ``client_host``. The reader's own host kept it from reading what had arrived. When the
   server's part is the larger but nothing on the node explains it (a KV cache merely over its high-water mark is
   the node's condition, not this request's; a preemption does not silence every stream of the node, as in 6),
   a host that did not run the reader for a third of the wait (half of a stall's excess) is the cause the stall
   had anyway: ``client_host``, lower confidence. (The reader's host and the server's may be one, as with a load
   generator beside the engine: then the host may have let go of the reader well before the read, while the
   engine it also held caught up; holds that long anywhere in the wait, ``Timeline.host_held_us`` or, when it held
   in fits, all of them summed (``host_held_total_us``), are the host's too, lower confidence still.) Behind a
   gateway the host held the content only from the gateway's flush on, which the release's freshest chunk dates:
   when the gateway held it longer, the stall is the gateway's, the host second; but a host that held the reader
   for most of the wait (``host_through_flush_share``) read too little to date the flush by: ``unknown``.
4. The path's part: the network delayed it, and how it delivered tells which way. A buffering gateway
   (``network_buffering``) holds everything and hands it over together: it holds the first chunk (its lateness on the
   path not counting the client's own host, nor the request's way to the server, which a slow proxy or client
   stretches), or most of the stream's chunks, handed over in flushes, its stalls (one is enough) each ending in a
   release that caught the client up. A connection that stalls (``connection``) leaves the rest behind or lets
   everything between its stalls through on time, however alike its stalls' lengths; it is believed only for a delay
   at least a lost segment's retransmission timeout long (shorter ones on a prompt path are ``unknown``): the chunk's
   whole lateness on the path, less the host's part, of which only some falls in the gap when the content before it
   came late too. In a buffered stream a delay far longer than its siblings is a connection too, and so is a delay of
   content that had already been sent when the previous chunk arrived and that the path then held clearly longer than
   the gateway holds a chunk: a flush releases everything it holds, a stalled connection leaves the rest behind.
5. The server's part: first the serving process's own, the time its host did not run it before it sent (the server
   span's ``host_delay_us``: an API server busy tokenising or detokenising, its interpreter shared with other
   requests, its process starved of CPU): ``server_host`` when that is the largest part of the wait, or, with nothing
   on the node explaining the rest, when it held a third of the wait. The rest is the engine on the stream's node,
   what hit this request before what the node went through. A prefill burst in the window (``prefill_interference``:
   it slows every sequence in the batch); then this request's own rhythm slowed as a draft collapse slows it
   (``spec_decode``, surer with an acceptance drop seen on the node); then a preemption (``kv_pressure``); then the
   node's GPU failing (``gpu_fault``: an XID error, the GPU lost or unavailable) or slowing its clocks for heat or
   power (``gpu_throttle``: every step takes longer). A KV cache over its high-water mark stalls no request by itself
   (a request waits when it is preempted): alone, it is the remaining explanation, with low confidence; otherwise
   ``unknown``. A draft collapse is believed only if the rhythm could be that slow: it leaves one token per step
   where the node's steps gave its acceptance length, so it stretches the stream's usual server gap by about that
   factor, never into a freeze many times longer, and it slows a stretch, not one chunk (``spec_decode_ruled_out`` in
   the evidence says why not). With a recording gateway between the server and the client (``streamscope gateway``),
   the path's part is split at it: held at the gateway, or after it (``held_at`` in the evidence).
6. Across streams: a late arrival on one stream is that connection's, but when a host the stream shares with
   others (its client process, the endpoint it streamed from, its serving node) held at least
   ``pause_witnesses`` of its other streams that had content due over the same time, and half of those that
   tell, and released them at about the same instant, the host paused (a CPU-starved load generator, a serving
   process busy after stamping its chunks): ``unknown``, with the count in the evidence, and left out of the
   stream's network stalls. When that host is the endpoint (a gateway or load balancer in front of the
   engines), the path held them: ``connection``, if it held them as long as a stalled connection holds one. A
   client that watched its own host is judged by that evidence, not by its peers. Streams the path held all
   along are no witnesses (a release may come at any time) and are not checked (the path explains their gaps).
   Likewise on the server side: a preemption or a draft collapse delays the requests it hits, so a server gap
   that most of the node's other streams shared, at least ``pause_witnesses`` of them, was the node being slow
   for all (a long step, a busy host): ``unknown``.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_ingest.blocks.stalls import StallRule

UNKNOWN = "unknown"
"""The cause of a stall nothing seen explains (the conventions' causes are ``StreamscopeTruthCauseValues``)."""

SEEN = 0.85
"""Confidence when the evidence names the cause: the node's event in the window, the reader's own host watch, the
screen's frame, a gateway's flushes."""
HICCUP = 0.75
"""A connection's hiccup told from the flushes of a buffering gateway around it."""
INFERRED = 0.6
"""The cause the stall had anyway, inferred: the reader's host idle for a third of a wait nothing on the node
explains, a draft's rhythm slowing with no acceptance drop seen, an endpoint that held its streams together."""
CIRCUMSTANTIAL = 0.5
"""What the circumstances allow and no more: a host that froze earlier in the wait, a pause many streams shared,
a node slow for all its streams."""
UNEXPLAINED = 0.3
"""Nothing seen explains the stall."""

GPU_FAULTS = frozenset({"xid", "gpu_lost", "gpu_unavailable"})
"""Node events of a GPU that stopped running work: an XID error, the GPU lost or unavailable."""
PREEMPTION = "preemption"
"""The node event of requests preempted (their KV cache dropped, to be computed again)."""
HIGH_WATER_ONLY = CIRCUMSTANTIAL
"""The confidence of ``kv_pressure`` from a KV cache over its high-water mark with no preemption seen: a node
condition, not evidence about the stream, so the client's own host evidence outranks it."""
PER_REQUEST_CAUSES = (Cause.KV_PRESSURE, Cause.SPEC_DECODE)
"""Engine causes that delay the requests they hit (a preempted sequence, rejected drafts), not the whole node
(a prefill in the batch delays every sequence decoding with it)."""


@dataclass(frozen=True)
class StallRules:
    stall: StallRule = field(default_factory=StallRule)
    """What a stall is (``streamscope_ingest.blocks.stalls``); the rest is what each cause needs."""
    server_share: float = 0.5
    """The server's part of a client gap at least this share of it: the delay was at (or before) the server."""
    secondary_share: float = 0.25
    """The other part at least this share of the gap is named in the evidence as the secondary cause."""
    event_slack_us: int = 300_000
    """Engine events are sampled every 250 ms: one may have begun this long before it was seen (a long step
    started before the interval that counted it, a level crossed before the sample that saw it). It was over by
    the sample that closed it, so it explains a gap only if it had not ended before the gap began."""
    held_first_chunk_us: int = 250_000
    """The first content chunk this late on the path (see ``Arrivals``), the client's own host not counted: the
    path held it."""
    host_share: float = 1 / 3
    """The reader's own host not running for this share of a stall's wait accounts for half its excess over the
    stream's usual gap (a stall is at least three usual gaps): when nothing on the node explains the server's part,
    the host's is the cause the stall had anyway."""
    host_through_flush_share: float = 0.7
    """Behind a gateway, a hold of the reader's own host that ended at the read and covered this share of the wait
    or more overlapped the gateway's hold: the flush is dated only by the freshest chunk the busy reader read, so
    which held the content longer is not known (``unknown``, not the gateway's)."""
    held_chunk_us: int = 30_000
    held_share: float = 0.5
    """A stream whose content chunks (the first aside) were this late on the path, this share of them or more, was
    held all along (a gateway holding it, or a connection left behind)."""
    release_us: int = 5_000
    """Client chunks arriving this close one after the other came out of one release (a flush, a connection
    resuming)."""

    @property
    def read_apart(self) -> tuple[int, int]:
        """(gap, lateness): a large flush can reach a busy reader in several reads a little further apart than
        ``release_us``; the release goes on through a pause of up to twice that while what follows was still this
        late (see ``Arrivals.release_end``)."""
        return 2 * self.release_us, self.held_chunk_us

    alone_share: float = 0.02
    """A gateway that buffers hands chunks over in flushes, each with the several it held: a stream that got more
    than this share of its chunks on their own (nothing arriving within ``release_us`` before or after) streamed
    freely between its stalls, however late a busy host made its chunks."""
    start_chunks: int = 4
    """A stream with this many content chunks (the first aside) before its first network stall shows whether a
    gateway held it from the start: if most of them came on time, none did, whatever the stalls made of the chunks
    after (a connection that stalls leaves its client behind, or hands over what it held at once, as a flush does;
    a stall late in a short stream leaves most of its chunks held)."""
    caught_up_share: float = 0.5
    """A release whose freshest chunk was at most this share as late as the chunk that ended the stall caught the
    client up: a flush releases everything it holds; a connection that resumes after a stall stays behind."""
    connection_floor_us: int = 200_000
    """A lost segment is sent again after at least TCP's minimum retransmission timeout (200 ms on Linux): a
    shorter delay on an otherwise prompt path is queueing or jitter, not a stalled connection."""
    pause_witnesses: int = 2
    """A host pause needs at least this many other streams held (or silent) with the stall, and most of those
    that tell: one other stream held at the same instant is as likely a coincidence (two connections, a gateway's
    flush) as a pause."""
    hiccup_factor: float = 1.5
    hiccup_extra_us: int = 500_000
    """In a buffered stream, a network gap this many times the median network gap, and this much longer, is a
    connection hiccup on top of the gateway (a flush stretched by a slowish server is neither)."""
    left_behind_us: int = 50_000
    left_behind_extra_us: int = 100_000
    """In a buffered stream, content already sent this long before the previous chunk arrived, that the path then
    delayed this much more than the gateway holds a chunk, was not held by a flush (a flush releases all it
    holds): a connection hiccup. What follows a flush was sent after it, give or take how long the reader took to
    read a large flush (tens of milliseconds for hundreds of events)."""
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
    host_delay_us: np.ndarray | None = None
    """How much of the wait before each chunk the reader's own host did not run it (None: not watched)."""
    host_held_us: np.ndarray | None = None
    """The longest hold of the reader's own host anywhere in that wait, where longer (0 elsewhere; None: not
    watched, or not reported)."""
    host_held_total_us: np.ndarray | None = None
    """Every hold of the reader's own host in that wait summed, where more than the longest (0 elsewhere; None: not
    watched, or not reported)."""

    def content(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Indices of content chunks, their offsets (arrivals), and cumulative content bytes up to each."""
        index = np.flatnonzero(self.content_bytes > 0)
        return index, self.offsets_us[index], np.cumsum(self.content_bytes)[index]

    def host_delays(self, content_index: np.ndarray) -> np.ndarray | None:
        """Per content chunk of ``content_index``, how long this side's own host did not run it while it waited for
        that chunk (since the previous one of them arrived; for the first, since the request); None when the host
        was not watched."""
        if self.host_delay_us is None:
            return None
        cumulative = np.cumsum(self.host_delay_us)[content_index]
        return np.diff(cumulative, prepend=0)

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
    magnitude: float | None = None
    """How much (tokens in a prefill burst, requests waiting), when told."""


@dataclass
class Stall:
    seq: int
    start_us: int
    end_us: int
    gap_us: int
    cause: str = UNKNOWN
    confidence: float = UNEXPLAINED
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
    stalled = np.flatnonzero(rules.stall.stalls_among(gaps, median))
    return [
        Stall(
            seq=int(index[k + 1]),
            start_us=timeline.start_us + int(shown[k]),
            end_us=timeline.start_us + int(shown[k + 1]),
            gap_us=int(gaps[k]),
            screen_us=int(min(gaps[k], shown[k + 1] - arrived[k + 1])),
            evidence={"median_gap_ms": f"{median / 1000:.1f}"},
        )
        for k in stalled
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
    told: np.ndarray | None = None
    """The content chunks whose lateness tells how the path delivered the stream (None: all of them)."""

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
        gateway or a connection left behind (its first chunk held, or its chunks held in flushes: a release may
        come at any time), or it was held only briefly."""
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
            or self.held_in_flushes(rules)
            or not held.any()
            or self.path_us[held].max() < rules.shared_hold_share * (end_us - silent_from_us)
        ):
            return None
        return True

    def read_on_time(self, host: np.ndarray | None, rules: StallRules) -> Arrivals:
        """These arrivals, told by the releases the reader's own host did not hold (``host``: per content chunk,
        its host delay; a release's first read is the one that waited for the host, and the rest of the release
        waited in the socket with it). A busy reader reads what waited for it in bursts, as a gateway's flushes
        come, and how late those chunks were says nothing of the path. All of them when fewer than
        ``start_chunks`` would be left."""
        if host is None or not host.size:
            return self
        starts = np.concatenate(([True], np.diff(self.times_us) > rules.release_us))
        held = host[np.flatnonzero(starts)[np.cumsum(starts) - 1]] >= rules.held_chunk_us
        if np.count_nonzero(~held[1:]) < rules.start_chunks:
            return self
        return replace(self, told=~held)

    def _told_after_first(self, before: int | None = None) -> np.ndarray:
        """Which content chunks after the first (and before content chunk ``before``) tell of the path."""
        told = np.ones(self.path_us.size, dtype=bool) if self.told is None else self.told
        return told[1:before]

    def held_in_flushes(self, rules: StallRules) -> bool:
        """Whether the path held this stream's chunks as a gateway does: most of them late, next to none on their
        own."""
        return self.held_share(rules) >= rules.held_share and self.alone_share(rules) <= rules.alone_share

    def held_share(self, rules: StallRules) -> float:
        """The share of content chunks after the first (of those that tell) at least ``held_chunk_us`` late on the
        path."""
        late = (self.path_us[1:] >= rules.held_chunk_us)[self._told_after_first()]
        return float(np.mean(late)) if late.size else 0.0

    def alone_share(self, rules: StallRules) -> float:
        """The share of content chunks after the first (of those that tell) that arrived on their own, out of no
        release."""
        apart = np.diff(self.times_us) > rules.release_us
        alone = (np.concatenate(([True], apart)) & np.concatenate((apart, [True])))[1:][self._told_after_first()]
        return float(np.mean(alone)) if alone.size else 0.0

    def caught_up(self, k: int, rules: StallRules) -> float:
        """How late the freshest chunk of the release that content chunk ``k`` began was on the path, as a share of
        how late ``k`` was: near 0 when the release handed over everything held (a flush), near 1 when the
        client stayed behind. A large flush can reach the reader in several reads a little further apart than
        ``release_us``: the release goes on through such a pause while what follows it was still held."""
        return self.freshest(k, rules.release_us, rules.read_apart) / max(float(self.path_us[k]), 1.0)

    def freshest(self, k: int, apart_us: int, read_apart: tuple[int, int] | None = None) -> int:
        """How late the freshest chunk of the release that content chunk ``k`` began (chunks at most ``apart_us``
        apart, or, with ``read_apart`` (gap, lateness), at most that gap apart when the next chunk was at least
        that late) was on the path. A gateway hands over only what it holds when it flushes: content sent after its
        flush waits for the next one, so the release's freshest chunk dates the flush, however long the client's
        host took to read it."""
        return int(self.path_us[k : self.release_end(k, apart_us, read_apart)].min())

    def release_end(self, k: int, apart_us: int, read_apart: tuple[int, int] | None = None) -> int:
        """The content position just past the release that content chunk ``k`` began (see ``freshest``)."""
        gap_us, late_us = read_apart or (apart_us, 0)
        end = k + 1
        while end < self.times_us.size and (
            (apart := self.times_us[end] - self.times_us[end - 1]) <= apart_us
            or (apart <= gap_us and self.path_us[end] >= late_us)
        ):
            end += 1
        return end

    def held_from_start(self, before: int, rules: StallRules) -> bool | None:
        """Whether the path held this stream's content from its start, as a gateway that buffers does from the
        first byte: most chunks after the first and before content chunk ``before`` late on the path. None when
        fewer than ``start_chunks`` came before it."""
        start = self.path_us[1:before][self._told_after_first(before)]
        if start.size < rules.start_chunks:
            return None
        return float(np.mean(start >= rules.held_chunk_us)) >= rules.held_share

    def silent_through(self, start_us: int, end_us: int, rules: StallRules) -> bool | None:
        """Whether the server emitted none of this stream's content well inside ``start_us``..``end_us`` (server
        clock); None when the stream was not being served across that window."""
        if not self.sent_us.size or self.sent_us[0] > start_us or self.sent_us[-1] < end_us:
            return None
        inside = (self.sent_us > start_us + rules.due_slack_us) & (self.sent_us < end_us - rules.due_slack_us)
        return not inside.any()


@dataclass(frozen=True)
class SharedHost:
    """A host a stream shares with other streams over the same time (its client process, the endpoint it streamed
    from, its serving node)."""

    kind: str
    """``client process``, ``endpoint`` (the ``server.address:port`` it streamed from) or ``node``."""
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
    relay: Timeline | None = None,
) -> list[Stall]:
    """The client's stalls, each with a cause, a confidence and its evidence. ``spec_accept_length`` is the
    node's tokens per speculative step (None: not reported); ``shared_hosts`` gives, when asked, the hosts this
    stream shares with others (its client process, its serving node); ``relay`` is the side of a gateway between
    the server and the client, which splits the path's part of a stall at the gateway (``_where_on_the_path``)."""
    stalls = find_stalls(client, rules)
    waiting = [stall for stall in stalls if not _on_screen(stall, rules)]
    if not waiting:
        return stalls
    c_index, _, c_cumulative = client.content()
    host = client.host_delays(c_index)
    held = _host_holds(client, c_index)
    if server is None or not server.content()[0].size:
        for stall in waiting:
            stall.evidence["server"] = "no server span for this trace"
            if host is not None:
                _host_alone(stall, int(host[np.searchsorted(c_index, stall.seq)]), rules)
        return stalls
    s_index, s_offsets, s_cumulative = server.content()
    s_host = server.host_delays(s_index)
    arrivals = Arrivals.of(client, server)
    s_gaps = np.diff(s_offsets)
    network: dict[int, tuple[Stall, int]] = {}  # content position -> the stall and how long the path held it
    host_held: dict[int, tuple[Stall, int]] = {}  # the same, for stalls the host held longest, and the host's part
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
        # the client's own host not reading is part of the chunk's lateness after it was sent, at most all of it
        host_part = min(int(host[k]), wait - server_part) if host is not None else 0
        # the serving process's own host not sending is part of the server's, at most all of it
        sender = int(s_host[j_before + 1 : j_through + 1].sum()) if s_host is not None else 0
        sender_part = min(sender, server_part)
        parts = {
            "server": server_part - sender_part,
            Cause.CLIENT_HOST: host_part,
            Cause.SERVER_HOST: sender_part,
            "network": wait - server_part - host_part,
        }
        stall.evidence.update(
            server_gap_ms=f"{server_gap / 1000:.1f}",
            client_gap_ms=f"{stall.gap_us / 1000:.1f}",
            path_delay_ms=f"{stall.path_delay_us / 1000:.1f}",
            server_part_ms=f"{server_part / 1000:.1f}",
        )
        if host is not None:
            stall.evidence["host_delay_ms"] = f"{host[k] / 1000:.1f}"
        if sender:
            stall.evidence["server_host_delay_ms"] = f"{sender / 1000:.1f}"
        window = (server.start_us + int(s_offsets[j_before]), server.start_us + int(s_offsets[j_through]))
        engine, confidence, engine_evidence = _engine_cause(
            window,
            node_events,
            spec_active,
            partial(_not_a_collapse, s_gaps, j_before, j_through, spec_accept_length, rules),
            rules,
        )
        primary = max(parts, key=lambda part: parts[part])  # ties: the server, then the host
        secondary = max((part for part in parts if part != primary), key=lambda part: parts[part])
        if parts[secondary] >= rules.secondary_share * stall.gap_us and (secondary != "server" or engine != UNKNOWN):
            stall.evidence["secondary_cause"] = engine if secondary == "server" else secondary
        if primary == "server":
            stall.cause, stall.confidence = engine, confidence
            stall.evidence.update(engine_evidence)
            if engine in PER_REQUEST_CAUSES and shared_hosts is not None:
                hosts = list(shared_hosts()) if hosts is None else hosts
                _node_slow(stall, window, hosts, rules)
            unexplained = stall.cause == UNKNOWN or stall.confidence <= HIGH_WATER_ONLY
            if unexplained and host is not None and host[k] >= rules.host_share * wait:
                # nothing that hit this request explains the server's part (or its node was silent for every
                # stream); the reader could not have read for this long anyway
                stall.cause, stall.confidence = Cause.CLIENT_HOST, INFERRED
            elif unexplained and held is not None and held.total_us[k] >= rules.host_share * wait:
                # the reader's host froze earlier in the wait (once or in fits) and the server fell silent as well:
                # one host (an engine beside its load generator), which sent late once it ran again
                stall.cause, stall.confidence = Cause.CLIENT_HOST, CIRCUMSTANTIAL
                stall.evidence["host_held_ms"] = f"{held.longest_us[k] / 1000:.1f}"
                if held.total_us[k] > held.longest_us[k]:
                    stall.evidence["host_held_total_ms"] = f"{held.total_us[k] / 1000:.1f}"
            elif unexplained and sender_part >= rules.host_share * wait:
                # nothing on the node explains the rest, and the serving process did not run for a third of it
                stall.cause, stall.confidence = Cause.SERVER_HOST, INFERRED
        elif primary == Cause.SERVER_HOST:
            stall.cause, stall.confidence = Cause.SERVER_HOST, SEEN
        elif primary == Cause.CLIENT_HOST:
            stall.cause, stall.confidence = Cause.CLIENT_HOST, SEEN
            host_held[k] = (stall, parts[Cause.CLIENT_HOST])
        else:
            # what the path held the chunk for: all its lateness the host does not explain, whether or not the
            # content before it came late too (then only part of that hold fell in this gap)
            network[k] = (stall, stall.path_delay_us - host_part)
    first_held = int(arrivals.path_us[0]) - (min(int(host[0]), int(arrivals.path_us[0])) if host is not None else 0)
    stalled_at = sorted(int(np.searchsorted(c_index, stall.seq)) for stall in waiting)
    read_late = [_read_late(host, stalled_at, k) for k in network]
    left_behind = _left_behind(list(network.values()), read_late, first_held, rules)
    left = {k for k, left_there in zip(network, left_behind, strict=True) if left_there}
    behind = _held_all_along(arrivals.read_on_time(host, rules), first_held, sorted(network), left, rules)
    if behind:
        network.update(_gateway_held_longer(host_held, arrivals, rules))
    if network and shared_hosts is not None and not behind:
        # (behind a gateway, or a connection left behind, the path explains the gaps)
        hosts = list(shared_hosts()) if hosts is None else hosts
        for k, (stall, network_us) in list(network.items()):
            if _shared_pause(stall, network_us, hosts, rules, host_watched=host is not None):
                del network[k]
    late = [_read_late(host, stalled_at, k) for k in network]
    _network_causes(list(network.values()), late, behind, first_held, rules)
    if relay is not None and relay.content()[0].size:
        _where_on_the_path(list(network.values()), c_cumulative[list(network)], relay, server)
    return stalls


def _where_on_the_path(
    network: list[tuple[Stall, int]], through: np.ndarray, relay: Timeline, server: Timeline
) -> None:
    """With a gateway between the server and the client, the path's part of each stall split at it: how late the
    gateway relayed the content that ended the stall (``held_at_gateway_ms``: a gateway that held it) and how much
    later than that the client got it (``after_gateway_ms``), each as late as the stream's quickest chunk allows
    (as ``Arrivals`` measures), and the larger named in ``held_at``."""
    relayed = Arrivals.of(relay, server)
    _, _, r_cumulative = relay.content()
    at = np.minimum(np.searchsorted(r_cumulative, through), r_cumulative.size - 1)
    for (stall, _), gateway_us in zip(network, relayed.path_us[at], strict=True):
        assert stall.path_delay_us is not None
        gateway_part = min(int(gateway_us), stall.path_delay_us)
        after = stall.path_delay_us - gateway_part
        stall.evidence["held_at_gateway_ms"] = f"{gateway_part / 1000:.1f}"
        stall.evidence["after_gateway_ms"] = f"{after / 1000:.1f}"
        stall.evidence["held_at"] = "gateway" if gateway_part > after else "after the gateway"


def _read_late(host: np.ndarray | None, stalled_at: list[int], k: int) -> int:
    """How late the reader's host let it read the content before stall ``k``'s chunk: the longest host delay since
    the stall before (content positions ``stalled_at``). A chunk read after a long gap is measured; the ones read
    right after it, in the same burst, were as late."""
    if host is None:
        return 0
    before = bisect.bisect_left(stalled_at, k)
    start = stalled_at[before - 1] if before else 0
    return int(host[start:k].max()) if k > start else 0


@dataclass(frozen=True)
class HostHolds:
    """Per content chunk, the holds of the reader's own host in its wait (since the previous content chunk arrived,
    over the chunks between), each at least its host delay."""

    longest_us: np.ndarray
    total_us: np.ndarray
    """Every hold summed: a host busy in fits held the reader, and a peer beside it, for all of them."""


def _host_holds(client: Timeline, content_index: np.ndarray) -> HostHolds | None:
    """The holds of the reader's own host in each content chunk's wait; None when not reported."""
    if client.host_held_us is None or client.host_delay_us is None or not content_index.size:
        return None
    through = int(content_index[-1]) + 1
    longest = np.maximum(client.host_held_us[:through], client.host_delay_us[:through])
    total = longest if client.host_held_total_us is None else np.maximum(client.host_held_total_us[:through], longest)
    waits = np.concatenate(([0], content_index[:-1] + 1))
    return HostHolds(np.maximum.reduceat(longest, waits), np.add.reduceat(total, waits))


def _host_alone(stall: Stall, host_us: int, rules: StallRules) -> None:
    """Without a server span, the client's own host still explains a stall it held for most of the wait."""
    stall.evidence["host_delay_ms"] = f"{host_us / 1000:.1f}"
    if host_us >= rules.server_share * stall.wait_us:
        stall.cause, stall.confidence = Cause.CLIENT_HOST, SEEN


def _held_all_along(
    arrivals: Arrivals, first_held_us: int, network: list[int], left: set[int], rules: StallRules
) -> bool:
    """Whether the path held this stream all along, as a gateway that buffers does: it held the first chunk, or
    it held most chunks, its network stalls each ending in a release that caught the client up (a flush hands
    over everything it holds; a connection that resumes after a stall stays behind, its chunks late but not held
    back together), and it handed over next to nothing on its own. One stall is enough when every chunk came so:
    a gateway flushing on bytes makes a stall only when a flush comes a little late. A stream that began on time
    (``Arrivals.held_from_start``) was held by no gateway. A stall that left content behind (``left``: a
    connection's, see ``_left_behind``) says nothing of the flushes, nor does the release it cut short; when
    those are all the stalls there are, the flushes alone tell."""
    if first_held_us >= rules.held_first_chunk_us:
        return True
    if not network or arrivals.held_from_start(min(network), rules) is False or not arrivals.held_in_flushes(rules):
        return False
    telling = [
        k
        for k, after in zip(network, [*network[1:], None], strict=True)
        if k not in left
        and not (after in left and arrivals.release_end(k, rules.release_us, rules.read_apart) >= after)
    ]
    if not telling:
        return True
    return float(np.median([arrivals.caught_up(k, rules) for k in telling])) <= rules.caught_up_share


def _left_behind(
    network: list[tuple[Stall, int]], read_late_us: list[int], first_held_us: int, rules: StallRules
) -> list[bool]:
    """Which of a stream's network stalls left content behind, as a connection that stalls in the middle of a
    release does, where a flush hands over all it holds: the chunk that ended it was sent ``left_behind_us`` or more
    before the previous chunk arrived (that one read as late as ``read_late_us`` says, by the reader's own host),
    and the path added ``left_behind_extra_us`` more to the wait than the gateway holds a chunk (its first chunk,
    or what the path added to the stream's other stalls, typically: the flush after a hiccup is one of the
    gateway's)."""
    added = [stall.wait_us - (stall.server_gap_us or 0) for stall, _ in network]  # what the path added in the wait
    left = []
    for i, ((stall, _), read_late) in enumerate(zip(network, read_late_us, strict=True)):
        already_sent = _sent_before_previous_arrived(stall, read_late)
        others = added[:i] + added[i + 1 :]
        held = max(first_held_us, float(np.median(others)) if others else 0.0)
        left.append(already_sent >= rules.left_behind_us and added[i] - held >= rules.left_behind_extra_us)
    return left


def _sent_before_previous_arrived(stall: Stall, read_late_us: int) -> int:
    """How long before the previous chunk arrived the chunk that ended ``stall`` had been sent (negative: after),
    that previous chunk taken as read ``read_late_us`` sooner: the reader's host held it that long, and a flush then
    may have released this one with it."""
    assert stall.path_delay_us is not None
    return stall.path_delay_us - stall.wait_us - read_late_us


def _gateway_held_longer(
    host_held: dict[int, tuple[Stall, int]], arrivals: Arrivals, rules: StallRules
) -> dict[int, tuple[Stall, int]]:
    """Of the stalls put on the client's host, those a gateway the stream is behind held longer, each with the
    gateway's part of the wait. The host's part was its hold that ended at the read, but a gateway may have held
    the content through most of that hold: it held it until its flush, which the release's freshest chunk dates
    (``Arrivals.freshest``), and the host held it only from the flush on. Both parts are in the evidence. A host
    that held the reader for most of the wait held it through the flush, which what it read then cannot date: such
    a stall is ``unknown``, neither the gateway's nor the host's."""
    gateway: dict[int, tuple[Stall, int]] = {}
    for k, (stall, held_us) in host_held.items():
        assert stall.path_delay_us is not None
        since_flush = arrivals.freshest(k, rules.release_slack_us)  # a busy host reads a flush in several goes
        flushed_us = min(stall.path_delay_us, stall.wait_us) - since_flush
        host_us = min(held_us, since_flush)
        stall.evidence["gateway_part_ms"] = f"{flushed_us / 1000:.1f}"
        stall.evidence["host_part_ms"] = f"{host_us / 1000:.1f}"
        if flushed_us <= host_us:
            continue
        if held_us >= rules.host_through_flush_share * stall.wait_us:
            stall.cause, stall.confidence = UNKNOWN, UNEXPLAINED
            stall.evidence["network"] = "the reader's host held it through the flush"
        else:
            gateway[k] = (stall, flushed_us)
            stall.evidence.pop("secondary_cause", None)
            if host_us >= rules.secondary_share * stall.gap_us:
                stall.evidence["secondary_cause"] = Cause.CLIENT_HOST
    return gateway


def _on_screen(stall: Stall, rules: StallRules) -> bool:
    """Whether the page had the chunk that ended ``stall`` for most of it (``client_render``); notes a sizeable
    screen part as the secondary cause otherwise."""
    if not stall.screen_us:
        return False
    stall.evidence["screen_part_ms"] = f"{stall.screen_us / 1000:.1f}"
    if stall.screen_us >= rules.server_share * stall.gap_us:
        stall.cause, stall.confidence = Cause.CLIENT_RENDER, SEEN
        stall.evidence["waiting_part_ms"] = f"{stall.wait_us / 1000:.1f}"
        return True
    if stall.screen_us >= rules.secondary_share * stall.gap_us:
        stall.evidence["secondary_cause"] = Cause.CLIENT_RENDER
    return False


def _network_causes(
    network: list[tuple[Stall, int]], read_late_us: list[int], behind: bool, first_held_us: int, rules: StallRules
) -> None:
    """A buffering gateway or a connection hiccup, for the stalls the path caused (each with how long the path held
    its chunk, and how late the reader's own host let it read the content before): in a stream the path held all
    along (``_held_all_along``) the gateway's, unless a stall stands out from its flushes or left content
    behind (``_left_behind``); elsewhere a stalled connection, when the path held the chunk as long as a lost
    segment takes to be sent again."""
    if not network:
        return
    # what the path made each wait, less the host's part of it (the reader's host held what had arrived)
    waited = [stall.wait_us - max(0, (stall.path_delay_us or 0) - network_us) for stall, network_us in network]
    typical = float(np.median(waited))
    left = _left_behind(network, read_late_us, first_held_us, rules)
    for (stall, network_us), read_late, path_wait, left_behind in zip(network, read_late_us, waited, left, strict=True):
        already_sent = _sent_before_previous_arrived(stall, read_late)
        stands_out = path_wait > rules.hiccup_factor * typical and path_wait - typical >= rules.hiccup_extra_us
        hiccup = not behind or left_behind or (len(network) >= 2 and stands_out)
        stall.evidence["network_stalls_in_stream"] = str(len(network))
        stall.evidence["first_chunk_path_delay_ms"] = f"{first_held_us / 1000:.1f}"
        stall.evidence["held_all_along"] = str(behind).lower()
        if already_sent > 0:
            stall.evidence["sent_before_previous_arrived_ms"] = f"{already_sent / 1000:.1f}"
        if read_late:
            stall.evidence["previous_read_late_ms"] = f"{read_late / 1000:.1f}"
        if behind and hiccup:
            stall.evidence["hiccup"] = "left content behind" if left_behind else "stands out from the flushes"
        if hiccup and network_us < rules.connection_floor_us:
            stall.cause, stall.confidence = UNKNOWN, UNEXPLAINED
            stall.evidence["network"] = "held on the path for less than a retransmission timeout"
            continue
        stall.cause = Cause.CONNECTION if hiccup else Cause.NETWORK_BUFFERING
        stall.confidence = HICCUP if hiccup else SEEN


def _server_part(gap_us: int, path_delay_us: int) -> int:
    """The part of a client gap spent waiting on the server: the client waited on the path for as long as the
    chunk that ended the gap was late on it (at most the whole gap), and on the server before that."""
    return gap_us - min(gap_us, path_delay_us)


def _shared_pause(
    stall: Stall, network_us: int, hosts: list[SharedHost], rules: StallRules, *, host_watched: bool
) -> bool:
    """Whether a host this stream shares held enough of its other streams that tell (``held_through``), at least
    ``pause_witnesses`` and half of those that tell, while this chunk was late on the path, until the same
    instant; if so the stall is ``unknown``, with that in the evidence, or, when the host is the endpoint the
    streams were read from (a gateway in front of the engines), ``connection``: the path held everything it
    relayed, for as long as a stalled connection holds one (``network_us``, how long the path held this chunk: at
    least a retransmission timeout).
    The client's own process is judged by its own evidence when it watched itself (``client_host``), never by its
    peers."""
    assert stall.path_delay_us is not None
    due_from = stall.arrived_us - stall.path_delay_us
    silent_from = max(due_from, stall.start_us)  # the client waited on the path from here
    for host in hosts:
        if host_watched and host.kind == "client process":
            continue
        verdicts = [peer.held_through(due_from, silent_from, stall.arrived_us, rules) for peer in host.peers]
        held, telling = verdicts.count(True), len(verdicts) - verdicts.count(None)
        if held >= rules.pause_witnesses and 2 * held >= telling:
            path = host.kind == "endpoint" and network_us >= rules.connection_floor_us
            stall.cause, stall.confidence = (Cause.CONNECTION, INFERRED) if path else (UNKNOWN, CIRCUMSTANTIAL)
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
        if silent >= rules.pause_witnesses and 2 * silent > served:
            stall.evidence["not_blamed"] = stall.cause
            stall.cause, stall.confidence = UNKNOWN, CIRCUMSTANTIAL
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


def events_during(window: tuple[int, int], events: list[NodeEvent], slack_us: int) -> list[NodeEvent]:
    """The node's events that may have been under way in ``window`` (its clock): one seen up to ``slack_us`` after
    it began (a sample closes it), or, a GPU fault, up to ``slack_us`` before it (reported at an instant, it stops
    the GPU until it recovers: the wait it makes begins once the step in flight has finished)."""
    return [
        e
        for e in events
        if e.start_us - slack_us <= window[1] and e.end_us + (slack_us if e.kind in GPU_FAULTS else 0) >= window[0]
    ]


def _engine_cause(
    window: tuple[int, int],
    events: list[NodeEvent],
    spec_active: bool,
    collapse_ruled_out: Callable[[], str | None],
    rules: StallRules,
) -> tuple[str, float, dict[str, str]]:
    """What the node's engine did in the server gap's window: a cause, its confidence and the evidence.

    What hit this request outranks what the node went through: a prefill sharing its steps; then its own rhythm
    slowed as a draft collapse slows it (``collapse_ruled_out``: why it cannot be one); then a preemption; then a
    GPU fault (an XID error, the GPU lost or unavailable: it runs nothing), then a GPU throttling its clocks (it
    slows every step on the node). A KV cache over its high-water mark is a node
    condition that stalls no request by itself (a request waits when it
    is preempted): alone, it is the remaining explanation, with low confidence."""
    seen = {e.kind for e in events_during(window, events, rules.event_slack_us)}
    evidence = {"node_events": ",".join(sorted(seen))} if seen else {}
    if "prefill_burst" in seen:
        return Cause.PREFILL_INTERFERENCE, SEEN, evidence
    if spec_active or "spec_acceptance_drop" in seen:
        ruled_out = collapse_ruled_out()
        if ruled_out is None:
            if "spec_acceptance_drop" in seen:
                return Cause.SPEC_DECODE, SEEN, evidence
            return Cause.SPEC_DECODE, INFERRED, {**evidence, "node": "speculative decoding active, its rhythm slowed"}
        evidence["spec_decode_ruled_out"] = ruled_out
    if PREEMPTION in seen:
        return Cause.KV_PRESSURE, SEEN, evidence
    if seen & GPU_FAULTS:
        return Cause.GPU_FAULT, SEEN, evidence
    if "throttle" in seen:
        return Cause.GPU_THROTTLE, SEEN, evidence
    if "kv_high_water" in seen:
        return (
            Cause.KV_PRESSURE,
            HIGH_WATER_ONLY,
            {**evidence, "kv": "KV cache over its high-water mark, no preemption seen"},
        )
    return UNKNOWN, UNEXPLAINED, {**evidence, "node": "server late, no engine event that explains it"}
