"""What one pass of the attribution job concludes from what it read (``analysis.pass_inputs``): each stream's stalls
and their causes, its quality indices, and what smoothing buffers would have made of it, as the rows of ``stalls``,
``stream_quality`` and ``stream_smoothing``. A pure function: no store, no clock.

A stream's stalls are attributed from its own two sides and its node's engine events, and checked against the other
client streams of the same pass that share its client process (service instance), the endpoint it streamed from or
its serving node: a host or a gateway that paused, or a node that was slow for everyone, held them all at once
(``attribution.SharedHost``). Streams stored in another pass are not consulted, so near a pass boundary such a pause
has fewer witnesses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_ingest.analysis.attribution import Arrivals, SharedHost, Stall, StallRules, Timeline, attribute
from streamscope_ingest.analysis.first_token import FirstTokenRules, SlowStart, attribute_start
from streamscope_ingest.analysis.pass_inputs import UPSTREAM_SIDES, Key, PassInputs, SettledStream, TraceSpan
from streamscope_ingest.analysis.quality import andes_qoe, fluidity_index
from streamscope_ingest.analysis.smoothing import Buffer, Smoothed, Targets, smooth_each

Row = dict[str, Any]
TIMED = "timed"
"""A smoothing row's mark: its stream's every arrival is known, so ``smoothing_histograms`` counts it (as
``smoothing_trade`` reads only those)."""


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


@dataclass
class Verdicts:
    """A pass's rows, one list per table."""

    stalls: list[Row] = field(default_factory=list)
    slow_starts: list[Row] = field(default_factory=list)
    quality: list[Row] = field(default_factory=list)
    smoothing: list[Row] = field(default_factory=list)


@dataclass(frozen=True)
class _Sides:
    """A stream's side as its reader saw it, its upstream's side when known (``UPSTREAM_SIDES``), and the upstream's
    node."""

    client: Timeline
    server: Timeline | None
    node: str
    relay: Timeline | None = None
    """A gateway's side between the server and the client, when both were recorded."""
    queued_us: int | None = None
    """The upstream's own time in queue, when its engine said it."""


def judge(inputs: PassInputs, rules: StallRules, buffers: Sequence[Buffer], quality: QualityTargets) -> Verdicts:
    """Every stream of the pass judged: its stalls and a slow start attributed, its quality and smoothing
    measured."""
    sides = {s.key: found for s in inputs.streams if (found := _sides(s, inputs)) is not None}
    peers = _Peers(inputs.streams, sides, inputs.endpoints)
    targets = quality.in_us()
    first_token = FirstTokenRules(slow_start_us=round(quality.first_deadline_ms * 1000))
    settings = {
        "first_deadline_ms": quality.first_deadline_ms,
        "token_deadline_ms": quality.token_deadline_ms,
        "reading_tokens_per_s": quality.reading_tokens_per_s,
    }
    verdicts = Verdicts()
    for stream in inputs.streams:
        if (both := sides.get(stream.key)) is None:
            continue
        stalls = attribute(
            both.client,
            both.server,
            inputs.events.get(both.node, []),
            spec_active=both.node in inputs.spec_nodes,
            rules=rules,
            spec_accept_length=inputs.spec_nodes.get(both.node),
            shared_hosts=partial(peers.of, stream.key),
            relay=both.relay,
        )
        identity = {
            "tenant": stream.tenant,
            "trace_id": stream.trace,
            "span_id": stream.span,
            "service": stream.service,
            "side": stream.side,
            "model": stream.model,
            "node_name": both.node,
        }
        verdicts.stalls.extend(_row(stall, identity) for stall in stalls)
        if stream.side in ("client", "browser") and (
            start := attribute_start(
                both.client,
                both.server,
                inputs.events.get(both.node, []),
                prompt_tokens=stream.prompt_tokens,
                queued_us=both.queued_us,
                path_buffered=any(stall.cause == Cause.NETWORK_BUFFERING for stall in stalls),
                rules=first_token,
            )
        ):
            verdicts.slow_starts.append(_start_row(start, identity))
        tokens = inputs.chunks[stream.key].tokens
        (fluidity, andes), smoothed = measured(both.client, tokens, buffers, rules, targets)
        at = {**identity, "start_time": both.client.start_us}
        verdicts.quality.append(
            {**at, "stalls": len(stalls), "fluidity_index": fluidity, "andes_qoe": andes, **settings}
        )
        verdicts.smoothing.extend({**at, **vars(s), TIMED: stream.key in inputs.timed} for s in smoothed)
    return verdicts


def _sides(stream: SettledStream, inputs: PassInputs) -> _Sides | None:
    """The sides ``stream`` is judged by; None for a stream judged through another (a server span with a client)
    or without chunks."""
    in_trace = inputs.traces.get((stream.tenant, stream.trace), [])
    if stream.side == "server" and any(s.side in ("client", "browser") for s in in_trace):
        return None  # a server span is attributed through its client's stream
    if stream.side not in ("client", "browser", "server") or stream.key not in inputs.chunks:
        return None
    client = inputs.chunks[stream.key].timeline(stream.start_us)
    recorded: dict[str, tuple[TraceSpan, Timeline]] = {}
    for span in in_trace:
        chunks = inputs.chunks.get((stream.tenant, stream.trace, span.span))
        if span.side in UPSTREAM_SIDES and chunks is not None:
            recorded.setdefault(span.side, (span, chunks.timeline(span.start_us)))
    upstream = next((recorded[side] for side in UPSTREAM_SIDES if side in recorded), None)
    if upstream is None:
        return _Sides(client, None, "")
    relay = recorded["gateway"][1] if "server" in recorded and "gateway" in recorded else None
    return _Sides(client, upstream[1], upstream[0].node, relay, upstream[0].queued_us)


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


class _Peers:
    """Client streams of one tenant grouped by the client process (service instance), the endpoint they streamed
    from (``server.address:port``: a gateway or load balancer in front of the engines) and the serving node they
    share: a pause of any of these holds all of its streams at once."""

    def __init__(self, streams: list[SettledStream], sides: dict[Key, _Sides], endpoints: dict[Key, str]) -> None:
        self._sides = sides
        self._groups: dict[tuple[str, str, str], list[Key]] = defaultdict(list)
        self._member_of: dict[Key, list[tuple[str, str, str]]] = defaultdict(list)
        self._arrivals: dict[Key, Arrivals | None] = {}
        for stream in streams:
            key = stream.key
            if stream.side not in ("client", "browser") or key not in sides:
                continue
            for group in (
                (stream.tenant, "client process", stream.instance),
                (stream.tenant, "endpoint", endpoints.get(key, "")),
                (stream.tenant, "node", sides[key].node),
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
            sides = self._sides[key]
            client, server = sides.client, sides.server
            usable = server is not None and server.content()[0].size > 0 and client.content()[0].size > 0
            self._arrivals[key] = Arrivals.of(client, server) if server is not None and usable else None
        return self._arrivals[key]


def _start_row(start: SlowStart, identity: dict[str, str]) -> Row:
    return {
        **identity,
        "start_time": start.start_us,
        "end_time": start.end_us,
        "ttft_us": min(start.ttft_us, 2**32 - 1),
        "upstream_us": start.upstream_us,
        "path_us": start.path_us,
        "host_us": start.host_us,
        "cause": start.cause,
        "confidence": start.confidence,
        "evidence": list(start.evidence.items()),
    }


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
