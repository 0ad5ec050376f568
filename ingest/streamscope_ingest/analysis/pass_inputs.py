"""What one pass of the attribution job reads from the store, as typed inputs: the streams settled since the
watermark, the spans of their traces, their chunks, and their nodes' engine events (requests waiting for a slot
among them, from the agent's samples).

Every query of a pass lives here, and nothing of the verdicts (``analysis.verdicts``): the SQL can change with the
schema while the judging stays a pure function of these inputs, tested without a store.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from clickhouse_connect.driver.client import Client

from streamscope import semconv as sc
from streamscope_ingest.analysis.attribution import NodeEvent, Timeline
from streamscope_ingest.analysis.first_token import WAITING

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
Key = tuple[str, str, str]
"""A stream: its tenant, trace id and span id."""

UPSTREAM_SIDES = ("server", "gateway")
"""Where a stream's content is taken as emitted, best first: the server that made it, else the gateway that relayed
it (in front of an engine that records nothing itself, the gateway's reads are the engine's emissions, a loopback
away; its node, ``streamscope gateway --node``, is the engine's)."""

STREAMS_SQL = """
SELECT tenant, trace_id, span_id, service, side, if(response_model != '', response_model, request_model),
       resource_attributes['service.instance.id'], toUnixTimestamp64Micro(start_time), duration_us, input_tokens,
       ingested_at
FROM streams
WHERE ingested_at > {since:DateTime64(3)} AND ingested_at <= {until:DateTime64(3)}
ORDER BY ingested_at
LIMIT {limit:UInt32} WITH TIES
"""
"""At most ``limit`` streams, and every stream stored in the same instant as the last: the pass can end there."""
TRACES_SQL = f"""
SELECT tenant, trace_id, span_id, side, node_name, toUnixTimestamp64Micro(start_time), host_watch != '',
       if(server_address != '', concat(server_address, ':', toString(server_port)), ''),
       coverage IN ('full', 'arrivals'),
       toFloat64OrNull(attributes['{sc.GEN_AI_LATENCY_TIME_IN_QUEUE}']) AS queued_s
FROM streams WHERE trace_id IN {{traces:Array(String)}} AND tenant IN {{tenants:Array(String)}}
"""
"""The spans of the pass's traces: each stream is matched with those of its own tenant only, so a span another
tenant sent in the same trace (it knows the ids from a ``traceparent``) weighs nothing in its verdict. A server
span's time in queue is its engine's word, in seconds."""
CHUNKS_SQL = """
SELECT tenant, lower(hex(trace_id_bytes)), lower(hex(span_id_bytes)),
    arrayMap((gap, k, before) -> before + if(k IN ('lead', 'aside', 'retract'), gap, 0), gap_us, kind,
        arrayCumSum(arrayMap((gap, k) -> if(k IN ('first', 'content'), toUInt64(gap), 0), gap_us, kind))),
    content_bytes, tokens, arrayResize(paint_delay_us, length(gap_us)), arrayResize(host_delay_us, length(gap_us)),
    arrayResize(host_held_us, length(gap_us)), arrayResize(host_held_total_us, length(gap_us))
FROM chunk_arrays
WHERE start_time BETWEEN fromUnixTimestamp64Micro({first:Int64}) AND fromUnixTimestamp64Micro({last:Int64})
  AND trace_id_bytes IN (SELECT toFixedString(unhex(arrayJoin({traces:Array(String)})), 16))
  AND tenant IN {tenants:Array(String)}
"""
"""Each stream's chunk offsets as ``chunk_timeline`` computes them (a test holds the two together), from its row of
arrays: the view's window over one row per chunk costs three times as much. A stream's chunks are stored under its
start time, so the spans' first and last start bound what is read (the table's partitions and index). An array the
store keeps empty is zeros (migrations 0036 and 0038)."""
EVENTS_SQL = """
SELECT node_name, kind, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(ifNull(end_time, now64(6))),
       magnitude
FROM engine_events
WHERE node_name IN {nodes:Array(String)} AND start_time <= {high:DateTime64(6)}
  AND (end_time IS NULL OR end_time >= {low:DateTime64(6)})
"""
WAITING_SQL = """
SELECT node_name, toUnixTimestamp64Micro(time), value
FROM engine_samples
WHERE metric = 'requests_waiting' AND value > 0 AND node_name IN {nodes:Array(String)}
  AND time BETWEEN {low:DateTime64(6)} AND {high:DateTime64(6)}
ORDER BY node_name, time
"""
"""The agent's samples that saw requests waiting for a free slot (``first_token.WAITING``)."""
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
class SettledStream:
    """A stream the pass attributes, as ``STREAMS_SQL`` reads it."""

    tenant: str
    trace: str
    span: str
    service: str
    side: str
    model: str
    instance: str
    """The client process (``service.instance.id``) that read it, or empty."""
    start_us: int
    duration_us: int
    prompt_tokens: int | None = None
    """The prompt's tokens, as the stream's usage or request told them."""

    @property
    def key(self) -> Key:
        return (self.tenant, self.trace, self.span)


@dataclass(frozen=True)
class TraceSpan:
    """A span of one of the pass's traces (of the stream's own tenant): the other side of a stream, or itself."""

    span: str
    side: str
    node: str
    start_us: int
    queued_us: int | None = None
    """How long its engine says the request waited to be scheduled (None: not said, or not a time)."""


@dataclass(frozen=True)
class Chunks:
    """A stream's chunks: their offsets (as ``chunk_timeline`` computes them), content bytes, tokens, paint delays,
    and its host's delays, longest holds and holds summed (None unless its host was watched)."""

    offsets_us: np.ndarray
    content_bytes: np.ndarray
    tokens: np.ndarray
    paint_delay_us: np.ndarray
    host_delay_us: np.ndarray | None
    host_held_us: np.ndarray | None
    host_held_total_us: np.ndarray | None

    def timeline(self, start_us: int) -> Timeline:
        """The side these chunks make, started at ``start_us``."""
        return Timeline(
            start_us,
            self.offsets_us,
            self.content_bytes,
            self.paint_delay_us,
            host_delay_us=self.host_delay_us,
            host_held_us=self.host_held_us,
            host_held_total_us=self.host_held_total_us,
        )


@dataclass
class PassInputs:
    """Everything one pass judges."""

    streams: list[SettledStream]
    traces: dict[tuple[str, str], list[TraceSpan]] = field(default_factory=dict)
    """The spans of each stream's trace, by tenant and trace id."""
    endpoints: dict[Key, str] = field(default_factory=dict)
    """``server.address:port`` each span streamed from, or empty."""
    timed: set[Key] = field(default_factory=set)
    """Streams whose every arrival is known (coverage full or arrivals)."""
    chunks: dict[Key, Chunks] = field(default_factory=dict)
    events: dict[str, list[NodeEvent]] = field(default_factory=dict)
    """Engine events by node, around the pass's streams."""
    spec_nodes: dict[str, float | None] = field(default_factory=dict)
    """Nodes that ran speculative decoding, with their longest acceptance length when reported."""


def settled_streams(
    client: Client, since: datetime, until: datetime, limit: int
) -> tuple[list[SettledStream], datetime | None]:
    """At most ``limit`` streams stored after ``since`` up to ``until`` (and the ties of the last), oldest first, and
    when the last was stored (None: no stream)."""
    parameters = {"since": since, "until": until, "limit": limit}
    rows = client.query(STREAMS_SQL, parameters=parameters).result_rows
    return [SettledStream(*row[:-1]) for row in rows], (rows[-1][-1] if rows else None)


def read_inputs(client: Client, streams: list[SettledStream], event_slack_us: int) -> PassInputs:
    """The spans, chunks and node events ``streams`` are judged by (events ``event_slack_us`` either side)."""
    inputs = PassInputs(streams)
    traces = sorted({s.trace for s in streams})
    tenants = sorted({s.tenant for s in streams})
    watched: set[Key] = set()
    sides: dict[tuple[str, str], list[TraceSpan]] = defaultdict(list)
    for tenant, trace, span, side, node, start, host_watched, endpoint, every_arrival_known, queued_s in client.query(
        TRACES_SQL, parameters={"traces": traces, "tenants": tenants}
    ).result_rows:
        sides[(tenant, trace)].append(TraceSpan(span, side, node, start, _queued_us(queued_s)))
        inputs.endpoints[(tenant, trace, span)] = endpoint
        if every_arrival_known:
            inputs.timed.add((tenant, trace, span))
        if host_watched:
            watched.add((tenant, trace, span))
    inputs.traces = dict(sides)
    starts = [s.start_us for spans in sides.values() for s in spans]
    window_of_starts = {"first": min(starts, default=0), "last": max(starts, default=0)}
    timelines = client.query_arrow(CHUNKS_SQL, parameters={"traces": traces, "tenants": tenants, **window_of_starts})
    keys = zip(*(timelines.column(i).to_pylist() for i in (0, 1, 2)))
    per_chunk = (_rows(timelines.column(i)) for i in range(3, 10))
    for key, offsets, content, tokens, paint, *host in zip(keys, *per_chunk):
        watch = host if key in watched else (None, None, None)
        inputs.chunks[key] = Chunks(offsets, content, tokens, paint, *watch)
    nodes = sorted({s.node for spans in sides.values() for s in spans if s.side in UPSTREAM_SIDES and s.node})
    if nodes:
        low = min(s.start_us for s in streams) - event_slack_us
        high = max(s.start_us + s.duration_us for s in streams) + event_slack_us
        window = {"nodes": nodes, "low": _time(low), "high": _time(high)}
        events: dict[str, list[NodeEvent]] = defaultdict(list)
        for node, kind, start, end, magnitude in client.query(EVENTS_SQL, parameters=window).result_rows:
            events[node].append(NodeEvent(kind, start, end, magnitude))
        waiting = client.query(WAITING_SQL, parameters=window).result_rows
        for node, runs in _runs(waiting, event_slack_us).items():
            events[node].extend(runs)
        inputs.events = dict(events)
        inputs.spec_nodes = {
            node: length if reported else None
            for node, length, reported in client.query(SPEC_SQL, parameters=window).result_rows
        }
    return inputs


def _runs(samples: Sequence[Sequence[Any]], apart_us: int) -> dict[str, list[NodeEvent]]:
    """Per node, the stretches in which its samples saw requests waiting (samples of one node, in order; those at
    most ``apart_us`` apart are one stretch), each with the most seen waiting."""
    runs: dict[str, list[NodeEvent]] = defaultdict(list)
    for node, at, waiting in samples:
        stretches = runs[node]
        if stretches and at - stretches[-1].end_us <= apart_us:
            last = stretches[-1]
            stretches[-1] = NodeEvent(WAITING, last.start_us, at, max(last.magnitude or 0.0, waiting))
        else:
            stretches.append(NodeEvent(WAITING, at, at, waiting))
    return runs


def _rows(column: pa.ChunkedArray) -> list[np.ndarray]:
    """Each row of a column of integer lists as an int64 array: one conversion for the column, then views."""
    lists = column.combine_chunks()
    values = pc.list_flatten(lists).to_numpy(zero_copy_only=False).astype(np.int64)
    bounds = np.cumsum(pc.list_value_length(lists).to_numpy(zero_copy_only=False))
    return np.split(values, bounds[:-1])


def _time(microseconds: int) -> datetime:
    return EPOCH + timedelta(microseconds=microseconds)


def _queued_us(seconds: float | None) -> int | None:
    """A time in queue in µs; None for one that is no time (negative, not finite): unknown, not a wrong wait."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return round(seconds * 1e6)
