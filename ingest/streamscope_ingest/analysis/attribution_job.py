"""The attribution job: attribute the stalls of streams that have settled and write them to ``stalls``, their
quality indices to ``stream_quality``, and what smoothing buffers would have made of them to ``stream_smoothing``
(counted, for the fleet panel, in ``smoothing_histograms``).

Why a periodic job rather than materialized views: a stall's cause needs both sides of the stream and the
node's engine events, which arrive in separate requests, seconds apart; a view fires on one insert into one
table. The job waits until a stream has settled (``settle_s`` after it was stored), attributes every stream
stored since its watermark in passes of a few queries, and advances the watermark it keeps in
``attribution_progress`` after each pass, so a restart neither skips nor repeats streams. A pass that finds no
stream writes nothing: an idle store is not given parts to merge every few seconds. A pass holds at most
``pass_streams`` streams (and their chunks) in memory, however far behind the job is after an outage.

A pass writes four tables and then its progress, and the store can fail between any two. So a pass records where
it ends before it writes (``BEGUN``), and each of its inserts carries a deduplication token named by the pass and
the table: the next attempt, here or in another collector, repeats exactly that pass, and what the failed one
stored is not counted again, even when more streams have settled meanwhile.

A stream's stalls are attributed from its own two sides and its node's events, and checked against the other
client streams of the same pass that share its client process (service instance), the endpoint it streamed from
or its serving node: a host or a gateway that paused, or a node that was slow for everyone, held them all at once
(``attribution.SharedHost``). Streams
stored in another pass are not consulted, so near a pass boundary such a pause has fewer witnesses.

Several collectors over one store run one job between them: the job holds a lease (``store.lease``) and passes
only while it does, so each stream is attributed once, and another collector takes over when the holder stops.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.client import Client

from streamscope.threads import named_thread
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution import (
    Arrivals,
    NodeEvent,
    SharedHost,
    Stall,
    StallRules,
    Timeline,
    attribute,
)
from streamscope_ingest.analysis.quality import andes_qoe, fluidity_index
from streamscope_ingest.analysis.smoothing import DEPTHS_MS, Buffer, Smoothed, Targets, smooth_each
from streamscope_ingest.decode import columns
from streamscope_ingest.decode.stream_histograms import smoothing_histograms
from streamscope_ingest.store.arrow_insert import insert_arrow
from streamscope_ingest.store.lease import Lease

log = logging.getLogger(__name__)
Row = dict[str, Any]
Key = tuple[str, str, str]
"""A stream: its tenant, trace id and span id."""
JOB = "stalls"
THREAD = "attribution"
BEGUN = f"{JOB}, begun"
"""The ``attribution_progress`` job under which a pass records where it ends, before it writes anything."""
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
TIMED = "timed"
"""A smoothing row's mark: its stream's every arrival is known, so ``smoothing_histograms`` counts it (as
``smoothing_trade`` reads only those)."""

STREAMS_SQL = """
SELECT tenant, trace_id, span_id, service, side, if(response_model != '', response_model, request_model),
       resource_attributes['service.instance.id'], toUnixTimestamp64Micro(start_time), duration_us, ingested_at
FROM streams
WHERE ingested_at > {since:DateTime64(3)} AND ingested_at <= {until:DateTime64(3)}
ORDER BY ingested_at
LIMIT {limit:UInt32} WITH TIES
"""
"""At most ``limit`` streams, and every stream stored in the same instant as the last: the pass can end there."""
TRACES_SQL = """
SELECT tenant, trace_id, span_id, side, node_name, toUnixTimestamp64Micro(start_time), host_watch != '',
       if(server_address != '', concat(server_address, ':', toString(server_port)), ''),
       coverage IN ('full', 'arrivals')
FROM streams WHERE trace_id IN {traces:Array(String)} AND tenant IN {tenants:Array(String)}
"""
"""The spans of the pass's traces: each stream is matched with those of its own tenant only, so a span another
tenant sent in the same trace (it knows the ids from a ``traceparent``) weighs nothing in its verdict."""
CHUNKS_SQL = """
SELECT tenant, lower(hex(trace_id_bytes)), lower(hex(span_id_bytes)),
    arrayMap((gap, k, before) -> before + if(k IN ('lead', 'aside', 'retract'), gap, 0), gap_us, kind,
        arrayCumSum(arrayMap((gap, k) -> if(k IN ('first', 'content'), toUInt64(gap), 0), gap_us, kind))),
    content_bytes, tokens, arrayResize(paint_delay_us, length(gap_us)), arrayResize(host_delay_us, length(gap_us)),
    arrayResize(host_held_us, length(gap_us))
