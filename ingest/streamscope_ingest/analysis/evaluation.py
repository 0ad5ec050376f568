"""Score attribution against the demo workload's ground truth: per-cause precision, recall, F1, confusion.

Each client stall gets a true label: the cause of the ground-truth record on the same trace whose window
matches the stall's best (intersection over union, so a tight window that is the stall beats a long one
that merely contains it), or ``none`` when no injected window overlaps it. A record that names the chunks it
held, all of them sent after the content that ended the stall (a connection that stalled right after
delivering it, the client reading that content late), held back nothing of the stall and does not label it.
(A record that ended just before the stall began, or began just after it ended, did not delay the content
that ended it; it still counts as found, within ``MATCH_SLACK_US``, for ``undetected`` below.) Precision and
recall are computed over stalls and slow starts; ground truth that delayed a content chunk after the first by as
much as a stall, yet met no stall, is counted apart as ``undetected`` (and included in recall), so a silent
detector cannot score well. (Ground truth that held the stream's first content chunk delayed its time to first
token, not a gap: see slow starts below. A server delay that began and ended while the path held the stream
anyway, inside a gateway's hold or a stalled connection, changed nothing the client received: the content made
the same release.)

A record that overlaps a stall for less than a third of it did not make the stall (``EXPLAINING_SHARE``). A
record whose chunks are those the client received in its window (``detail.indices = arrivals``: an injector
beside the clients cannot see when the engine emitted them) yields to a record of the path that names the chunks it
held over at least half the stall: the arrivals it counted may be the path's doing.

When two injected causes touch one stall (the engine preempted the request and a gateway then held what it
emitted), the label is the one that held the stall's content for most of the stall: every record's window
is the time its cause held content back, so among windows inside the stall the larger overlap wins, and a
window reaching beyond the stall (a preemption that went on to delay the next chunk) is discounted for the part
that delayed other content. Attribution splits the client's wait the same way (the server's part and the
path's part), so both sides mean one thing. Collapsed speculative decoding holds content back only by the
steps it added over normal acceptance, so its window is that added time, at the end of the event's wait: a
stall inside a collapsed stretch that a prefill burst or a slow node step made is labelled with that cause.

Chunks are numbered as the engine emitted them: by its server span, or by the gateway that relayed them where the
engine records nothing (a gateway forwards every event as it came).

A ``client_host`` record of the whole client process (the time its event loop did not run: no trace id) is a
candidate for every client and browser stall of the run by time alone, under the same rules as a record of the
stall's own trace: the workload runs its clients in one process, so a record of that host delayed every
stream it was reading. It holds a stream's content only from when the content reached the client: while a
record of the path (a gateway's hold, a stalled connection) on the stall's trace still held it, the host's pause
held back nothing, so its window starts where that hold ended. Such a record that overlapped no stall counts
as undetected if it lasted at least the absolute threshold while some client stream was mid-answer (content
received before it began and after it ended). A ``server_host`` record of a serving node (its serving loop ran
late: no trace id) is a candidate, by time, for the stalls of the streams that node served. Host records of
other causes are not scored.

A slow start (``analysis.first_token``: a first token a second or more after the request) is scored as a stall is,
its window the client's wait from the request to its first content. Ground truth of a first token's wait
(``detail.kind = first_token``: a request queued behind busy slots, a prefill it waited for) that made a wait that
long and met no slow start is undetected.

Attribution may name a second cause in ``evidence['secondary_cause']`` (a cause, or ``network`` for either
path cause). It is counted apart, without changing the primary score: right when another record than the one
that labelled the stall overlaps the stall with that cause.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from clickhouse_connect.driver.client import Client

from streamscope import semconv as sc
from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_ingest import store
from streamscope_ingest.analysis.first_token import FirstTokenRules
from streamscope_ingest.blocks.stalls import EXPLAINING_SHARE, StallRule

SLOW_START_US = FirstTokenRules().slow_start_us

STALL_CAUSES = tuple(c for c in sc.STREAMSCOPE_TRUTH_CAUSE_VALUES if c != "chunking_regression")
DELAY_CAUSES = (
    Cause.KV_PRESSURE,
    Cause.PREFILL_INTERFERENCE,
    Cause.SPEC_DECODE,
    Cause.GPU_THROTTLE,
    Cause.GPU_FAULT,
    Cause.NETWORK_BUFFERING,
    Cause.CONNECTION,
    Cause.QUEUE,
)
"""Causes whose ground-truth magnitude is the delay they added (others measure something else): the network's and
the engine's."""
HOST_CAUSE = Cause.CLIENT_HOST
"""The cause of host-level records (no trace id) that label stalls by time."""
OWN_PAUSE = "proxy_paused"
"""The label of a stall the impairment proxy's own process made by pausing (its watchdog's ``connection`` records,
``detail.kind = paused``): no rule injected it, and a proxy on the clients' machine pauses when they do, which a
gateway on a machine of its own would not. Such stalls are counted apart (``Score.own_pauses``), not scored."""
PATH_HOLDS = (Cause.NETWORK_BUFFERING, Cause.CONNECTION, OWN_PAUSE)
"""Causes that held a stream's content on the path: a server delay inside one did not reach the client."""
HOLDS = (*PATH_HOLDS, Cause.PREFILL_INTERFERENCE, Cause.KV_PRESSURE, Cause.GPU_FAULT)
"""Causes whose record's window is one in which the stream's content was held back altogether (a step that
prefilled, a preempted request, a stopped GPU, the path), not merely slowed (a throttled GPU, a collapsed draft)."""
MATCH_SLACK_US = 100_000

