"""A span's chunk events, read through a view that keeps each event attribute as its encoded bytes.

Chunk events repeat a handful of (key, value) pairs thousands of times: tokens 1 to 4, sizes in the tens or
hundreds. Read through OTLP's message classes, every attribute of every event costs Python objects for the
KeyValue, its key and its AnyValue, and a oneof check: two thirds of the collector's Python time with events.
Protobuf encodes an embedded message exactly as it encodes bytes, so a message type whose event attributes are
``bytes`` reads the same span. Each distinct encoding is then parsed once, and its repeats are a dictionary hit:
reading an events request costs a third less, re-encoding each span for the view included
(docs/benchmarks.md).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.descriptor_pb2 import FieldDescriptorProto
from google.protobuf.internal.containers import RepeatedCompositeFieldContainer
from google.protobuf.message import Message
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc

VALUE_ROWS = {name: row for row, name in enumerate(sc.CHUNK_EVENT_ATTRIBUTES)}
"""The row of each stored chunk-event attribute in the decoder's value arrays."""
NOT_STORED = -1
"""The row of an attribute that is not one of ``VALUE_ROWS``."""
_CAPACITY = 16_384
"""Distinct attribute encodings remembered; past it the memory starts over (a few MiB at most)."""


def _span_events_view() -> type[Message]:
    """``Span`` reduced to its events, each event's attributes left as bytes. Field numbers and types are read
    from opentelemetry-proto's own descriptors."""
    events = Span.DESCRIPTOR.fields_by_name["events"]
    event = Span.Event.DESCRIPTOR.fields_by_name
    file = descriptor_pb2.FileDescriptorProto(
        name="streamscope/span_events_view.proto", package="streamscope.view", syntax="proto3"
    )
    span_view = file.message_type.add(name="SpanEvents")
    span_view.field.add(
        name="events",
        number=events.number,
        type=FieldDescriptorProto.TYPE_MESSAGE,
        label=FieldDescriptorProto.LABEL_REPEATED,
        type_name=".streamscope.view.Event",
    )
    event_view = file.message_type.add(name="Event")
    for name in ("time_unix_nano", "name"):
        field = event[name]
        event_view.field.add(name=name, number=field.number, type=field.type, label=FieldDescriptorProto.LABEL_OPTIONAL)
    event_view.field.add(
        name="attributes",
        number=event["attributes"].number,
        type=FieldDescriptorProto.TYPE_BYTES,
        label=FieldDescriptorProto.LABEL_REPEATED,
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("streamscope.view.SpanEvents"))


_SpanEvents = _span_events_view()


def span_events(span: Span) -> RepeatedCompositeFieldContainer:
    """The span's events, each with ``time_unix_nano``, ``name`` and ``attributes`` (encoded KeyValues)."""
    return _SpanEvents.FromString(span.SerializeToString()).events


class _Attributes(dict[bytes, tuple[int, int | None]]):
    """Each encoded attribute, read once: its value row (``NOT_STORED`` for a key we do not store) and its integer
    (None when the value is not an integer). Looking one up is a plain dictionary subscript; only a miss runs
    Python. Safe across threads: a miss read twice stores the same answer twice."""

    def __missing__(self, encoded: bytes) -> tuple[int, int | None]:
        if len(self) >= _CAPACITY:
            self.clear()
        attribute = KeyValue.FromString(encoded)
        value = attribute.value
        read = (
            VALUE_ROWS.get(attribute.key, NOT_STORED),
            value.int_value if value.WhichOneof("value") == "int_value" else None,
        )
        self[encoded] = read
        return read


CHUNK_ATTRIBUTES = _Attributes()
"""``CHUNK_ATTRIBUTES[encoded]``: the row and integer of an encoded chunk-event attribute."""