FROM chunk_arrays
WHERE start_time BETWEEN fromUnixTimestamp64Micro({first:Int64}) AND fromUnixTimestamp64Micro({last:Int64})
  AND trace_id_bytes IN (SELECT toFixedString(unhex(arrayJoin({traces:Array(String)})), 16))
  AND tenant IN {tenants:Array(String)}
"""
"""Each stream's chunk offsets as ``chunk_timeline`` computes them (a test holds the two together), from its row of
arrays: the view's window over one row per chunk costs three times as much. A stream's chunks are stored under its
start time, so the spans' first and last start bound what is read (the table's partitions and index). An array the
store keeps empty is zeros (migration 0036)."""
EVENTS_SQL = """
SELECT node_name, kind, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(ifNull(end_time, now64(6)))
FROM engine_events
WHERE node_name IN {nodes:Array(String)} AND start_time <= {high:DateTime64(6)}
  AND (end_time IS NULL OR end_time >= {low:DateTime64(6)})
"""
SPEC_SQL = """
SELECT node_name, maxIf(value, metric = 'spec_accept_length'), countIf(metric = 'spec_accept_length')
FROM engine_samples
WHERE metric IN ('spec_draft_tokens', 'spec_accept_length') AND node_name IN {nodes:Array(String)}
  AND time BETWEEN {low:DateTime64(6)} AND {high:DateTime64(6)}
GROUP BY node_name
HAVING maxIf(value, metric = 'spec_draft_tokens') > 0 OR maxIf(value, metric = 'spec_accept_length') > 0
"""
"""Nodes that ran speculative decoding, with their longest acceptance length (the most a collapse can slow them;
agents that do not report it give no bound). vLLM counts draft tokens; SGLang reports only its acceptance length,
0 when it does not speculate."""


@dataclass(frozen=True)
class QualityTargets:
    """What a reader expects, for the quality indices: deadlines for fluidity, a pace for Andes' QoE."""

    first_deadline_ms: float = 1000.0
    token_deadline_ms: float = 100.0
    expected_ttft_ms: float = 1000.0
    reading_tokens_per_s: float = 8.0

    def in_us(self) -> Targets:
        return Targets(
            self.first_deadline_ms * 1000,
            self.token_deadline_ms * 1000,
            self.expected_ttft_ms * 1000,
            self.reading_tokens_per_s,
        )