STALLS_SQL = """
SELECT trace_id, seq, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time), cause,
       evidence['secondary_cause'], server_seq
FROM stalls WHERE start_time >= {since:DateTime64(6)} AND side IN ('client', 'browser')
UNION ALL
SELECT trace_id, NULL, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time), cause, '', NULL
FROM slow_starts WHERE start_time >= {since:DateTime64(6)} AND side IN ('client', 'browser')
"""
"""The stalls attributed, and the slow starts (a first token's wait, whose ``seq`` is NULL)."""
TRUTH_SQL = """
SELECT g.trace_id, g.cause, toUnixTimestamp64Micro(g.start_time), toUnixTimestamp64Micro(g.end_time), g.magnitude,
       hasAny(g.chunk_indices, c.content_seqs) AND NOT has(g.chunk_indices, c.first_seq) AS delayed_content,
       if(empty(g.chunk_indices), NULL, arrayMin(g.chunk_indices)) AS first_held,
       g.attributes['streamscope.truth.detail.kind'] = 'paused' AS own_pause,
       g.attributes['streamscope.truth.detail.kind'] = 'first_token' AS first_token,
       g.attributes['streamscope.truth.detail.indices'] = 'arrivals' AS from_arrivals
FROM ground_truth AS g
LEFT JOIN (
    SELECT trace_id, groupUniqArrayIf(seq, kind = 'content') AS content_seqs, anyIf(seq, kind = 'first') AS first_seq
    FROM chunks
    WHERE side IN ('server', 'gateway') AND start_time >= {since:DateTime64(6)} - toIntervalMinute(10)
    GROUP BY trace_id
) AS c ON c.trace_id = g.trace_id
WHERE g.start_time >= {since:DateTime64(6)} AND g.trace_id != '' AND g.cause != 'chunking_regression'
"""
HOST_TRUTH_SQL = """
SELECT cause, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time)
FROM ground_truth WHERE start_time >= {since:DateTime64(6)} AND trace_id = '' AND cause = {cause:String}
"""
SERVER_HOST_TRUTH_SQL = """
SELECT node_name, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time)
FROM ground_truth WHERE start_time >= {since:DateTime64(6)} AND trace_id = '' AND cause = {cause:String}
"""
"""A serving process's own host records (no trace id): they label the stalls of the streams its node served."""
HOST_SOURCES_SQL = f"""
SELECT cause, attributes['streamscope.truth.detail.source'] = 'injected' AS injected, count()
FROM ground_truth
WHERE start_time >= {{since:DateTime64(6)}} AND cause IN ('{Cause.CLIENT_HOST}', '{Cause.SERVER_HOST}')
GROUP BY cause, injected
"""
"""Host records by whether a scenario's host load made them (``injected``) or the machine did (its watchdog)."""
SERVED_BY_SQL = """
SELECT trace_id, any(node_name) FROM streams
WHERE start_time >= {since:DateTime64(6)} - toIntervalMinute(10) AND side = 'server' AND node_name != ''
GROUP BY trace_id
"""
ANSWERING_SQL = """
SELECT toUnixTimestamp64Micro(min(time)), toUnixTimestamp64Micro(max(time))
FROM chunk_timeline
WHERE start_time >= {since:DateTime64(6)} AND side IN ('client', 'browser') AND kind IN ('first', 'content')
GROUP BY trace_id, span_id
"""
"""When each client stream received its first and its last content."""


