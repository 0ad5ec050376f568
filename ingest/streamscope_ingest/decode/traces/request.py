"""A request's spans walked through the steps: which are stream spans, each read and checked alone (a bad one is
rejected with its reason, the rest kept), then the timelines of all decoded together."""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

import numpy as np
from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch, Rejection, ignored_kind
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.decode import sources
from streamscope_ingest.decode.attributes import AttributeRejected, attribute_map, plain, span_attributes
from streamscope_ingest.decode.chunk_events import as_trace_view
from streamscope_ingest.decode.int_arrays import PackedArray, element_count
from streamscope_ingest.decode.limits import DEFAULT_LIMITS, SpanLimits, SpanOverLimit
from streamscope_ingest.decode.sources.foreign import COVERAGE_ARRIVALS_PARTIAL
from streamscope_ingest.decode.traces.blocks import column_blocks
from streamscope_ingest.decode.traces.rows import (
    SpanRejected,
    Stream,
    bounded_int,
    check_ids_and_times,
    chunk_seq,
    dropped_events,
    json_progress,
    may_be_too_long,
    offset_attribute,
    span_subject,
    stream_row,
    stringified,
)
from streamscope_ingest.decode.traces.timelines import (
    event_arrays,
    unreadable_events,
    with_required_arrays,
    with_timelines,
)

log = logging.getLogger(__name__)

READER_STOPPED = frozenset({"GeneratorExit", "CancelledError", "asyncio.CancelledError"})
"""``error.type`` values another instrumentation gives a stream the app stopped reading (Python's exit of a closed
generator, a cancelled task), which is a cancellation, not a failed call."""

DEFAULT_RULE = StallRule()


def decode_traces(
    request: Message, *, tenant: str, stall: StallRule = DEFAULT_RULE, limits: SpanLimits = DEFAULT_LIMITS
) -> DecodedBatch:
    """Decode every stream span in ``request`` (an ``ExportTraceServiceRequest``, or its view as the collector
    parses it: ``streamscope_ingest.decode.chunk_events``) for ``tenant``, its stalls counted by ``stall``; raises
    LimitExceeded past ``limits``' span count."""
    request = as_trace_view(request)
    limits.check_span_count(sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans))
    accepted: list[Stream] = []
    rejected: list[Rejection] = []
    warnings: list[str] = []
    ignored: Counter[str] = Counter()
    seen: set[tuple[bytes, bytes]] = set()
    for resource_spans in request.resource_spans:
        resource_strings = stringified(attribute_map(resource_spans.resource.attributes))
        if warning := limits.truncate("resource", resource_strings):
            warnings.append(warning)
        service = resource_strings.get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                try:
                    scalars, packed = span_attributes(span.attributes)
                except AttributeRejected as exc:
                    rejected.append(Rejection(span_subject(span), str(exc)))
                    continue
                foreign = None
                if sc.STREAMSCOPE_SIDE not in scalars:
                    if scope.startswith(sources.SCOPES):
                        every = scalars | {key: _plain_packed(value) for key, value in packed.items()}
                        foreign = sources.read_foreign(scope, span, every)
                    if foreign is None:
                        ignored[ignored_kind("span(s) of scope", scope)] += 1
                        continue
                try:
                    limits.check_span(len(span.attributes), len(span.events))
                    if (span.trace_id, span.span_id) in seen:
                        raise SpanRejected("the same span twice in one request")
                    seen.add((span.trace_id, span.span_id))
                    if foreign is None:
                        stream = _decode_span(span, scalars, packed, tenant, service, resource_strings)
                    else:
                        stream = _decode_foreign(span, foreign, tenant, service, resource_strings)
                    limits.check_chunks(stream.chunk_count)
                    if may_be_too_long(stream.row, limits) and (
                        warning := limits.truncate(stream.subject, stream.row, stream.row["attributes"])
                    ):
                        warnings.append(warning)
                    accepted.append(stream)
                    warnings += [f"{stream.subject}: {note}" for note in stream.notes]
                except (SpanRejected, SpanOverLimit) as exc:
                    rejected.append(Rejection(span_subject(span), str(exc)))
                except Exception as exc:  # a decoder bug must cost one span, never the request
                    log.exception("unexpected error decoding a stream span")
                    rejected.append(
                        Rejection(span_subject(span), f"internal error decoding this span ({type(exc).__name__})")
                    )
    accepted = _within_days(accepted, limits, rejected)
    accepted, timelines = with_timelines(accepted, rejected)
    streams, chunks = column_blocks(accepted, timelines, stall)
    coverage = Counter(str(s.row["coverage"]) for s in accepted)
    return DecodedBatch(
        blocks={"chunk_arrays": chunks, "streams": streams},
        ignored=ignored,
        rejected=rejected,
        warnings=warnings,
        incomplete={kind: n for kind, n in coverage.items() if kind != columns.COVERAGE_FULL},
    )


def _within_days(streams: list[Stream], limits: SpanLimits, rejected: list[Rejection]) -> list[Stream]:
    """``streams`` that start within the days ``limits`` allow one request; the others go to ``rejected``."""
    kept = limits.days_kept([s.row["start_time"] for s in streams])
    rejected += [Rejection(s.subject, limits.days_message()) for s, keep in zip(streams, kept) if not keep]
    return [s for s, keep in zip(streams, kept) if keep]