class AttributionJob:
    def __init__(
        self,
        client: Client,
        rules: StallRules | None = None,
        *,
        settle_s: float = 10.0,
        quality: QualityTargets | None = None,
        pass_streams: int = 5000,
        insert_client: Client | None = None,
        smoothing_depths_ms: Sequence[float] = DEPTHS_MS,
        lease: Lease | None = None,
    ) -> None:
        """``client`` reads; ``insert_client`` (default: ``client``) writes stalls, quality and progress. Every
        stream is replayed behind a smoothing buffer of each of ``smoothing_depths_ms``. With a ``lease``, a pass
        runs only while this job holds it: of several jobs over one store, one attributes each stream."""
        self._client = client
        self._insert_client = insert_client or client
        self.lease = lease
        self.rules = rules or StallRules()
        self.settle_s = settle_s
        self.quality = quality or QualityTargets()
        self.pass_streams = pass_streams
        self.buffers = tuple(Buffer(depth) for depth in smoothing_depths_ms)

    def watermark(self) -> datetime:
        """Where the last finished pass ended."""
        return self._progress()[JOB]

    def _progress(self) -> dict[str, datetime]:
        """Where the last finished pass ended (``JOB``) and where the last one begun would end (``BEGUN``)."""
        rows = self._client.query(
            "SELECT job, max(through) FROM attribution_progress FINAL WHERE job IN {jobs:Array(String)} GROUP BY job",
            parameters={"jobs": [JOB, BEGUN]},
        ).result_rows
        found = {job: _utc(through) for job, through in rows if through and through.year > 1970}
        return {job: found.get(job, EPOCH) for job in (JOB, BEGUN)}

    def run_once(self, until: datetime | None = None) -> int:
        """Attribute every stream stored after the watermark and at least ``settle_s`` ago; returns stalls written."""
        until = until or datetime.now(UTC) - timedelta(seconds=self.settle_s)
        written = 0
        while True:
            stalls, caught_up = self.run_pass(until)
            written += stalls
            if caught_up:
                return written

    def run_pass(self, until: datetime | None = None) -> tuple[int, bool]:
        """One bounded pass from the watermark towards ``until``; returns stalls written and whether it got there."""
        with store.translated_errors():
            if self.lease is not None and not self.lease.held():
                return 0, True  # another job runs it
            progress = self._progress()
            since, unfinished = progress[JOB], progress[BEGUN]
            settled = datetime.now(UTC) - timedelta(seconds=self.settle_s)  # a later bound could change a repeat
            until = _as_stored(unfinished if unfinished > since else min(until or settled, settled))
            if until <= since:
                return 0, True
            parameters = {"since": since, "until": until, "limit": self.pass_streams}
            rows = self._client.query(STREAMS_SQL, parameters=parameters).result_rows
            if not rows and unfinished <= since:
                return 0, True  # nothing to write, nor to record: the next pass starts where this one did
            full = len(rows) >= self.pass_streams  # more with the last one's ties
            caught_up = not full and unfinished <= since  # after a repeat, go on from there
            if full:
                until = _utc(rows[-1][-1])  # ordered by ingested_at, ties included: the pass ends on a whole instant
            if unfinished <= since:
                self._record(BEGUN, until)
            streams = [tuple(row[:-1]) for row in rows]
            stalls, quality, smoothing = self._attribute(streams) if streams else ([], [], [])
            if self.lease is not None and not self.lease.still_held():
                log.warning("the attribution lease went to another collector during a pass; it writes nothing")
                return 0, True
            insert = partial(self._insert_once, pass_name=_pass_name(since, until, streams))
            if stalls:
                insert("stalls", pa.Table.from_pylist(stalls, schema=columns.STALLS))
            if quality:
                insert("stream_quality", pa.Table.from_pylist(quality, schema=columns.STREAM_QUALITY))
            if smoothing:
                smoothed = pa.Table.from_pylist(smoothing, schema=columns.STREAM_SMOOTHING)
                insert("stream_smoothing", smoothed)
                counted = smoothed.filter(pa.array([row[TIMED] for row in smoothing]))
                if counted.num_rows:
                    insert("smoothing_histograms", smoothing_histograms(counted))
            self._record(JOB, until)
            return len(stalls), caught_up

    def _record(self, job: str, through: datetime) -> None:
        """``job`` has reached ``through`` (``_progress`` reads it back)."""
        self._insert_client.insert("attribution_progress", [[job, through]], column_names=["job", "through"])

    def _insert_once(self, table: str, block: pa.Table, pass_name: str) -> None:
        """Insert ``block``, taken once however often the pass named ``pass_name`` is repeated."""
        insert_arrow(self._insert_client, table, block, {"insert_deduplication_token": f"{pass_name} {table}"})

    def _attribute(self, streams: list[tuple[Any, ...]]) -> tuple[list[Row], list[Row], list[Row]]:
        traces = sorted({row[1] for row in streams})
        tenants = sorted({row[0] for row in streams})
        sides: dict[tuple[str, str], list[tuple[str, str, str, int]]] = defaultdict(list)
        watched: set[Key] = set()
        endpoints: dict[Key, str] = {}
        timed: set[Key] = set()
        spans = self._client.query(TRACES_SQL, parameters={"traces": traces, "tenants": tenants}).result_rows
        for tenant, trace, span, side, node, start, host_watched, endpoint, every_arrival_known in spans:
            sides[(tenant, trace)].append((span, side, node, start))
            endpoints[(tenant, trace, span)] = endpoint
            if every_arrival_known:
                timed.add((tenant, trace, span))
            if host_watched:
                watched.add((tenant, trace, span))
        chunks: dict[Key, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]] = {}
        tokens: dict[Key, np.ndarray] = {}
        starts = [start for spans_of_trace in sides.values() for *_, start in spans_of_trace]
        window_of_starts = {"first": min(starts, default=0), "last": max(starts, default=0)}
        timelines = self._client.query_arrow(
            CHUNKS_SQL, parameters={"traces": traces, "tenants": tenants, **window_of_starts}
        )
        ids = zip(*(timelines.column(i).to_pylist() for i in (0, 1, 2)))
        per_chunk = (_rows(timelines.column(i)) for i in range(3, 9))
        for key, offsets, content, counts, paint, host, held in zip(ids, *per_chunk):
            chunks[key] = (offsets, content, paint, *((host, held) if key in watched else (None, None)))
            tokens[key] = counts
        nodes = sorted({node for spans in sides.values() for _, side, node, _ in spans if side == "server" and node})
        low = min(row[7] for row in streams) - self.rules.event_slack_us
        high = max(row[7] + row[8] for row in streams) + self.rules.event_slack_us
        window = {"nodes": nodes, "low": _time(low), "high": _time(high)}
        events: dict[str, list[NodeEvent]] = defaultdict(list)
        spec_nodes: dict[str, float | None] = {}
        if nodes:
            for node, kind, start, end in self._client.query(EVENTS_SQL, parameters=window).result_rows:
                events[node].append(NodeEvent(kind, start, end))
            spec_nodes = {
                node: length if reported else None
                for node, length, reported in self._client.query(SPEC_SQL, parameters=window).result_rows
            }

        sides_of: dict[Key, tuple[Timeline, Timeline | None, str]] = {}
        for tenant, trace, span, _service, side, _model, _instance, start, _duration in streams:
            in_trace = sides[(tenant, trace)]
            server = next(((s, n, t) for s, sd, n, t in in_trace if sd == "server"), None)
            if side == "server" and any(sd in ("client", "browser") for _, sd, _, _ in in_trace):
                continue  # a server span is attributed through its client's stream
            key = (tenant, trace, span)
            if side not in ("client", "browser", "server") or key not in chunks:
                continue
            server_timeline, node = None, ""
            if server is not None and (tenant, trace, server[0]) in chunks:
                server_timeline = Timeline(server[2], *chunks[(tenant, trace, server[0])])
                node = server[1]
            sides_of[key] = (Timeline(start, *chunks[key]), server_timeline, node)
        peers = _Peers(streams, sides_of, endpoints)

        rows: list[Row] = []
        quality: list[Row] = []
        smoothing: list[Row] = []
        targets = self.quality.in_us()
        settings = {
            "first_deadline_ms": self.quality.first_deadline_ms,
            "token_deadline_ms": self.quality.token_deadline_ms,
            "reading_tokens_per_s": self.quality.reading_tokens_per_s,
        }
        for tenant, trace, span, service, side, model, _instance, _start, _duration in streams:
            key = (tenant, trace, span)
            if key not in sides_of:
                continue
            client, server_timeline, node = sides_of[key]
            stalls = attribute(
                client,
                server_timeline,
                events.get(node, []),
                spec_active=node in spec_nodes,
                rules=self.rules,
                spec_accept_length=spec_nodes.get(node),
                shared_hosts=partial(peers.of, key),
            )
            identity = {
                "tenant": tenant,
                "trace_id": trace,
                "span_id": span,
                "service": service,
                "side": side,
                "model": model,
                "node_name": node,
            }
            rows.extend(_row(stall, identity) for stall in stalls)
            (fluidity, andes), smoothed = measured(client, tokens[key], self.buffers, self.rules, targets)
            at = {**identity, "start_time": client.start_us}
            quality.append({**at, "stalls": len(stalls), "fluidity_index": fluidity, "andes_qoe": andes, **settings})
            smoothing.extend({**at, **vars(s), TIMED: key in timed} for s in smoothed)
        return rows, quality, smoothing


