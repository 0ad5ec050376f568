"""Chunk events read as encoded bytes come out as OTLP's own message classes read them, whatever the order or
repetition of their fields, and the memory of event tails is bounded."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from streamscope import semconv as sc
from streamscope_ingest.decode.chunk_events import (
    TAILS,
    VALUE_ROWS,
    ChunkEventRejected,
    TraceRequestView,
    as_trace_view,
    chunk_events,
)

VALUES = st.one_of(
    st.integers(-(2**63), 2**63 - 1).map(lambda n: AnyValue(int_value=n)),
    st.integers(0, 3).map(lambda n: AnyValue(int_value=n)),  # the repeats the memory is for
    st.text(max_size=3).map(lambda s: AnyValue(string_value=s)),
    st.floats(allow_nan=False).map(lambda x: AnyValue(double_value=x)),
    st.just(AnyValue()),
)
ATTRIBUTES = st.lists(
    st.builds(KeyValue, key=st.sampled_from([*sc.CHUNK_EVENT_ATTRIBUTES, "other", ""]), value=VALUES), max_size=6
)
TIMES = st.one_of(st.integers(0, 2**64 - 1), st.just(0))  # a zero time is not encoded
NAMES = st.sampled_from([sc.CHUNK_EVENT, sc.CHUNK_EVENT, "log", ""])
EVENTS = st.lists(
    st.builds(
        Span.Event, time_unix_nano=TIMES, name=NAMES, attributes=ATTRIBUTES, dropped_attributes_count=st.integers(0, 3)
    ),
    max_size=12,
)
FIELDS = st.one_of(
    TIMES.map(lambda t: b"\x09" + t.to_bytes(8, "little")),  # written even when zero
    NAMES.map(lambda name: Span.Event(name=name).SerializeToString()),
    ATTRIBUTES.map(lambda attributes: Span.Event(attributes=attributes).SerializeToString()),
    st.integers(0, 3).map(lambda n: Span.Event(dropped_attributes_count=n).SerializeToString()),
    st.sampled_from([b"\xff", b"\x09\x01", b"\x1a\x05"]),  # not protobuf, a time cut short, a length past the end
)
ENCODED_EVENTS = st.lists(st.lists(FIELDS, max_size=6).map(b"".join), max_size=8)
"""Events as any encoder might write them: their fields in any order, some twice (the last one counts)."""


def read_with_otlp_classes(events: list[Span.Event]) -> tuple[list[int], list[list[int]]] | str:
    """Each chunk event's time and values, or the refusal, read field by field from OTLP's classes."""
    times, values = [], []
    for event in events:
        if event.name != sc.CHUNK_EVENT:
            continue
        row_values = [0] * len(VALUE_ROWS)
        for kv in event.attributes:
            if kv.key in VALUE_ROWS:
                if not kv.value.HasField("int_value"):
                    return f"chunk event {len(times)}: {kv.key} must be an integer"
                row_values[VALUE_ROWS[kv.key]] = kv.value.int_value
        times.append(event.time_unix_nano)
        values.append(row_values)
    return times, values


def in_request(span: Span) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest(
        resource_spans=[ResourceSpans(resource=Resource(), scope_spans=[ScopeSpans(spans=[span])])]
    )


def read_as_bytes(span) -> tuple[list[int], list[list[int]]] | str:
    try:
        times, values = chunk_events(span)
    except ChunkEventRejected as exc:
        return str(exc)
    assert times.dtype == np.uint64 and values.shape == (len(VALUE_ROWS), times.size)
    return times.tolist(), values.T.tolist()


def viewed(span: Span):
    """``span`` as the collector reads it: one span of a ``TraceRequestView``."""
    return as_trace_view(in_request(span)).resource_spans[0].scope_spans[0].spans[0]


@settings(max_examples=400, deadline=None)
@given(EVENTS, st.text(max_size=4))
def test_events_read_as_bytes_read_as_otlp_classes_read_them(events, name):
    span = Span(name=name, trace_id=b"\1" * 16, span_id=b"\2" * 8, events=events)
    span.attributes.add(key="k", value=AnyValue(int_value=7))
    assert read_as_bytes(viewed(span)) == read_with_otlp_classes(list(span.events))


@settings(max_examples=400, deadline=None)
@given(ENCODED_EVENTS)
def test_events_in_any_field_order_read_as_otlp_classes_read_them(encoded):
    request = TraceRequestView()
    span = request.resource_spans.add().scope_spans.add().spans.add(name="s")
    span.events.extend(encoded)
    parsed = []
    for index, event in enumerate(encoded):
        try:
            parsed.append(Span.Event.FromString(event))
        except Exception:
            assert read_as_bytes(span) == f"event {index} is not a valid OTLP Span.Event"
            return
    assert read_as_bytes(span) == read_with_otlp_classes(parsed)


def test_the_view_parses_what_otlp_classes_parse_and_encodes_it_back_the_same():
    span = Span(name="s", trace_id=b"\1" * 16, events=[chunk_event(7, 3), Span.Event(name="log")])
    span.attributes.add(key="k", value=AnyValue(int_value=7))
    body = in_request(span).SerializeToString()
    view = TraceRequestView.FromString(body)
    assert view.resource_spans[0].scope_spans[0].spans[0].name == "s"
    assert view.SerializeToString() == body
    assert [Span.Event.FromString(e) for e in view.resource_spans[0].scope_spans[0].spans[0].events] == list(
        span.events
    )


def chunk_event(time_unix_nano: int, content_bytes: int) -> Span.Event:
    return Span.Event(
        time_unix_nano=time_unix_nano,
        name=sc.CHUNK_EVENT,
        attributes=[KeyValue(key=sc.STREAMSCOPE_CHUNK_CONTENT_BYTES, value=AnyValue(int_value=content_bytes))],
    )


def values_row(**values: int) -> list[int]:
    """A chunk event's row of values: those given (by attribute name after ``streamscope.chunk.``), 0 elsewhere."""
    row = [0] * len(VALUE_ROWS)
    for name, value in values.items():
        row[VALUE_ROWS[f"streamscope.chunk.{name}"]] = value
    return row