def _decode_span(
    span: Message,
    scalars: dict[str, Any],
    arrays: dict[str, PackedArray],
    tenant: str,
    service: str,
    resource: dict[str, str],
) -> Stream:
    """A stream from our own span: ``scalars`` are its attributes' plain values, ``arrays`` its packed arrays."""
    check_ids_and_times(span)
    side = str(scalars[sc.STREAMSCOPE_SIDE])
    if side not in sc.STREAMSCOPE_SIDE_VALUES:
        raise SpanRejected(f"streamscope.side must be one of {', '.join(sc.STREAMSCOPE_SIDE_VALUES)}")
    packed: dict[str, PackedArray] | None = None
    offsets = values = None
    notes = [] if sc.STREAMSCOPE_ENCODING in scalars else [f"{sc.STREAMSCOPE_ENCODING} is missing (it is required)"]
    if sc.STREAMSCOPE_CHUNKS_OFFSET_US in arrays:
        encoding = "packed"
        packed = with_required_arrays(arrays)
        chunk_count = element_count(arrays[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
        events_dropped = False
        unreadable = None
    else:
        if scalars.get(sc.STREAMSCOPE_ENCODING) == "packed":
            raise SpanRejected(
                f"packed encoding without {sc.STREAMSCOPE_CHUNKS_OFFSET_US}"
                f" ({span.dropped_attributes_count} attributes dropped by the sender)"
            )
        encoding = "events"
        offsets, values = event_arrays(span)
        chunk_count = offsets.size
        events_dropped = span.dropped_events_count > 0
        unreadable = unreadable_events(span, values)
    tail_dropped = (
        bounded_int(sc.STREAMSCOPE_CHUNKS_DROPPED, scalars.get(sc.STREAMSCOPE_CHUNKS_DROPPED), 2**63 - 1) or 0
    )
    truncated = events_dropped or tail_dropped > 0
    if unreadable:
        coverage = columns.COVERAGE_UNREADABLE
        notes.append(f"{unreadable}; stored without a timeline")
    elif truncated:
        coverage = columns.COVERAGE_PARTIAL
        if events_dropped:
            notes.append(
                dropped_events(span, f"{chunk_count} chunks", "token")
                + " (raise the limit, or send the packed encoding)"
            )
        if tail_dropped:
            notes.append(f"{tail_dropped} chunks past the SDK's cap were not recorded: stored as a partial timeline")
    else:
        coverage = columns.COVERAGE_FULL
    row = stream_row(span, scalars, tenant, service, resource, side=side, encoding=encoding, coverage=coverage)
    row["timeline_truncated"] = truncated
    row["first_tool_call_seq"] = chunk_seq(scalars, sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK, chunk_count, events_dropped)
    row.update(json_progress(scalars, notes))
    return Stream(
        row=row,
        chunk_count=0 if unreadable else chunk_count,
        first_byte_us=offset_attribute(
            sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US, scalars.get(sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US)
        ),
        packed=packed,
        offsets=offsets if not unreadable else np.empty(0, np.int64),
        values=values if not unreadable else np.empty((len(sc.CHUNK_EVENT_ATTRIBUTES), 0), np.int64),
        notes=notes,
        first_chunk_lost=events_dropped,
    )


def _decode_foreign(
    span: Message, foreign: sources.Foreign, tenant: str, service: str, resource: dict[str, str]
) -> Stream:
    """A stream from another instrumentation's span: what its source knows of it (``sources``), the rest unknown."""
    check_ids_and_times(span)
    notes = list(foreign.notes)
    chunk_count = 0 if foreign.arrivals_ns is None else foreign.arrivals_ns.size
    coverage = foreign.coverage
    truncated = foreign.arrivals_ns is not None and span.dropped_events_count > 0
    if truncated:
        coverage = COVERAGE_ARRIVALS_PARTIAL
        notes.append(dropped_events(span, f"{chunk_count} chunk arrivals", "chunk"))
    encoding = "events" if foreign.arrivals_ns is not None else ""
    row = stream_row(
        span,
        foreign.attributes,
        tenant,
        service,
        resource,
        side=foreign.side,
        encoding=encoding,
        coverage=coverage,
        source=foreign.source,
    )
    row["timeline_truncated"] = truncated
    if row["error_type"] in READER_STOPPED:
        row["outcome"], row["error_type"] = "cancelled", ""
    elif row["error_type"]:
        row["outcome"] = "error"  # other instrumentations say how a call failed, not how its stream ended
    elif not row["finish_reasons"] and row["output_tokens"] is None:
        row["outcome"] = columns.OUTCOME_UNKNOWN  # an app that closes a stream early ends the span all the same
        notes.append("its end is unknown: the source recorded no finish reason and no usage (so a stream the app "
                     "closed early looks); stored with outcome unknown, out of the cancellation rate")  # fmt: skip
    offsets = np.empty(0, np.int64)
    if foreign.arrivals_ns is not None:
        if foreign.arrivals_ns.size and int(foreign.arrivals_ns[0]) < span.start_time_unix_nano:
            raise SpanRejected("negative chunk offset: a chunk event precedes the span start")
        offsets = ((foreign.arrivals_ns - np.uint64(span.start_time_unix_nano)) // np.uint64(1000)).astype(np.int64)
    return Stream(
        row=row,
        chunk_count=chunk_count,
        first_byte_us=foreign.first_byte_us,
        offsets=offsets,
        values=np.zeros((len(sc.CHUNK_EVENT_ATTRIBUTES), chunk_count), np.int64),
        notes=notes,
        first_chunk_lost=truncated,
        sizes_unknown=foreign.arrivals_ns is not None,
        ttft_us=foreign.ttft_us,
    )


def _plain_packed(value: PackedArray) -> Any:
    """A packed array as ``plain`` reads its OTLP value (hex for the bytes form)."""
    return value.hex() if isinstance(value, bytes) else plain(value)