def measured(
    timeline: Timeline, counts: np.ndarray, buffers: Sequence[Buffer], rules: StallRules, targets: Targets
) -> tuple[tuple[float | None, float | None], list[Smoothed]]:
    """A stream's quality indices (fluidity, Andes QoE) over its arrivals, and what each smoothing buffer would
    have made of it. Where its reader saw each chunk as it arrived (no later paint) and every chunk that carried
    tokens carried content, the indices are the smoothing's "before" figures, already measured."""
    smoothed = smooth_each(timeline, counts, buffers, rules, targets)
    if smoothed and _seen_as_arrived(timeline, counts):
        return (smoothed[0].fluidity_before, smoothed[0].andes_before), smoothed
    offsets = timeline.offsets_us
    return (
        fluidity_index(offsets, counts, targets.first_deadline_us, targets.token_deadline_us),
        andes_qoe(offsets, counts, targets.expected_ttft_us, targets.reading_tokens_per_s),
    ), smoothed


def _seen_as_arrived(timeline: Timeline, counts: np.ndarray) -> bool:
    """Whether the reader saw each content chunk as it arrived, and every chunk with tokens brought content: then
    its arrivals and what it saw are one timeline, for the quality indices."""
    _, arrived, shown = timeline.shown()
    return np.array_equal(arrived, shown) and not np.any(counts[timeline.content_bytes <= 0] > 0)


