"""OTLP trace requests to column blocks for ``streams`` and ``chunk_arrays``; no I/O, nothing of ClickHouse.

A span is a stream span when it carries ``streamscope.side``, or when a reader in ``sources`` recognises it as
another GenAI instrumentation's; other spans are counted and ignored. A stream span's chunk timeline comes from
the packed arrays when ``streamscope.chunks.offset_us`` is present, else from its ``streamscope.chunk`` events.
Spans with a malformed timeline are rejected with a reason, which the collector returns in ``partial_success``;
the rest of the request is kept.
"""

from __future__ import annotations

import logging
import math
import operator
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
from google.protobuf.message import Message
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_ingest.decode import columns, sources
from streamscope_ingest.decode.attributes import AttributeRejected, attribute_map, plain, span_attributes, stringify
from streamscope_ingest.decode.batch import DecodedBatch, Rejection
from streamscope_ingest.decode.chunk_events import ChunkEventRejected, as_trace_view, chunk_events
from streamscope_ingest.decode.int_arrays import (
    INT64_BYTES,
    NotAnIntArray,
    PackedArray,
    decode_int_arrays,
    element_count,
    int64s,
)
from streamscope_ingest.decode.limits import (
    DEFAULT_LIMITS,
    LATEST_OFFSET_US,
    LATEST_START_NS,
    SpanLimits,
    SpanOverLimit,
)
from streamscope_ingest.decode.retractions import over_withdrawn, retraction_stats
from streamscope_ingest.decode.timeline import PerStream, build_timeline, stream_stats

# Attributes that become columns (or chunk arrays) and so stay out of the ``attributes`` map.
_PROMOTED = frozenset(
    {
        sc.GEN_AI_OPERATION_NAME,
        sc.GEN_AI_PROVIDER_NAME,
        sc.GEN_AI_REQUEST_MODEL,
        sc.GEN_AI_RESPONSE_MODEL,
        sc.GEN_AI_RESPONSE_ID,
        sc.GEN_AI_RESPONSE_FINISH_REASONS,
        sc.GEN_AI_USAGE_INPUT_TOKENS,
        sc.GEN_AI_USAGE_OUTPUT_TOKENS,
        sc.SERVER_ADDRESS,
        sc.SERVER_PORT,
        sc.ERROR_TYPE,
        sc.HTTP_ROUTE,
        sc.STREAMSCOPE_SIDE,
        sc.STREAMSCOPE_ENCODING,
        sc.STREAMSCOPE_TRANSPORT,
        sc.STREAMSCOPE_OUTCOME,
        sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US,
        sc.STREAMSCOPE_CANCEL_OFFSET_US,
        sc.STREAMSCOPE_TOKENS_AFTER_CANCEL,
        sc.STREAMSCOPE_TOKENS_ESTIMATED,
        sc.STREAMSCOPE_ENGINE_REQUEST_ID,
        sc.STREAMSCOPE_NODE_NAME,
        sc.STREAMSCOPE_REPETITION_SCORE,
        sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK,
        sc.STREAMSCOPE_HOST_WATCH,
        *sc.PACKED_ARRAYS,
        *sc.JSON_PROGRESS,
    }
)
_LIMITS = {  # largest value each per-chunk column can store
    sc.STREAMSCOPE_CHUNKS_TOKENS: np.iinfo(np.uint16).max,
    sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_WIRE_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RENDER_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS: np.iinfo(np.uint16).max,
}
_OPTIONAL_ARRAYS = (
    sc.STREAMSCOPE_CHUNKS_WIRE_BYTES,
    sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US,
    sc.STREAMSCOPE_CHUNKS_RENDER_US,
    sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_US,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS,
)
"""Recommended, not required: a missing array is all zeros, which means not measured."""
_REQUIRED_ARRAYS = frozenset(sc.PACKED_ARRAYS) - frozenset(_OPTIONAL_ARRAYS)
_U32_MAX = 2**32 - 1
_TOO_LATE = f"a chunk offset past {LATEST_OFFSET_US} µs, a week after the span's start"
_TEXT = (pa.string(), pa.dictionary(pa.int32(), pa.string()))
_TEXT_COLUMNS = operator.itemgetter(
    *map(sys.intern, ("model", *(f.name for f in columns.STREAMS_DECODED if f.type in _TEXT)))
)
"""A stream row's string values (``model`` is not a streams column, but a chunk_arrays one)."""
log = logging.getLogger(__name__)


class _SpanRejected(Exception):
    pass


@dataclass
class _Stream:
    """One accepted stream span before vectorisation: scalars plus its chunk arrays."""

    row: dict[str, Any]
    chunk_count: int
    first_byte_us: int | None
    packed: dict[str, PackedArray] | None = None
    """The packed arrays by name, in the order the span sent them, until the request's arrays are decoded
    together."""
    offsets: np.ndarray | None = None
    values: np.ndarray | Sequence[np.ndarray | None] | None = None
    """One row per packed array after the offsets (tokens, content bytes, wire bytes, paint delay, render, host
    delay); None for an optional array the span did not send, which is all zeros."""
    notes: list[str] = field(default_factory=list)
    """What the sender should hear about this span's timeline (``partial_success`` warnings)."""
    first_chunk_lost: bool = False
    """The sender dropped span events, the oldest first: the stored chunks do not begin with the stream's first."""
    sizes_unknown: bool = False
    """Each chunk's arrival is known, not what it carried (``arrivals``): every chunk counts as content."""
    ttft_us: int | None = None
    """The time to the first token as the span's source measured it, for a stream without chunks."""

    @property
    def subject(self) -> str:
        """The span as warnings and rejections name it, from the ids its row holds."""
        return _named(self.row["span_id"], self.row["trace_id"])


