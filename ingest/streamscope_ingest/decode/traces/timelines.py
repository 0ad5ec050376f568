"""A stream span's chunk timeline from its packed arrays or its chunk events, decoded for a whole request at once,
and checked: a timeline the store could not hold, or that contradicts itself, rejects its span alone."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain
from typing import NamedTuple

import numpy as np
from google.protobuf.message import Message
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_ingest.blocks.batch import Rejection
from streamscope_ingest.decode.chunk_events import ChunkEventRejected, chunk_events
from streamscope_ingest.decode.int_arrays import INT64_BYTES, NotAnIntArray, PackedArray, decode_int_arrays, int64s
from streamscope_ingest.decode.limits import LATEST_OFFSET_US
from streamscope_ingest.decode.retractions import over_withdrawn
from streamscope_ingest.decode.traces.rows import U32_MAX, SpanRejected, Stream

_LIMITS = {  # largest value each per-chunk column can store
    sc.STREAMSCOPE_CHUNKS_TOKENS: np.iinfo(np.uint16).max,
    sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_WIRE_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RENDER_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES: np.iinfo(np.uint32).max,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS: np.iinfo(np.uint16).max,
}
_OPTIONAL_ARRAYS = (
    sc.STREAMSCOPE_CHUNKS_WIRE_BYTES,
    sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US,
    sc.STREAMSCOPE_CHUNKS_RENDER_US,
    sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_US,
    sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES,
    sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS,
)
"""Recommended, not required: a missing array is all zeros, which means not measured."""
_REQUIRED_ARRAYS = frozenset(sc.PACKED_ARRAYS) - frozenset(_OPTIONAL_ARRAYS)
_TOO_LATE = f"a chunk offset past {LATEST_OFFSET_US} µs, a week after the span's start"


def with_required_arrays(arrays: dict[str, PackedArray]) -> dict[str, PackedArray]:
    if not arrays.keys() >= _REQUIRED_ARRAYS:
        missing = [name for name in sc.PACKED_ARRAYS if name in _REQUIRED_ARRAYS and name not in arrays]
        raise SpanRejected(f"packed encoding without {missing[0]}")
    return arrays


def _packed_arrays(
    decoded: list[np.ndarray | NotAnIntArray | None],
) -> tuple[np.ndarray, list[np.ndarray | None]]:
    """A span's decoded packed arrays as offsets and a row per other array (None: an optional one not sent)."""
    arrays: list[np.ndarray | None] = []
    for name, array in zip(sc.PACKED_ARRAYS, decoded, strict=True):
        if isinstance(array, NotAnIntArray):
            raise SpanRejected(f"{name}: {array}")
        arrays.append(array)
    sent = {name: array for name, array in zip(sc.PACKED_ARRAYS, arrays) if array is not None}
    if len({len(array) for array in sent.values()}) > 1:
        sizes = ", ".join(f"{name.rsplit('.', 1)[1]} {len(array)}" for name, array in sent.items())
        raise SpanRejected(f"chunk arrays of unequal length ({sizes})")
    offsets, *rows = arrays
    assert offsets is not None
    return offsets, rows


def with_timelines(streams: list[Stream], rejected: list[Rejection]) -> tuple[list[Stream], Timelines]:
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
        except SpanRejected as exc:
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


def _packed_together(streams: list[Stream]) -> Timelines | None:
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
    return Timelines(counts, rows[sc.STREAMSCOPE_CHUNKS_OFFSET_US].astype(np.int64, copy=False), values)


def event_arrays(span: Message) -> tuple[np.ndarray, np.ndarray]:
    """The span's chunk events as offsets and value rows, in time order."""
    try:
        time_ns, values = chunk_events(span)
    except ChunkEventRejected as exc:
        raise SpanRejected(str(exc)) from None
    order = np.argsort(time_ns, kind="stable")
    time_ns = time_ns[order]
    if time_ns.size and int(time_ns[0]) < span.start_time_unix_nano:
        raise SpanRejected("negative chunk offset: a chunk event precedes the span start")
    offsets = ((time_ns - np.uint64(span.start_time_unix_nano)) // np.uint64(1000)).astype(np.int64)
    return offsets, values[:, order]


def unreadable_events(span: Message, values: np.ndarray) -> str | None:
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


class Timelines(NamedTuple):
    """Chunk counts per stream, and every stream's offsets and value rows one after another."""

    lengths: np.ndarray
    offsets: np.ndarray
    values: list[np.ndarray | None]
    """One row per packed array after the offsets; None for an array no stream sent (all zeros), which costs no
    memory and no pass."""


def _concatenated(streams: list[Stream]) -> Timelines:
    lengths = np.fromiter((s.chunk_count for s in streams), dtype=np.int64, count=len(streams))
    offsets = np.concatenate([s.offsets for s in streams]) if streams else np.empty(0, dtype=np.int64)
    values: list[np.ndarray | None] = []
    for index in range(len(sc.PACKED_ARRAYS) - 1):  # row by row: each stream's rows are separate arrays
        pieces = [s.values[index] if s.values is not None else None for s in streams]
        sent = any(piece is not None for piece in pieces)
        values.append(
            np.concatenate([or_zeros(p, s.chunk_count) for s, p in zip(streams, pieces, strict=True)]).astype(
                np.int64, copy=False
            )
            if sent
            else None
        )
    return Timelines(lengths, offsets, values)


def _all_valid(timelines: Timelines) -> bool:
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
        and (tokens is None or np.add.reduceat(tokens, starts[lengths > 0]).max() <= U32_MAX)
        and not (
            retracted is not None
            and retracted.any()
            and over_withdrawn(lengths, or_zeros(content, offsets.size), retracted).any()
        )
    )


def or_zeros(row: np.ndarray | None, size: int) -> np.ndarray:
    """A value row, or the zeros an array not sent stands for."""
    return np.zeros(size, np.int64) if row is None else row


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
    if tokens is not None and int(tokens.sum()) > U32_MAX:
        return f"the stream's tokens add up to more than {U32_MAX}"
    content, retracted = values[_CONTENT_ROW], values[_RETRACTED_ROW]
    # (content is a required array, never None; the check is for the type)
    if (
        retracted is not None
        and content is not None
        and over_withdrawn(np.array([offsets.size]), content, retracted)[0]
    ):
        return f"a chunk withdraws more content than was shown before it ({sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES})"
    return None