@dataclass
class Score:
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(true label, predicted cause) -> stalls."""
    undetected: Counter[str] = field(default_factory=Counter)
    secondary_named: int = 0
    """Stalls for which attribution named a secondary cause."""
    secondary_right: int = 0
    """Of those, the stalls that another overlapping ground-truth record of that cause touched."""
    injected: Counter[str] = field(default_factory=Counter)
    """Ground-truth records scored, by cause."""
    own_pauses: Counter[str] = field(default_factory=Counter)
    """Stalls the proxy's own pauses made (``OWN_PAUSE``), by the cause attributed: not in ``confusion``."""
    made_a_stall: Counter[str] = field(default_factory=Counter)
    """Of those, the records that labelled at least one stall: the others slowed content by less than a stall,
    or delayed what a stall of another cause already held."""
    slow_start_labels: Counter[str] = field(default_factory=Counter)
    """The slow starts scored (the rest of the cases are stalls), by their true label."""
    host_records: Counter[tuple[str, bool]] = field(default_factory=Counter)
    """Host records (``client_host``, ``server_host``) by (cause, whether the scenario injected it): the others are
    the machine's own pauses, which its watchdog saw."""

    @property
    def slow_starts(self) -> int:
        return self.slow_start_labels.total()

    def machine_own(self, cause: str) -> bool:
        """Whether every record of ``cause`` is the machine's own (a host's pause no scenario injected)."""
        return self.host_records[(cause, False)] > 0 and not self.host_records[(cause, True)]

    def machine_own_stalls(self) -> int:
        """Stalls whose truth is a host cause the machine alone made: how busy it was, not what was injected."""
        own = [cause for cause in (Cause.CLIENT_HOST, Cause.SERVER_HOST) if self.machine_own(cause)]
        return sum(n for (t, _), n in self.confusion.items() if t in own)

    def precision(self, cause: str) -> float | None:
        predicted = sum(n for (_, p), n in self.confusion.items() if p == cause)
        return self.confusion[(cause, cause)] / predicted if predicted else None

    def recall(self, cause: str) -> float | None:
        actual = sum(n for (t, _), n in self.confusion.items() if t == cause) + self.undetected[cause]
        return self.confusion[(cause, cause)] / actual if actual else None

    def f1(self, cause: str) -> float | None:
        p, r = self.precision(cause), self.recall(cause)
        return 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)

    def support(self, cause: str) -> int:
        return sum(n for (t, _), n in self.confusion.items() if t == cause) + self.undetected[cause]

    def blamed_on_injected(self) -> int:
        """Stalls that no ground truth explains but attribution blamed on a network or engine cause
        (``DELAY_CAUSES``): a clean fleet, however busy its hosts, blames 0 stalls on the network or an engine.
        A stall left ``unknown``, or put on the client's host or rendering, is no such blame."""
        return sum(n for (t, p), n in self.confusion.items() if t == "none" and p in DELAY_CAUSES)

    def falsely_blamed(self) -> int:
        """The strict count: stalls put on a network or engine cause (``DELAY_CAUSES``) whose truth is none or the
        client's own host. ``blamed_on_injected`` leaves out the host's, which a clean but busy fleet has many of."""
        return sum(n for (t, p), n in self.confusion.items() if t in ("none", HOST_CAUSE) and p in DELAY_CAUSES)