def decode_traces(
    request: Message, *, tenant: str, stall_threshold_us: int, limits: SpanLimits = DEFAULT_LIMITS
) -> DecodedBatch:
    """Decode every stream span in ``request`` (an ``ExportTraceServiceRequest``, or its view as the collector
    parses it: ``streamscope_ingest.decode.chunk_events``) for ``tenant``; raises LimitExceeded past ``limits``'
    span count."""
    request = as_trace_view(request)
    limits.check_span_count(sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans))
    accepted: list[_Stream] = []
    rejected: list[Rejection] = []
    warnings: list[str] = []
    ignored = 0
    seen: set[tuple[bytes, bytes]] = set()
    for resource_spans in request.resource_spans:
        resource_strings = _stringified(attribute_map(resource_spans.resource.attributes))
        if warning := limits.truncate("resource", resource_strings):
            warnings.append(warning)
        service = resource_strings.get("service.name", "")
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                try:
                    scalars, packed = span_attributes(span.attributes)
                except AttributeRejected as exc:
                    rejected.append(Rejection(_subject(span), str(exc)))
                    continue
                foreign = None
                if sc.STREAMSCOPE_SIDE not in scalars:
                    if scope.startswith(sources.SCOPES):
                        every = scalars | {key: _plain_packed(value) for key, value in packed.items()}
                        foreign = sources.read_foreign(scope, span, every)
                    if foreign is None:
                        ignored += 1
                        continue
                try:
                    limits.check_span(len(span.attributes), len(span.events))
                    if (span.trace_id, span.span_id) in seen:
                        raise _SpanRejected("the same span twice in one request")
                    seen.add((span.trace_id, span.span_id))
                    if foreign is None:
                        stream = _decode_span(span, scalars, packed, tenant, service, resource_strings)
                    else:
                        stream = _decode_foreign(span, foreign, tenant, service, resource_strings)
                    limits.check_chunks(stream.chunk_count)
                    if _may_be_too_long(stream.row, limits) and (
                        warning := limits.truncate(stream.subject, stream.row, stream.row["attributes"])
                    ):
                        warnings.append(warning)
                    accepted.append(stream)
                    warnings += [f"{stream.subject}: {note}" for note in stream.notes]
                except (_SpanRejected, SpanOverLimit) as exc:
                    rejected.append(Rejection(_subject(span), str(exc)))
                except Exception as exc:  # a decoder bug must cost one span, never the request
                    log.exception("unexpected error decoding a stream span")
                    rejected.append(
                        Rejection(_subject(span), f"internal error decoding this span ({type(exc).__name__})")
                    )
    accepted = _within_days(accepted, limits, rejected)
    accepted, timelines = _with_timelines(accepted, rejected)
    streams, chunks = _blocks(accepted, timelines, stall_threshold_us)
    coverage = Counter(str(s.row["coverage"]) for s in accepted)
    return DecodedBatch(
        blocks={"chunk_arrays": chunks, "streams": streams},
        ignored=ignored,
        rejected=rejected,
        warnings=warnings,
        incomplete={kind: n for kind, n in coverage.items() if kind != columns.COVERAGE_FULL},
    )


def _may_be_too_long(row: dict[str, Any], limits: SpanLimits) -> bool:
    """Whether a string of ``row`` (or of its attributes) may be past ``limits``: most rows are shown short by the
    length of their text columns' strings joined, as no one string is longer than all of them together."""
    try:
        strings = (*_TEXT_COLUMNS(row), *row["attributes"].values())
        joined = "".join(strings)
    except (TypeError, KeyError):  # a column that holds no string, or none at all: look at each
        return True
    return len(joined) > limits.max_string_length and max(map(len, strings)) > limits.max_string_length


def _within_days(streams: list[_Stream], limits: SpanLimits, rejected: list[Rejection]) -> list[_Stream]:
    """``streams`` that start within the days ``limits`` allow one request; the others go to ``rejected``."""
    kept = limits.days_kept([s.row["start_time"] for s in streams])
    rejected += [Rejection(s.subject, limits.days_message()) for s, keep in zip(streams, kept) if not keep]
    return [s for s, keep in zip(streams, kept) if keep]


def _subject(span: Message) -> str:
    return _named(span.span_id.hex(), span.trace_id.hex())


def _named(span_id: str, trace_id: str) -> str:
    """How warnings and rejections name a span, by its ids in hex."""
    return f"span {span_id or '?'} of trace {trace_id or '?'}"


