"""A span's chunk events, read as encoded bytes: each event's time sliced out, the rest parsed once per encoding.

Chunk events differ in their time and repeat everything else: the name and a handful of integers, tokens 1 to 4,
sizes in the tens or hundreds. Read through OTLP's message classes, every attribute of every event costs Python
objects for its KeyValue, key and AnyValue: most of the collector's Python time with events. Protobuf encodes an
embedded message exactly as it encodes bytes, so the collector parses trace requests as ``TraceRequestView``:
OTLP's own messages, except that a span's events and attributes are left as bytes, parsed only for stream spans
(the attributes: ``streamscope_ingest.decode.attributes``).

Encoders write known fields in field-number order, as protobuf's own implementations do, so an event with a time
starts with it: a tag byte and eight little-endian bytes, read for all of a span's events at once
by numpy. The rest of the event, its tail, is parsed with OTLP's class the first time it is seen and remembered;
its repeats are a dictionary hit. When an event does not start so (a zero time is not written; an encoder may
order fields otherwise), or sends its time again in the tail, the span's events are parsed whole. Either way
they read as OTLP's classes read them. The costs are in docs/benchmarks.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_ingest.decode.remembered import Remembered

VALUE_ROWS = {name: row for row, name in enumerate(sc.CHUNK_EVENT_ATTRIBUTES)}
"""The row of each stored chunk-event attribute in the value arrays."""
_CAPACITY = 16_384
"""Distinct event tails remembered; past it the memory starts over (a few MiB at most)."""
_TIME_TAG = (Span.Event.DESCRIPTOR.fields_by_name["time_unix_nano"].number << 3) | 1
"""The first byte of an event that starts with its time: the field's number and wire type 1 (fixed64)."""
_STAMP = np.dtype([("tag", "u1"), ("time", "<u8")])

_Read = bytes | str | None
"""What an event's tail says: a chunk event's values by ``VALUE_ROWS`` as int64 bytes (a span's join into one
array at once), why a chunk event is refused, or None for any other event."""


class ChunkEventRejected(ValueError):
    """An event that is not a valid ``Span.Event``, or a chunk event whose stored attribute is not an integer."""


def _views() -> tuple[type[Message], type[Message]]:
    """``ExportTraceServiceRequest`` from opentelemetry-proto's own descriptors with ``Span.events`` and
    ``Span.attributes`` retyped bytes, and ``Span.Event`` with a time that tells whether it was sent (to read a
    tail)."""
    pool = descriptor_pool.DescriptorPool()
    for module in (common_pb2, resource_pb2, trace_pb2, trace_service_pb2):
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        file.ClearField("service")
        for message in file.message_type:
            if message.name == Span.DESCRIPTOR.name:
                for field in message.field:
                    if field.name in ("events", "attributes"):
                        field.type = FieldDescriptorProto.TYPE_BYTES
                        field.ClearField("type_name")
                tail = message.nested_type.add()
                tail.CopyFrom(next(nested for nested in message.nested_type if nested.name == "Event"))
                tail.name = "EventTail"
                tail.oneof_decl.add(name="_time_unix_nano")
                time = next(field for field in tail.field if field.name == "time_unix_nano")
                time.proto3_optional, time.oneof_index = True, 0
        pool.Add(file)
    request = pool.FindMessageTypeByName(trace_service_pb2.ExportTraceServiceRequest.DESCRIPTOR.full_name)
    tail = pool.FindMessageTypeByName(f"{Span.DESCRIPTOR.full_name}.EventTail")
    return message_factory.GetMessageClass(request), message_factory.GetMessageClass(tail)


TraceRequestView, _EventTail = _views()
"""``TraceRequestView``: what the collector parses trace requests as, protobuf bodies and gRPC messages directly,
JSON through ``as_trace_view``. Its spans read as OTLP's do, except ``events`` and ``attributes``: each one's
encoding."""


def as_trace_view(request: Message) -> Message:
    """``request`` (an ``ExportTraceServiceRequest`` or already its view) as a ``TraceRequestView``."""
    if isinstance(request, TraceRequestView):
        return request
    return TraceRequestView.FromString(request.SerializeToString())


def _read(event: Message) -> _Read:
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


class _TimeInTail:
    """The read of a tail that sends a time again: the last one counts, so the event is parsed whole."""


_TIME_IN_TAIL = _TimeInTail()


def _read_tail(tail: bytes) -> _Read | _TimeInTail:
    event = _parsed(tail, _EventTail)
    return _TIME_IN_TAIL if event.HasField("time_unix_nano") else _read(event)


TAILS: Remembered[bytes, _Read | _TimeInTail] = Remembered(_read_tail, _CAPACITY)
"""``TAILS[tail]``: what an encoded event without its leading time says."""


def chunk_events(span: Message) -> tuple[np.ndarray, np.ndarray]:
    """Each chunk event's time (ns) and values (one row per ``VALUE_ROWS``, 0 where absent), in the span's order;
    ``span`` is one of a ``TraceRequestView``.

    Raises ChunkEventRejected for an event that is not a valid ``Span.Event``, or a chunk event with a stored
    attribute that is not an integer."""
    encoded = list(span.events)  # each access to a repeated bytes field makes a new bytes object
    try:
        times, reads = _stamped(encoded) or _parsed_whole(encoded)
        kinds = set(map(type, reads))
        if _TimeInTail in kinds:
            times, reads = _parsed_whole(encoded)
            kinds = set(map(type, reads))
    except _Undecodable:
        index = next(i for i, event in enumerate(encoded) if not _decodes(event))
        raise ChunkEventRejected(f"event {index} is not a valid OTLP Span.Event") from None
    if kinds - {bytes}:
        chunks = [i for i, read in enumerate(reads) if read is not None]
        for index, i in enumerate(chunks):
            read = reads[i]
            if isinstance(read, str):
                raise ChunkEventRejected(f"chunk event {index}: {read}")
        times, reads = times[chunks], [reads[i] for i in chunks]
    values = np.frombuffer(b"".join(cast("list[bytes]", reads)), dtype=np.int64).reshape(len(reads), len(VALUE_ROWS)).T
    return np.asarray(times, dtype=np.uint64), values


def _stamped(encoded: Sequence[bytes]) -> tuple[np.ndarray, list[_Read | _TimeInTail]] | None:
    """Each event's time, sliced from its start, and its tail's read; None unless every event starts with its
    time. A tail that sends the time again reads ``_TIME_IN_TAIL``."""
    stamp_size = _STAMP.itemsize
    stamps = b"".join([event[:stamp_size] for event in encoded])
    if len(stamps) != stamp_size * len(encoded):
        return None
    stamped = np.frombuffer(stamps, _STAMP)
    if not bool((stamped["tag"] == _TIME_TAG).all()):
        return None
    return stamped["time"], [TAILS[event[stamp_size:]] for event in encoded]


def _parsed_whole(encoded: Sequence[bytes]) -> tuple[np.ndarray, list[_Read]]:
    events = [_parsed(event, Span.Event) for event in encoded]
    return np.array([event.time_unix_nano for event in events], dtype=np.uint64), [_read(e) for e in events]


class _Undecodable(Exception):
    pass


def _parsed(encoded: bytes, message_type: type[Message]) -> Message:
    try:
        return message_type.FromString(encoded)
    except (DecodeError, RuntimeError, ValueError):
        raise _Undecodable from None


def _decodes(encoded: bytes) -> bool:
    try:
        _parsed(encoded, Span.Event)
    except _Undecodable:
        return False
    return True