def test_an_event_without_a_time_is_read_whole_with_the_others():
    span = Span(events=[chunk_event(5, 3), chunk_event(0, 4), Span.Event(name="log"), chunk_event(2**64 - 1, 3)])
    rows = [values_row(content_bytes=n) for n in (3, 4, 3)]
    assert read_as_bytes(viewed(span)) == ([5, 0, 2**64 - 1], rows)


def test_the_host_delay_is_read_in_its_own_row():
    event = chunk_event(9, 4)
    event.attributes.add(key=sc.STREAMSCOPE_CHUNK_HOST_DELAY_US, value=AnyValue(int_value=250_000))
    span = Span(events=[event, chunk_event(10, 5)])
    rows = [values_row(content_bytes=4, host_delay_us=250_000), values_row(content_bytes=5)]
    assert read_as_bytes(viewed(span)) == ([9, 10], rows)


def test_a_time_sent_twice_counts_as_the_last_one_even_when_it_is_zero():
    first, last = (b"\x09" + t.to_bytes(8, "little") for t in (5, 0))
    encoded = first + chunk_event(0, 3).SerializeToString() + last
    request = TraceRequestView()
    request.resource_spans.add().scope_spans.add().spans.add(events=[encoded])
    span = request.resource_spans[0].scope_spans[0].spans[0]
    assert Span.Event.FromString(encoded).time_unix_nano == 0
    assert read_as_bytes(span) == ([0], [values_row(content_bytes=3)])


def test_a_refused_chunk_event_is_counted_among_chunk_events_only():
    bad = Span.Event(
        time_unix_nano=9,
        name=sc.CHUNK_EVENT,
        attributes=[KeyValue(key=sc.STREAMSCOPE_CHUNK_TOKENS, value=AnyValue(double_value=1.5))],
    )
    span = Span(events=[Span.Event(name="log", time_unix_nano=1), chunk_event(2, 1), bad])
    with pytest.raises(ChunkEventRejected, match=f"chunk event 1: {sc.STREAMSCOPE_CHUNK_TOKENS} must be an integer"):
        chunk_events(viewed(span))


def test_its_memory_starts_over_when_full_and_reads_on(monkeypatch):
    monkeypatch.setattr(TAILS, "capacity", 5)
    span = Span(events=[chunk_event(n + 1, n % 17) for n in range(100)])
    assert read_as_bytes(viewed(span)) == read_with_otlp_classes(list(span.events))
    assert 0 < len(TAILS) <= 5