def _decode_span(
    span: Message,
    scalars: dict[str, Any],
    arrays: dict[str, PackedArray],
    tenant: str,
    service: str,
    resource: dict[str, str],
) -> _Stream:
    """A stream from our own span: ``scalars`` are its attributes' plain values, ``arrays`` its packed arrays."""
    _check_ids_and_times(span)
    side = str(scalars[sc.STREAMSCOPE_SIDE])
    if side not in sc.STREAMSCOPE_SIDE_VALUES:
        raise _SpanRejected(f"streamscope.side must be one of {', '.join(sc.STREAMSCOPE_SIDE_VALUES)}")
    packed: dict[str, PackedArray] | None = None
    offsets = values = None
    notes = [] if sc.STREAMSCOPE_ENCODING in scalars else [f"{sc.STREAMSCOPE_ENCODING} is missing (it is required)"]
    if sc.STREAMSCOPE_CHUNKS_OFFSET_US in arrays:
        encoding = "packed"
        packed = _with_required_arrays(arrays)
        chunk_count = element_count(arrays[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
        events_dropped = False
        unreadable = None
    else:
        if scalars.get(sc.STREAMSCOPE_ENCODING) == "packed":
            raise _SpanRejected(
                f"packed encoding without {sc.STREAMSCOPE_CHUNKS_OFFSET_US}"
                f" ({span.dropped_attributes_count} attributes dropped by the sender)"
            )
        encoding = "events"
        offsets, values = _event_arrays(span)
        chunk_count = offsets.size
        events_dropped = span.dropped_events_count > 0
        unreadable = _unreadable_events(span, values)
    tail_dropped = _bounded(sc.STREAMSCOPE_CHUNKS_DROPPED, scalars.get(sc.STREAMSCOPE_CHUNKS_DROPPED), 2**63 - 1) or 0
    truncated = events_dropped or tail_dropped > 0
    if unreadable:
        coverage = columns.COVERAGE_UNREADABLE
        notes.append(f"{unreadable}; stored without a timeline")
    elif truncated:
        coverage = columns.COVERAGE_PARTIAL
        if events_dropped:
            notes.append(
                _dropped_events(span, f"{chunk_count} chunks", "token")
                + " (raise the limit, or send the packed encoding)"
            )
        if tail_dropped:
            notes.append(f"{tail_dropped} chunks past the SDK's cap were not recorded: stored as a partial timeline")
    else:
        coverage = columns.COVERAGE_FULL
    row = _row(span, scalars, tenant, service, resource, side=side, encoding=encoding, coverage=coverage)
    row["timeline_truncated"] = truncated
    row["first_tool_call_seq"] = _chunk_seq(scalars, sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK, chunk_count, events_dropped)
    row.update(_json_progress(scalars, notes))
    return _Stream(
        row=row,
        chunk_count=0 if unreadable else chunk_count,
        first_byte_us=_offset(sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US, scalars.get(sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US)),
        packed=packed,
        offsets=offsets if not unreadable else np.empty(0, np.int64),
        values=values if not unreadable else np.empty((len(sc.CHUNK_EVENT_ATTRIBUTES), 0), np.int64),
        notes=notes,
        first_chunk_lost=events_dropped,
    )


def _row(
    span: Message,
    scalars: dict[str, Any],
    tenant: str,
    service: str,
    resource: dict[str, str],
    *,
    side: str,
    encoding: str,
    coverage: str,
    source: str = columns.SOURCE_STREAMSCOPE,
) -> dict[str, Any]:
    """A stream's ``streams`` row from its span's attributes (plain values), before its timeline's statistics.

    Each attribute the span sent is read into its column (``_COLUMN_OF``), in one pass over what was sent; a column
    whose attribute was not sent keeps its default (``_COLUMN_DEFAULTS``). The row starts as a copy of one that
    holds every key (``_ROW_DEFAULTS``): a copy takes the keys' table whole, where adding some seventy keys one by
    one would grow it several times."""
    row = _ROW_DEFAULTS.copy()
    row["tenant"] = tenant
    row["start_time"] = span.start_time_unix_nano // 1000
    row["duration_us"] = (span.end_time_unix_nano - span.start_time_unix_nano) // 1000
    row["trace_id"] = span.trace_id.hex()
    row["span_id"] = span.span_id.hex()
    row["parent_span_id"] = span.parent_span_id.hex()
    row["service"] = service
    row["side"] = side
    row["span_name"] = span.name
    row["encoding"] = encoding
    row["timeline_truncated"] = coverage == columns.COVERAGE_PARTIAL
    row["source"] = source
    row["coverage"] = coverage
    row["resource_attributes"] = resource
    others = row["attributes"] = {}
    for key, value in scalars.items():
        if (column := _COLUMN_OF.get(key)) is not None:
            name, read, _ = column
            row[name] = read(key, value)
        elif key not in _PROMOTED:
            others[key] = stringify(value)
    row["model"] = row["response_model"] or row["request_model"]
    return row


def _json_progress(scalars: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """The ``json_*`` columns from the streamscope.json.* attributes. What does not read as the convention says
    is left out, with a note to the sender, rather than stored as a wrong time; the stream itself is kept."""
    document = scalars.get(sc.STREAMSCOPE_JSON_DOCUMENT)
    if document is None:
        return {}
    outcome = scalars.get(sc.STREAMSCOPE_JSON_OUTCOME)
    if document not in sc.STREAMSCOPE_JSON_DOCUMENT_VALUES or outcome not in sc.STREAMSCOPE_JSON_OUTCOME_VALUES:
        notes.append(
            f"{sc.STREAMSCOPE_JSON_DOCUMENT} with {sc.STREAMSCOPE_JSON_OUTCOME} is not one of "
            f"{', '.join(sc.STREAMSCOPE_JSON_DOCUMENT_VALUES)} with {', '.join(sc.STREAMSCOPE_JSON_OUTCOME_VALUES)}: "
            "its JSON progress was not stored"
        )
        return {}
    valid = _natural(scalars.get(sc.STREAMSCOPE_JSON_VALID_OFFSET_US), LATEST_OFFSET_US)
    count = _natural(scalars.get(sc.STREAMSCOPE_JSON_FIELD_COUNT), 2**63 - 1)
    names = scalars.get(sc.STREAMSCOPE_JSON_FIELD_NAMES, [])
    offsets = scalars.get(sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US, [])
    names = names if isinstance(names, list) else [names]
    offsets = [_natural(o, LATEST_OFFSET_US) for o in (offsets if isinstance(offsets, list) else [offsets])]
    fields_read = len(names) == len(offsets) and None not in offsets and all(isinstance(n, str) for n in names)
    if not fields_read or (outcome == "valid") != (valid is not None) or count is None or count < len(names):
        notes.append(
            f"the {sc.STREAMSCOPE_JSON_DOCUMENT} attributes disagree (an outcome {outcome} needs a valid offset "
            "exactly when valid, as many field offsets as names, whole microseconds, a field count at least the "
            "names): its JSON progress was not stored"
        )
        return {}
    return {
        "json_document": document,
        "json_outcome": outcome,
        "json_valid_us": valid,
        "json_field_count": min(count, _U32_MAX),
        "json_fields": names,
        "json_field_us": offsets,
    }


def _natural(value: Any, largest: int) -> int | None:
    """A whole number in 0..largest, else None."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= largest:
        return None
    return value


def _dropped_events(span: Message, kept: str, first: str) -> str:
    """What the sender hears when it dropped span events: the OTel SDK drops the oldest, so the head is lost."""
    return (
        f"the sender dropped {span.dropped_events_count} of its span events (its span event limit), the oldest"
        f" first: stored as a partial timeline of the {kept} kept, time to first {first} unknown"
    )


def _check_ids_and_times(span: Message) -> None:
    if len(span.trace_id) != 16 or len(span.span_id) != 8 or not any(span.trace_id) or not any(span.span_id):
        raise _SpanRejected("invalid trace or span id")
    if span.end_time_unix_nano < span.start_time_unix_nano:
        raise _SpanRejected("span ends before it starts")
    if span.start_time_unix_nano > LATEST_START_NS:
        raise _SpanRejected("span starts after 2299-12-24, past the times the store holds")


def _decode_foreign(
    span: Message, foreign: sources.Foreign, tenant: str, service: str, resource: dict[str, str]
) -> _Stream:
    """A stream from another instrumentation's span: what its source knows of it (``sources``), the rest unknown."""
    _check_ids_and_times(span)
    notes = []
    chunk_count = 0 if foreign.arrivals_ns is None else foreign.arrivals_ns.size
    coverage = foreign.coverage
    if foreign.arrivals_ns is not None and span.dropped_events_count > 0:
        coverage = columns.COVERAGE_PARTIAL
        notes.append(_dropped_events(span, f"{chunk_count} chunk arrivals", "chunk"))
    encoding = "events" if foreign.arrivals_ns is not None else ""
    row = _row(
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
    if row["error_type"]:
        row["outcome"] = "error"  # other instrumentations say how a call failed, not how its stream ended
    offsets = np.empty(0, np.int64)
    if foreign.arrivals_ns is not None:
        if foreign.arrivals_ns.size and int(foreign.arrivals_ns[0]) < span.start_time_unix_nano:
            raise _SpanRejected("negative chunk offset: a chunk event precedes the span start")
        offsets = ((foreign.arrivals_ns - np.uint64(span.start_time_unix_nano)) // np.uint64(1000)).astype(np.int64)
    return _Stream(
        row=row,
        chunk_count=chunk_count,
        first_byte_us=None,
        offsets=offsets,
        values=np.zeros((len(sc.CHUNK_EVENT_ATTRIBUTES), chunk_count), np.int64),
        notes=notes,
        first_chunk_lost=coverage == columns.COVERAGE_PARTIAL,
        sizes_unknown=foreign.arrivals_ns is not None,
        ttft_us=foreign.ttft_us,
    )


def _plain_packed(value: PackedArray) -> Any:
    """A packed array as ``plain`` reads its OTLP value (hex for the bytes form)."""
    return value.hex() if isinstance(value, bytes) else plain(value)


def _with_required_arrays(arrays: dict[str, PackedArray]) -> dict[str, PackedArray]:
    if not arrays.keys() >= _REQUIRED_ARRAYS:
        missing = [name for name in sc.PACKED_ARRAYS if name in _REQUIRED_ARRAYS and name not in arrays]
        raise _SpanRejected(f"packed encoding without {missing[0]}")
    return arrays


def _packed_arrays(
    decoded: list[np.ndarray | NotAnIntArray | None],
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """A span's decoded packed arrays as offsets and a row per other array (None: an optional one not sent)."""
    arrays: list[np.ndarray | None] = []
    for name, array in zip(sc.PACKED_ARRAYS, decoded, strict=True):
        if isinstance(array, NotAnIntArray):
            raise _SpanRejected(f"{name}: {array}")
        arrays.append(array)
    sent = {name: array for name, array in zip(sc.PACKED_ARRAYS, arrays) if array is not None}
    if len({len(array) for array in sent.values()}) > 1:
        sizes = ", ".join(f"{name.rsplit('.', 1)[1]} {len(array)}" for name, array in sent.items())
        raise _SpanRejected(f"chunk arrays of unequal length ({sizes})")
    offsets, *rows = arrays
    assert offsets is not None
    return offsets, rows


def _with_timelines(streams: list[_Stream], rejected: list[Rejection]) -> tuple[list[_Stream], _Timelines]:
    """``streams`` with their timelines decoded (every packed array of the request in one pass) and checked,
    and those timelines concatenated; a span whose timeline is malformed goes to ``rejected`` instead."""
    together = _packed_together(streams)
    if together is not None and _all_valid(together):
        return streams, together
    in_order = [[s.packed.get(name) for name in sc.PACKED_ARRAYS] if s.packed is not None else None for s in streams]
    present = [value for arrays in in_order for value in arrays or () if value is not None]
    decoded = iter(decode_int_arrays(present))
    kept = []
    for stream, arrays in zip(streams, in_order, strict=True):
        try:
            if arrays is not None:
                stream.offsets, stream.values = _packed_arrays(
                    [next(decoded) if value is not None else None for value in arrays]
                )
            kept.append(stream)
        except _SpanRejected as exc:
            rejected.append(Rejection(stream.subject, str(exc)))
    timelines = _concatenated(kept)
    if _all_valid(timelines):
        return kept, timelines
    valid = []
    for stream in kept:  # the rare request with a bad timeline: find which
        assert stream.offsets is not None and stream.values is not None
        if error := _timeline_error(stream.offsets, stream.values):
            rejected.append(Rejection(stream.subject, error))
        else:
            valid.append(stream)
    return valid, _concatenated(valid)


def _packed_together(streams: list[_Stream]) -> _Timelines | None:
    """Every stream's timeline when each sent the same packed arrays in the same order, as bytes, each as long as
    the stream's others (what the SDKs send): their bytes joined are one array, and one gather cuts it into rows.
    None otherwise."""
    if not streams or any(s.packed is None for s in streams):
        return None
    names = {tuple(s.packed or ()) for s in streams}
    raws = list(chain.from_iterable((s.packed or {}).values() for s in streams))
    if len(names) != 1 or set(map(type, raws)) != {bytes}:
        return None  # arrays sent in different orders (or sets), or not all in the bytes form
    (sent,) = names
    counts = np.fromiter((s.chunk_count for s in streams), np.int64, len(streams))
    width = len(sent)
    sizes = np.fromiter(map(len, raws), np.int64, len(raws)).reshape(len(streams), width)
    if (sizes != (counts * INT64_BYTES)[:, None]).any():
        return None  # arrays of unequal lengths
    # raws holds each stream's arrays in turn: every width-th one, joined, is one array's row for all streams
    rows = {name: int64s(b"".join(raws[column::width])) for column, name in enumerate(sent)}
    values = [rows.get(name) for name in sc.PACKED_ARRAYS[1:]]
    return _Timelines(counts, rows[sc.STREAMSCOPE_CHUNKS_OFFSET_US].astype(np.int64, copy=False), values)


def _event_arrays(span: Message) -> tuple[np.ndarray, np.ndarray]:
    """The span's chunk events as offsets and value rows, in time order."""
    try:
        time_ns, values = chunk_events(span)
    except ChunkEventRejected as exc:
        raise _SpanRejected(str(exc)) from None
    order = np.argsort(time_ns, kind="stable")
    time_ns = time_ns[order]
    if time_ns.size and int(time_ns[0]) < span.start_time_unix_nano:
        raise _SpanRejected("negative chunk offset: a chunk event precedes the span start")
    offsets = ((time_ns - np.uint64(span.start_time_unix_nano)) // np.uint64(1000)).astype(np.int64)
    return offsets, values[:, order]


def _unreadable_events(span: Message, values: np.ndarray) -> str | None:
    """Why a span of the events encoding has no timeline that can be read as the convention says, if it has not:
    none of its events is a chunk event, or its chunk events carry none of the chunk attributes (their sizes
    would read as zero). Looked into only when the values already suggest so: a stream whose chunks all carried
    nothing (sent as zeros) is read as it is."""
    if values.shape[1] and (values[_TOKENS_ROW].any() or values[_CONTENT_ROW].any()):
        return None
    if not span.events:
        return None  # a stream that ended before its first chunk
    events = [Span.Event.FromString(event) for event in span.events]
    names = sorted({event.name for event in events})
    chunks = [event for event in events if event.name == sc.CHUNK_EVENT]
    if not chunks:
        return f"none of its {len(events)} events is a {sc.CHUNK_EVENT} event (they are named {', '.join(names[:5])})"
    keys = sorted({kv.key for event in chunks for kv in event.attributes})
    if set(keys) & set(sc.CHUNK_EVENT_ATTRIBUTES):
        return None
    carried = f"they carry {', '.join(keys[:5])}" if keys else "they carry no attributes"
    return (
        f"its {sc.CHUNK_EVENT} events carry none of {sc.STREAMSCOPE_CHUNK_TOKENS}, {sc.STREAMSCOPE_CHUNK_CONTENT_BYTES}"
        f" ({carried})"
    )


_TOKENS_ROW = sc.CHUNK_EVENT_ATTRIBUTES.index(sc.STREAMSCOPE_CHUNK_TOKENS)
_CONTENT_ROW = sc.CHUNK_EVENT_ATTRIBUTES.index(sc.STREAMSCOPE_CHUNK_CONTENT_BYTES)
_RETRACTED_ROW = sc.CHUNK_EVENT_ATTRIBUTES.index(sc.STREAMSCOPE_CHUNK_RETRACTED_BYTES)


class _Timelines(NamedTuple):
    """Chunk counts per stream, and every stream's offsets and value rows one after another."""

    lengths: np.ndarray
    offsets: np.ndarray
    values: list[np.ndarray | None]
    """One row per packed array after the offsets; None for an array no stream sent (all zeros), which costs no
    memory and no pass."""


def _concatenated(streams: list[_Stream]) -> _Timelines:
    lengths = np.fromiter((s.chunk_count for s in streams), dtype=np.int64, count=len(streams))
    offsets = np.concatenate([s.offsets for s in streams]) if streams else np.empty(0, dtype=np.int64)
    values: list[np.ndarray | None] = []
    for index in range(len(sc.PACKED_ARRAYS) - 1):  # row by row: each stream's rows are separate arrays
        pieces = [s.values[index] if s.values is not None else None for s in streams]
        sent = any(piece is not None for piece in pieces)
        values.append(
            np.concatenate([_or_zeros(p, s.chunk_count) for s, p in zip(streams, pieces, strict=True)]).astype(
                np.int64, copy=False
            )
            if sent
            else None
        )
    return _Timelines(lengths, offsets, values)


def _all_valid(timelines: _Timelines) -> bool:
    """Whether every stream passes ``_timeline_error``, checked on all of them at once."""
    lengths, offsets, values = timelines
    if offsets.size == 0:
        return True
    steps = np.diff(offsets)
    starts = np.cumsum(lengths) - lengths
    steps[starts[(starts > 0) & (starts < offsets.size)] - 1] = 0  # across a boundary between streams
    tokens, content, retracted = values[0], values[_CONTENT_ROW], values[_RETRACTED_ROW]
    sent = [(name, row) for name, row in zip(sc.PACKED_ARRAYS[1:], values, strict=True) if row is not None]
    return bool(
        offsets.min() >= 0
        and offsets.max() <= LATEST_OFFSET_US
        and steps.min(initial=0) >= 0
        and all(row.min() >= 0 and row.max() <= _LIMITS[name] for name, row in sent)
        and (tokens is None or np.add.reduceat(tokens, starts[lengths > 0]).max() <= _U32_MAX)
        and not (
            retracted is not None
            and retracted.any()
            and over_withdrawn(lengths, _or_zeros(content, offsets.size), retracted).any()
        )
    )


def _or_zeros(row: np.ndarray | None, size: int) -> np.ndarray:
    """A value row, or the zeros an array not sent stands for."""
    return np.zeros(size, np.int64) if row is None else row


def _tool_call_pauses(rows: list[dict[str, Any]], lengths: np.ndarray, gap_us: np.ndarray) -> list[int | None]:
    """Each stream's gap before the chunk at its ``first_tool_call_seq``; None without one (or without the chunks
    it counts, a stream stored without its timeline)."""
    starts = np.cumsum(lengths) - lengths
    return [
        int(gap_us[starts[i] + seq]) if (seq := row["first_tool_call_seq"]) is not None and seq < lengths[i] else None
        for i, row in enumerate(rows)
    ]


def _timeline_error(offsets: np.ndarray, values: np.ndarray | Sequence[np.ndarray | None]) -> str | None:
    if offsets.size == 0:
        return None
    if offsets.min() < 0:
        return "negative chunk offset"
    if offsets.max() > LATEST_OFFSET_US:
        return _TOO_LATE
    if np.any(np.diff(offsets) < 0):
        return "chunk offsets are not in order"
    for name, row in zip(sc.PACKED_ARRAYS[1:], values, strict=True):
        if row is not None and (row.min() < 0 or row.max() > _LIMITS[name]):
            return f"{name} out of range 0..{_LIMITS[name]}"
    tokens = values[0]
    if tokens is not None and int(tokens.sum()) > _U32_MAX:
        return f"the stream's tokens add up to more than {_U32_MAX}"
    content, retracted = values[_CONTENT_ROW], values[_RETRACTED_ROW]
    # (content is a required array, never None; the check is for the type)
    if (
        retracted is not None
        and content is not None
        and over_withdrawn(np.array([offsets.size]), content, retracted)[0]
    ):
        return f"a chunk withdraws more content than was shown before it ({sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES})"
    return None


def _blocks(streams: list[_Stream], timelines: _Timelines, stall_threshold_us: int) -> tuple[pa.Table, pa.Table]:
    lengths, offsets, values = timelines
    tokens, content, wire, paint_delay, render, host_delay, host_held, retracted_bytes, retracted_tokens = values
    tokens, content = _or_zeros(tokens, offsets.size), _or_zeros(content, offsets.size)  # required: sent
    sizes = content
    if any(s.sizes_unknown for s in streams):  # arrivals only: each is content
        unknown_sizes = np.repeat(np.fromiter((s.sizes_unknown for s in streams), bool, len(streams)), lengths)
        sizes = np.where(unknown_sizes, 1, content)
    timeline = build_timeline(lengths, offsets, sizes, retracted_bytes)
    stats = stream_stats(lengths, offsets, tokens, content, wire, timeline, stall_threshold_us)
    taken_back = retraction_stats(lengths, offsets, content, retracted_bytes, retracted_tokens)
    rows = [s.row for s in streams]

    first_byte = PerStream(stats.first_chunk_us.values.copy(), stats.first_chunk_us.present.copy())
    # the first chunks lost, the first stored is not the first: times to it are unknown, and so is the head
    lost = np.fromiter((s.first_chunk_lost for s in streams), dtype=bool, count=len(streams))
    first_byte.present[lost] = stats.ttft_us.present[lost] = False
    stats.head_tokens[lost] = 0
    for index, stream in enumerate(streams):  # a source that measured the first token but sent no chunks
        if stream.ttft_us is not None and not stream.chunk_count:
            stats.ttft_us.values[index], stats.ttft_us.present[index] = stream.ttft_us, True
    sent = np.fromiter((s.first_byte_us is not None for s in streams), dtype=bool, count=len(streams))
    first_byte.values[sent] = [s.first_byte_us for s in streams if s.first_byte_us is not None]
    first_byte.present[sent] = True  # the span says when its first byte came: not its first chunk
    derived = {
        "chunk_count": pa.array(lengths, pa.uint32()),
        "content_chunks": pa.array(stats.content_chunks),
        "tokens": pa.array(stats.tokens, pa.uint32()),
        "content_bytes": pa.array(stats.content_bytes),
        "wire_bytes": pa.array(stats.wire_bytes),
        "ttfb_us": _nullable(first_byte, pa.uint64()),
        "ttft_us": _nullable(stats.ttft_us, pa.uint64()),
        "gap_p50_us": _nullable(stats.gap_quantiles_us[0.5], pa.uint32()),
        "gap_p95_us": _nullable(stats.gap_quantiles_us[0.95], pa.uint32()),
        "gap_p99_us": _nullable(stats.gap_quantiles_us[0.99], pa.uint32()),
        "gap_max_us": _nullable(stats.gap_max_us, pa.uint32()),
        "jitter_ratio": _nullable(stats.jitter_ratio, pa.float32()),
        "stall_count": pa.array(stats.stall_count),
        "stall_threshold_us": pa.array(np.full(len(streams), stall_threshold_us, dtype=np.uint32)),
        "last_content_us": _nullable(stats.last_content_us, pa.uint64()),
        "head_tokens": pa.array(stats.head_tokens),
        "content_chunks_by_tokens": stats.chunks_by_tokens.map_array(),
        "retractions": pa.array(taken_back.count),
        "retracted_bytes": pa.array(taken_back.bytes),
        "retracted_tokens": pa.array(taken_back.tokens),
        "retraction_shown_us": pa.array(taken_back.shown_us, pa.list_(pa.uint64())),
        "tool_call_pause_us": pa.array(_tool_call_pauses(rows, lengths, timeline.gap_us), pa.uint32()),
    }
    derived["resource_attributes"] = _shared_maps(
        [r["resource_attributes"] for r in rows], columns.STREAMS_DECODED.field("resource_attributes").type
    )
    decoded = columns.STREAMS_DECODED
    from_rows = pa.Table.from_pylist(rows, schema=pa.schema(f for f in decoded if f.name not in derived))
    stream_columns = [derived[name] if name in derived else from_rows[name] for name in decoded.names]
    streams_block = pa.Table.from_arrays(stream_columns, schema=decoded)

    total = offsets.size
    offsets = pa.array(np.concatenate(([0], np.cumsum(lengths))).astype(np.int32))

    def chunk_values(values: np.ndarray | None, name: str) -> pa.ListArray:
        """A per-chunk column as one list per stream; for a column stored with a default, a stream's zeros as an
        empty list. None is an array no stream sent: all zeros."""
        item_type = columns.CHUNKS_DECODED.field(name).type.value_type
        if name in columns.CHUNKS_DEFAULTED.names:
            return columns.zeros_left_empty(lengths, np.empty(0, np.int64) if values is None else values, item_type)
        items = _or_zeros(values, total).astype(item_type.to_pandas_dtype(), copy=False)
        return pa.ListArray.from_arrays(offsets, pa.array(items))

    stream_values = {name: streams_block[name] for name in ("tenant", "start_time", "service", "side", "provider")}
    chunks_block = pa.Table.from_pydict(
        {
            **stream_values,
            "trace_id_bytes": columns.ids_as_bytes(streams_block["trace_id"], "trace_id_bytes"),
            "span_id_bytes": columns.ids_as_bytes(streams_block["span_id"], "span_id_bytes"),
            "model": pa.array([r["model"] for r in rows], pa.string()).dictionary_encode(),
            "kind": chunk_values(timeline.kind, "kind"),
            "gap_us": chunk_values(timeline.gap_us, "gap_us"),
            "tokens": chunk_values(tokens, "tokens"),
            "content_bytes": chunk_values(content, "content_bytes"),
            "wire_bytes": chunk_values(wire, "wire_bytes"),
            "paint_delay_us": chunk_values(paint_delay, "paint_delay_us"),
            "render_us": chunk_values(render, "render_us"),
            "host_delay_us": chunk_values(host_delay, "host_delay_us"),
            "host_held_us": chunk_values(host_held, "host_held_us"),
            "retracted_bytes": chunk_values(retracted_bytes, "retracted_bytes"),
            "retracted_tokens": chunk_values(retracted_tokens, "retracted_tokens"),
        },
        schema=columns.CHUNKS_DECODED,
    )
    return streams_block, chunks_block


def _shared_maps(maps: list[dict[str, str]], arrow_type: pa.DataType) -> pa.Array:
    """A map column whose rows share a few dicts (each resource's attributes, for all its spans): each distinct
    dict converted once, then repeated where it is shared."""
    position: dict[int, int] = {}  # by identity: the maps are alive, so no two share an id
    distinct: list[dict[str, str]] = []
    for shared in maps:
        if id(shared) not in position:
            position[id(shared)] = len(distinct)
            distinct.append(shared)
    index = pa.array([position[id(shared)] for shared in maps], pa.int32())
    return pa.array(distinct, arrow_type).take(index)


def _nullable(values: PerStream, arrow_type: pa.DataType) -> pa.Array:
    return pa.array(values.values, mask=~values.present).cast(arrow_type)


def _stringified(attributes: dict[str, Any]) -> dict[str, str]:
    return {k: stringify(v) for k, v in attributes.items()}


def _text(_: str, value: Any) -> str:
    return stringify(value)


def _str(_: str, value: Any) -> str:
    return str(value)


def _string_list(_: str, value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [stringify(v) for v in value]
    return [stringify(value)]


def _bounded(key: str, value: Any, largest: int) -> int | None:
    """An integer attribute's value in 0..largest (an integral double counts); anything else rejects the span."""
    if value is None:
        return None
    integral = isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if isinstance(value, bool) or not integral or not 0 <= value <= largest:
        raise _SpanRejected(f"{key} must be an integer in 0..{largest}")
    return int(value)


def _count(key: str, value: Any) -> int | None:
    return _bounded(key, value, _U32_MAX)


def _offset(key: str, value: Any) -> int | None:
    return _bounded(key, value, LATEST_OFFSET_US)


def _port(key: str, value: Any) -> int:
    return _bounded(key, value, 65535) or 0


def _chunk_seq(scalars: dict[str, Any], key: str, chunk_count: int, events_dropped: bool) -> int | None:
    """A chunk index attribute as a ``chunks.seq``; an index past the stream's chunks rejects the span.

    When the sender dropped span events (the OTel SDK drops the oldest) the stored seqs no longer count from
    the sender's first chunk, so the index cannot be placed and is stored as unknown.
    """
    index = _count(key, scalars.get(key))
    if index is None or events_dropped:
        return None
    if index >= chunk_count:
        raise _SpanRejected(f"{key} is outside the stream's {chunk_count} chunks")
    return index


def _enum(allowed: tuple[str, ...], default: str) -> Callable[[str, Any], str]:
    """A reader of an attribute that must be one of ``allowed`` (None: ``default``)."""

    def read(key: str, value: Any) -> str:
        if value is None:
            return default
        if value not in allowed:
            raise _SpanRejected(f"{key} must be one of {', '.join(allowed)}")
        return str(value)

    return read


def _flag(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _SpanRejected(f"{key} must be a boolean")
    return value


def _float(_: str, value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


_COLUMN_OF: dict[str, tuple[str, Callable[[str, Any], Any], Any]] = {
    sc.GEN_AI_OPERATION_NAME: ("operation", _text, ""),
    sc.GEN_AI_PROVIDER_NAME: ("provider", _text, ""),
    sc.GEN_AI_REQUEST_MODEL: ("request_model", _str, ""),
    sc.GEN_AI_RESPONSE_MODEL: ("response_model", _str, ""),
    sc.GEN_AI_RESPONSE_ID: ("response_id", _text, ""),
    sc.SERVER_ADDRESS: ("server_address", _text, ""),
    sc.SERVER_PORT: ("server_port", _port, 0),
    sc.HTTP_ROUTE: ("route", _text, ""),
    sc.STREAMSCOPE_TRANSPORT: ("transport", _enum(sc.STREAMSCOPE_TRANSPORT_VALUES, ""), ""),
    sc.STREAMSCOPE_OUTCOME: ("outcome", _enum(sc.STREAMSCOPE_OUTCOME_VALUES, "completed"), "completed"),
    sc.ERROR_TYPE: ("error_type", _text, ""),
    sc.GEN_AI_RESPONSE_FINISH_REASONS: ("finish_reasons", _string_list, []),
    sc.STREAMSCOPE_NODE_NAME: ("node_name", _text, ""),
    sc.STREAMSCOPE_ENGINE_REQUEST_ID: ("engine_request_id", _text, ""),
    sc.GEN_AI_USAGE_INPUT_TOKENS: ("input_tokens", _count, None),
    sc.GEN_AI_USAGE_OUTPUT_TOKENS: ("output_tokens", _count, None),
    sc.STREAMSCOPE_TOKENS_ESTIMATED: ("tokens_estimated", _flag, False),
    sc.STREAMSCOPE_CANCEL_OFFSET_US: ("cancel_offset_us", _offset, None),
    sc.STREAMSCOPE_TOKENS_AFTER_CANCEL: ("tokens_after_cancel", _count, None),
    sc.STREAMSCOPE_REPETITION_SCORE: ("repetition_score", _float, None),
    sc.STREAMSCOPE_HOST_WATCH: ("host_watch", _enum(sc.STREAMSCOPE_HOST_WATCH_VALUES, ""), ""),
}
"""The streams column each attribute is read into, its reader (which may reject the span), and its value when the
attribute was not sent."""
_COLUMN_DEFAULTS = {column: default for column, _, default in _COLUMN_OF.values()}
"""Each of those columns when its attribute was not sent (never changed in place: rows share these values)."""
_ROW_DEFAULTS: dict[str, Any] = dict.fromkeys(
    ("tenant", "start_time", "duration_us", "trace_id", "span_id", "parent_span_id", "service", "side", "span_name")
) | {
    **_COLUMN_DEFAULTS,
    "encoding": "",
    "timeline_truncated": False,
    "first_tool_call_seq": None,
    "source": columns.SOURCE_STREAMSCOPE,
    "coverage": columns.COVERAGE_FULL,
    **columns.JSON_PROGRESS_UNKNOWN,
    **columns.NOTHING_RETRACTED,
    "resource_attributes": None,
    "attributes": None,
    "model": "",
}
"""Every key of a row from ``_row``, each set there or left at its default."""