def _rows(column: pa.ChunkedArray) -> list[np.ndarray]:
    """Each row of a column of integer lists as an int64 array: one conversion for the column, then views."""
    lists = column.combine_chunks()
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    bounds = np.cumsum(pc.list_value_length(lists).to_numpy(zero_copy_only=False))
    return np.split(values, bounds[:-1])


class _Peers:
    """Client streams of one tenant grouped by the client process (service instance), the endpoint they streamed
    from (``server.address:port``: a gateway or load balancer in front of the engines) and the serving node they
    share: a pause of any of these holds all of its streams at once."""

    def __init__(
        self,
        streams: list[tuple[Any, ...]],
        sides_of: dict[Key, tuple[Timeline, Timeline | None, str]],
        endpoints: dict[Key, str],
    ) -> None:
        self._sides_of = sides_of
        self._groups: dict[tuple[str, str, str], list[Key]] = defaultdict(list)
        self._member_of: dict[Key, list[tuple[str, str, str]]] = defaultdict(list)
        self._arrivals: dict[Key, Arrivals | None] = {}
        for tenant, trace, span, _service, side, _model, instance, _start, _duration in streams:
            key = (tenant, trace, span)
            if side not in ("client", "browser") or key not in sides_of:
                continue
            for group in (
                (tenant, "client process", instance),
                (tenant, "endpoint", endpoints.get(key, "")),
                (tenant, "node", sides_of[key][2]),
            ):
                if group[2]:
                    self._groups[group].append(key)
                    self._member_of[key].append(group)

    def of(self, key: Key) -> list[SharedHost]:
        """The hosts ``key`` shares, with their other streams' arrivals (each computed once, when first needed)."""
        hosts = []
        for group in self._member_of[key]:
            others = (self._arrivals_of(other) for other in self._groups[group] if other != key)
            hosts.append(SharedHost(group[1], group[2], [arrivals for arrivals in others if arrivals is not None]))
        return hosts

    def _arrivals_of(self, key: Key) -> Arrivals | None:
        if key not in self._arrivals:
            client, server, _ = self._sides_of[key]
            usable = server is not None and server.content()[0].size > 0 and client.content()[0].size > 0
            self._arrivals[key] = Arrivals.of(client, server) if server is not None and usable else None
        return self._arrivals[key]


def _row(stall: Stall, identity: dict[str, str]) -> Row:
    return {
        **identity,
        "start_time": stall.start_us,
        "end_time": stall.end_us,
        "seq": stall.seq,
        "gap_us": min(stall.gap_us, 2**32 - 1),
        "server_gap_us": stall.server_gap_us,
        "server_seq": stall.server_seq,
        "cause": stall.cause,
        "confidence": stall.confidence,
        "evidence": list(stall.evidence.items()),
    }


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _pass_name(since: datetime, until: datetime, streams: list[tuple[Any, ...]]) -> str:
    """A pass by its bounds and its streams: a repeat that finds a stream more (stored late, inside the bounds)
    is another pass, whose rows are all written, rather than one whose rows are dropped as a repeat."""
    keys = hashlib.blake2b("\n".join(" ".join(row[:3]) for row in streams).encode(), digest_size=8).hexdigest()
    return f"{JOB} {since.isoformat()} {until.isoformat()} {keys}"


def _as_stored(value: datetime) -> datetime:
    """``value`` to the millisecond, as ``attribution_progress`` keeps it and the pass's queries read it."""
    return value.replace(microsecond=value.microsecond // 1000 * 1000)


def _time(microseconds: int) -> datetime:
    return EPOCH + timedelta(microseconds=microseconds)


class PeriodicAttribution:
    """Runs the job every ``interval_s`` from a background thread inside the collector."""

    def __init__(self, job: AttributionJob, interval_s: float = 5.0) -> None:
        self.job = job
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = named_thread(self._run, THREAD)

    def start(self) -> PeriodicAttribution:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
        if self.job.lease is not None:
            try:
                self.job.lease.release()  # another collector takes the job over at once
            except Exception:
                log.exception("could not release the attribution lease; another collector takes it when it expires")

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                while not self._stop.is_set() and not self.job.run_pass()[1]:
                    pass  # behind: the next pass starts at once
            except Exception:
                log.exception("attribution run failed; it is retried on the next tick")
