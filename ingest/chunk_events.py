"""A span's chunk events, read as encoded bytes: each event's time sliced out, the rest parsed once per encoding.

Chunk events differ in their time and repeat everything else: the name and a handful of integers, tokens 1 to 4,
sizes in the tens or hundreds. Read through OTLP's message classes, every attribute of every event costs Python
objects for its KeyValue, key and AnyValue: most of the collector's Python time with events. Protobuf encodes an
embedded message exactly as it encodes bytes, so a message type whose events are ``bytes`` reads the same span,
one bytes object per event. upb writes an event's fields in field-number order, so a re-encoded event with a
time starts with it: a tag byte and eight little-endian bytes, read for all events at once by numpy. The rest of
the event, its tail, is parsed with OTLP's class the first time it is seen and remembered; its repeats are a
dictionary hit. An event that does not start so (a zero time is not written) is parsed whole. The costs are in
docs/benchmarks.md.
"""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto
from google.protobuf.message import Message
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc

VALUE_ROWS = {name: row for row, name in enumerate(sc.CHUNK_EVENT_ATTRIBUTES)}
"""The row of each stored chunk-event attribute in the value arrays."""
_CAPACITY = 16_384
"""Distinct event tails remembered; past it the memory starts over (a few MiB at most)."""
_TIME_TAG = (Span.Event.DESCRIPTOR.fields_by_name["time_unix_nano"].number << 3) | 1
"""The first byte of an event that starts with its time: the field's number and wire type 1 (fixed64)."""
_STAMP = np.dtype([("tag", "u1"), ("time", "<u8")])

_Read = bytes | str | None
"""What an event's tail says: a chunk event's values by ``VALUE_ROWS`` as int64 bytes (a request's join into one
array at once), why a chunk event is refused, or None for any other event."""


class ChunkEventRejected(ValueError):
    """A chunk event whose stored attribute is not an integer."""


def _span_events_view() -> type[Message]:
    """``Span`` reduced to its events, each left as bytes. The field number is opentelemetry-proto's own."""
    file = descriptor_pb2.FileDescriptorProto(
        name="streamscope/span_events_view.proto", package="streamscope.view", syntax="proto3"
    )
    file.message_type.add(name="SpanEvents").field.add(
        name="events",
        number=Span.DESCRIPTOR.fields_by_name["events"].number,
        type=FieldDescriptorProto.TYPE_BYTES,
        label=FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("streamscope.view.SpanEvents"))


_SpanEvents = _span_events_view()


def _read(event: Span.Event) -> _Read:
    if event.name != sc.CHUNK_EVENT:
        return None
    values = [0] * len(VALUE_ROWS)
    for attribute in event.attributes:
        row = VALUE_ROWS.get(attribute.key)
        if row is None:
            continue
        if attribute.value.WhichOneof("value") != "int_value":
            return f"{attribute.key} must be an integer"
        values[row] = attribute.value.int_value
    return np.array(values, dtype=np.int64).tobytes()


class _Tails(dict[bytes, _Read]):
    """Each event tail, read once. Looking one up is a plain dictionary subscript; only a miss runs Python. Safe
    across threads: a tail read twice stores the same answer twice."""

    def __missing__(self, tail: bytes) -> _Read:
        if len(self) >= _CAPACITY:
            self.clear()
        read = self[tail] = _read(Span.Event.FromString(tail))
        return read


TAILS = _Tails()
"""``TAILS[tail]``: what an encoded event without its leading time says."""


def chunk_events(span: Span) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk event's time (ns) and values (one row per ``VALUE_ROWS``, 0 where absent), in the span's order.

    Raises ChunkEventRejected for a chunk event with a stored attribute that is not an integer."""
    encoded = _SpanEvents.FromString(span.SerializeToString()).events
    stamp_size = _STAMP.itemsize
    stamps = b"".join([event[:stamp_size] for event in encoded])
    stamped = np.frombuffer(stamps, _STAMP) if len(stamps) == stamp_size * len(encoded) else None
    if stamped is not None and bool((stamped["tag"] == _TIME_TAG).all()):
        times = stamped["time"]
        reads: list[_Read] = [TAILS[event[stamp_size:]] for event in encoded]
    else:
        events = [Span.Event.FromString(event) for event in encoded]
        times = np.array([event.time_unix_nano for event in events], dtype=np.uint64)
        reads = [_read(event) for event in events]
    if set(map(type, reads)) - {bytes}:
        chunks = [i for i, read in enumerate(reads) if read is not None]
        for index, i in enumerate(chunks):
            if isinstance(reads[i], str):
                raise ChunkEventRejected(f"chunk event {index}: {reads[i]}")
        times, reads = times[chunks], [reads[i] for i in chunks]
    values = np.frombuffer(b"".join(reads), dtype=np.int64).reshape(len(reads), len(VALUE_ROWS)).T
    return np.asarray(times, dtype=np.uint64), values
