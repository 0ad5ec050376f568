"""The chunk-event view reads every span as OTLP's own message classes do, and its memory of encodings is bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

import ingest.chunk_events as chunk_events
from ingest.chunk_events import CHUNK_ATTRIBUTES, NOT_STORED, VALUE_ROWS, span_events
from streamscope import semconv as sc

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
EVENTS = st.lists(
    st.builds(
        Span.Event,
        time_unix_nano=st.integers(0, 2**64 - 1),
        name=st.sampled_from([sc.CHUNK_EVENT, "log", ""]),
        attributes=ATTRIBUTES,
        dropped_attributes_count=st.integers(0, 3),
    ),
    max_size=12,
)


def read_with_otlp_classes(span: Span) -> list[tuple[int, str, list[tuple[int, int | None]]]]:
    """Each event's time, name, and (row, integer or None) per attribute, read field by field from OTLP's classes."""
    return [
        (
            event.time_unix_nano,
            event.name,
            [
                (
                    VALUE_ROWS.get(kv.key, NOT_STORED),
                    kv.value.int_value if kv.value.HasField("int_value") else None,
                )
                for kv in event.attributes
            ],
        )
        for event in span.events
    ]


def read_with_view(span: Span) -> list[tuple[int, str, list[tuple[int, int | None]]]]:
    return [
        (event.time_unix_nano, event.name, [CHUNK_ATTRIBUTES[encoded] for encoded in event.attributes])
        for event in span_events(span)
    ]


@settings(max_examples=300, deadline=None)
@given(EVENTS, st.text(max_size=4))
def test_the_view_reads_what_otlp_classes_read(events, name):
    span = Span(name=name, trace_id=b"\1" * 16, span_id=b"\2" * 8, events=events)
    span.attributes.add(key="k", value=AnyValue(int_value=7))
    assert read_with_view(span) == read_with_otlp_classes(span)


def test_its_memory_starts_over_when_full_and_reads_on(monkeypatch):
    monkeypatch.setattr(chunk_events, "_CAPACITY", 5)
    events = [
        Span.Event(
            time_unix_nano=n,
            name=sc.CHUNK_EVENT,
            attributes=[KeyValue(key=sc.STREAMSCOPE_CHUNK_CONTENT_BYTES, value=AnyValue(int_value=n % 17))],
        )
        for n in range(100)
    ]
    span = Span(events=events)
    assert read_with_view(span) == read_with_otlp_classes(span)
    assert 0 < len(CHUNK_ATTRIBUTES) <= 5