def _secondary_matches(named: str, cause: str) -> bool:
    return cause == named or (named == "network" and cause in PATH_HOLDS)


def _windows(by_trace: dict[str, list[Record]], causes: tuple[str, ...]) -> dict[str, list[tuple[int, int]]]:
    """Per trace, the windows of its records of ``causes``."""
    return {
        trace: [(r.start_us, r.end_us) for r in records if r.cause in causes] for trace, records in by_trace.items()
    }


def _reached_client(host_from_us: int, holds: list[tuple[int, int]]) -> int:
    """When content the path was holding as the client's host stopped running the reader reached the client: the
    host holds it from then on, not before (the host's pause held back nothing the path still had)."""
    for hold_start, hold_end in holds:
        if hold_start <= host_from_us < hold_end:
            return hold_end
    return host_from_us


class Record(NamedTuple):
    """One ground-truth record, as scoring reads it."""

    cause: str
    start_us: int
    end_us: int
    magnitude_s: float
    delayed_content: bool
    """Whether it delayed content after the first chunk."""
    first_held: int | None = None
    """The first server chunk it held, when it names the chunks it held."""
    first_token: bool = False
    """Whether it delayed the stream's first token (its magnitude the wait it made, from the request)."""
    from_arrivals: bool = False
    """Whether the chunks it names are those the client received in its window, not those the engine emitted late
    (an injector beside the clients cannot see the engine's emissions)."""

    def held_before(self, server_seq: int | None) -> bool:
        """Whether it held nothing up to server chunk ``server_seq``: every chunk it held came after it."""
        return self.first_held is not None and server_seq is not None and self.first_held > server_seq


def _held_most_on_the_path(record: Record, start_us: int, end_us: int) -> bool:
    """Whether ``record`` is the path's own account of what it held (a proxy's hold, naming the chunks) over most of
    the stall from ``start_us`` to ``end_us``. A record told from the client's arrivals yields to it: what the
    proxy held arrived late, as if the other had held it. One that held only the end of the stall (a flush after
    a long prefill) held the smaller part."""
    overlap = min(end_us, record.end_us) - max(start_us, record.start_us)
    return record.cause in PATH_HOLDS and record.first_held is not None and 2 * overlap >= end_us - start_us


def score(client: Client, since: datetime, stall: StallRule | None = None, slow_start_us: int = SLOW_START_US) -> Score:
    """How the stalls and slow starts attributed since ``since`` match the ground truth; an injected delay is one
    attribution had to find when ``stall`` (default: as configured) calls it a stall, or, of a first token, when it
    made a wait of ``slow_start_us`` (the attribution job's, by default)."""
    stall = stall or StallRule.configured()
    with store.translated_errors():
        stalls = client.query(STALLS_SQL, parameters={"since": since}).result_rows
        truths = client.query(TRUTH_SQL, parameters={"since": since}).result_rows
        host = client.query(HOST_TRUTH_SQL, parameters={"since": since, "cause": HOST_CAUSE}).result_rows
        answering = client.query(ANSWERING_SQL, parameters={"since": since}).result_rows if host else []
        serving = client.query(
            SERVER_HOST_TRUTH_SQL, parameters={"since": since, "cause": Cause.SERVER_HOST}
        ).result_rows
        served = client.query(SERVED_BY_SQL, parameters={"since": since}).result_rows if serving else []
        host_sources = client.query(HOST_SOURCES_SQL, parameters={"since": since}).result_rows
    served_by: dict[str, str] = {trace: node for trace, node in served}
    by_trace: dict[str, list[Record]] = {}
    for trace, cause, start, end, magnitude, delayed_content, first_held, own_pause, first_token, arrivals in truths:
        label = OWN_PAUSE if own_pause else cause
        record = Record(
            label, start, end, magnitude, bool(delayed_content), first_held, bool(first_token), bool(arrivals)
        )
        by_trace.setdefault(trace, []).append(record)
    host_records = [Record(cause, start, end, (end - start) / 1e6, False) for cause, start, end in host]
    host_candidates = [("", record) for record in host_records]  # candidates for every stall
    node_candidates: dict[str, list[tuple[str, Record]]] = {}  # candidates for the stalls of a node's streams
    for node, start, end in serving:
        node_candidates.setdefault(node, []).append((f"node {node}", Record(Cause.SERVER_HOST, start, end, 0, False)))
    holds, upstream = _windows(by_trace, PATH_HOLDS), _windows(by_trace, HOLDS)
    result = Score()
    result.host_records.update({(cause, bool(injected)): n for cause, injected, n in host_sources})
    result.injected.update(r.cause for records in by_trace.values() for r in records if r.cause != OWN_PAUSE)
    result.injected.update(r.cause for r in host_records)
    result.injected.update(record.cause for candidates in node_candidates.values() for _, record in candidates)
    hit: set[tuple[str, int, int]] = set()
    labelling: set[tuple[str, Record]] = set()
    for trace, seq, start, end, predicted, secondary, server_seq in stalls:
        best, labelled_by = "none", -1
        records = by_trace.get(trace, [])
        candidates = [(trace, r) for r in records] + host_candidates + node_candidates.get(served_by.get(trace, ""), [])
        fits: list[tuple[float, int]] = []  # (match, index) of the records that explain the stall
        for index, (key, record) in enumerate(candidates):
            cause, t_start, t_end = record.cause, record.start_us, record.end_us
            overlap = min(end, t_end) - max(start, t_start)
            if overlap < -MATCH_SLACK_US:
                continue
            hit.add((key, t_start, t_end))
            if not key:
                overlap = min(end, t_end) - max(start, _reached_client(t_start, upstream.get(trace, [])))
            elif key != trace:  # a serving process's hold: it held what its node had yet to send
                pass
            elif record.held_before(server_seq):
                continue
            if overlap >= EXPLAINING_SHARE * (end - start):
                fits.append((overlap / (max(end, t_end) - min(start, t_start) + 1), index))
        if fits:
            _, labelled_by = max(fits)
            told = [fit for fit in fits if _held_most_on_the_path(candidates[fit[1]][1], start, end)]
            if candidates[labelled_by][1].from_arrivals and told:
                _, labelled_by = max(told)  # the path's own record says what it held
            best = candidates[labelled_by][1].cause
        if seq is None:
            result.slow_start_labels[best] += 1
        if best == OWN_PAUSE:
            result.own_pauses[predicted] += 1
        else:
            result.confusion[(best, predicted)] += 1
        if labelled_by >= 0:
            labelling.add(candidates[labelled_by])
        if secondary:
            result.secondary_named += 1
            result.secondary_right += any(
                index != labelled_by
                and min(end, r.end_us) > max(start, r.start_us)
                and _secondary_matches(secondary, r.cause)
                for index, (_, r) in enumerate(candidates)
            )
    for trace, records in by_trace.items():
        for r in records:
            delayed = stall.over_threshold(r.magnitude_s * 1e6) if r.delayed_content else False
            delayed |= r.first_token and r.magnitude_s * 1e6 >= slow_start_us
            detectable = r.cause in DELAY_CAUSES and delayed
            masked = r.cause not in PATH_HOLDS and any(s <= r.start_us and r.end_us <= e for s, e in holds[trace])
            if detectable and not masked and (trace, r.start_us, r.end_us) not in hit:
                result.undetected[r.cause] += 1
    for r in host_records:
        mid_answer = any(first < r.start_us and r.end_us < last for first, last in answering)
        if stall.over_threshold(r.end_us - r.start_us) and mid_answer and ("", r.start_us, r.end_us) not in hit:
            result.undetected[r.cause] += 1
    result.made_a_stall.update(record.cause for _, record in labelling)
    return result
