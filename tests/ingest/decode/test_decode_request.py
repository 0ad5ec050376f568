"""Known answers for what one request's spans share when decoded together: arrays some spans send and others do
not, and stream values taken from the span or from its chunks."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from streamscope import semconv as sc
from streamscope.int64_bytes import int64_bytes
from streamscope_ingest.blocks import columns
from streamscope_ingest.decode.limits import SpanLimits
from streamscope_ingest.decode.traces import decode_traces
from tests.support import T0, any_value, event_span, plain_stream_span, stream_span, trace_request


def _decoded(*spans):
    batch = decode_traces(trace_request(spans), tenant="t")
    assert not batch.rejected, batch.rejection_message("span")
    arrays = batch.blocks["chunk_arrays"]
    assert arrays.schema == columns.CHUNKS_DECODED
    per_chunk = [field.name for field in columns.CHUNKS_DECODED if pa.types.is_list(field.type)]
    return batch.blocks["streams"].to_pydict(), {
        name: columns.per_chunk(arrays, name).to_pylist() for name in per_chunk
    }


def test_a_streams_arrays_of_zeros_are_decoded_empty_as_the_store_keeps_them():
    """An array stored with a default is an empty list for a stream whose chunks are all zero there (migration 0036),
    so the spool and the insert carry nothing for it; a stream with one value keeps its array whole."""
    batch = decode_traces(
        trace_request(
            [
                stream_span(1, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1]),
                stream_span(2, 2, side="browser", offsets_ms=[5, 6], tokens=[1, 2], paint_delay_us=[0, 12]),
                stream_span(3, 3, side="browser", offsets_ms=[7], tokens=[1], paint_delay_us=[0]),
            ]
        ),
        tenant="t",
    )
    arrays = batch.blocks["chunk_arrays"]
    assert arrays["paint_delay_us"].to_pylist() == [[], [0, 12], []]
    assert arrays["render_us"].to_pylist() == [[], [], []]
    assert arrays["gap_us"].to_pylist() == [[10_000, 10_000], [5_000, 1_000], [7_000]]


def test_a_browser_array_one_span_sends_stays_with_its_chunks_and_the_others_read_zero():
    streams, chunks = _decoded(
        stream_span(1, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1]),
        stream_span(2, 2, side="browser", offsets_ms=[5, 6, 7], tokens=[1, 2, 3], paint_delay_us=[11, 12, 13]),
        stream_span(3, 3, side="server", offsets_ms=[1], tokens=[4], render_us=[99]),
    )
    assert chunks["paint_delay_us"] == [0, 0, 11, 12, 13, 0]
    assert chunks["render_us"] == [0, 0, 0, 0, 0, 99]
    assert chunks["tokens"] == [1, 1, 1, 2, 3, 4]
    assert streams["tokens"] == [2, 6, 4]


def test_the_first_byte_is_the_spans_own_offset_when_sent_else_its_first_chunk():
    streams, _ = _decoded(
        stream_span(1, 1, side="client", offsets_ms=[30, 40], tokens=[1, 1]),
        stream_span(
            2, 2, side="client", offsets_ms=[50, 60], tokens=[1, 1], attributes={sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US: 7}
        ),
        stream_span(3, 3, side="client", offsets_ms=[], tokens=[]),
    )
    assert streams["ttfb_us"] == [30_000, 7, None]


DAY_NS = 86_400 * 10**9


def test_spans_starting_more_days_apart_than_a_request_may_span_are_rejected_and_the_most_kept():
    """Each day is a partition; an insert touching more than the engine allows would be refused, and hold up the
    spool behind it. The days holding most of the request's spans are kept (the latest ones, on a tie)."""
    spread = [
        stream_span(100 + day, 1, side="browser", offsets_ms=[0], tokens=[1], start_ns=T0 - day * DAY_NS)
        for day in range(150)
    ]
    batch = decode_traces(trace_request(spread), tenant="t")
    assert len(batch.rejected) == 143
    assert "a request may span 7 days" in batch.rejection_message("span")
    assert sorted(batch.blocks["streams"]["trace_id"].to_pylist()) == [f"{100 + day:032x}" for day in range(7)]

    stray = stream_span(1, 1, side="client", offsets_ms=[0], tokens=[1], start_ns=T0 - 200 * DAY_NS)
    usual = [stream_span(2 + i, 1, side="client", offsets_ms=[0], tokens=[1], start_ns=T0 + i) for i in range(3)]
    batch = decode_traces(trace_request([*usual, stray]), tenant="t")
    assert [r.subject for r in batch.rejected] == [f"span {1:016x} of trace {1:032x}"]
    assert batch.blocks["streams"].num_rows == 3


def with_host_delay(span, host_delay_us, watch: str | None = "asyncio", as_bytes: bool = False):
    """``span`` with the host delays its emitter measured, as an array of int values or (as the SDK sends them)
    bytes, and the watch it named."""
    value = AnyValue(bytes_value=int64_bytes(host_delay_us)) if as_bytes else any_value(host_delay_us)
    span.attributes.append(KeyValue(key=sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US, value=value))
    if watch is not None:
        span.attributes.append(KeyValue(key=sc.STREAMSCOPE_HOST_WATCH, value=AnyValue(string_value=watch)))
    return span


def test_host_delays_stay_with_their_chunks_and_streams_without_them_read_zero_and_no_watch():
    streams, chunks = _decoded(
        stream_span(1, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1]),
        with_host_delay(
            stream_span(2, 2, side="client", offsets_ms=[300, 310, 700], tokens=[1, 1, 1]), [250_000, 0, 280_000]
        ),
        with_host_delay(stream_span(3, 3, side="client", offsets_ms=[5], tokens=[2]), [0], "thread", as_bytes=True),
        with_host_delay(stream_span(4, 4, side="browser", offsets_ms=[9], tokens=[2]), [7_000], "longtask"),
    )
    assert chunks["host_delay_us"] == [0, 0, 250_000, 0, 280_000, 0, 7_000]
    assert chunks["paint_delay_us"] == [0] * 7
    assert streams["host_watch"] == ["", "asyncio", "thread", "longtask"]
    assert sc.STREAMSCOPE_HOST_WATCH not in dict(streams["attributes"][1])  # a column, not an attribute


def test_host_delays_on_chunk_events_are_read_like_the_packed_array():
    def chunk(host_delay_us: int | None) -> dict[str, AnyValue]:
        values = {
            sc.STREAMSCOPE_CHUNK_TOKENS: AnyValue(int_value=1),
            sc.STREAMSCOPE_CHUNK_CONTENT_BYTES: AnyValue(int_value=4),
        }
        if host_delay_us is not None:
            values[sc.STREAMSCOPE_CHUNK_HOST_DELAY_US] = AnyValue(int_value=host_delay_us)
        return values

    span = event_span(5, [(400_000, sc.CHUNK_EVENT, chunk(350_000)), (410_000, sc.CHUNK_EVENT, chunk(None))])
    span.attributes.append(KeyValue(key=sc.STREAMSCOPE_HOST_WATCH, value=AnyValue(string_value="asyncio")))
    streams, chunks = _decoded(span)
    assert chunks["host_delay_us"] == [350_000, 0]
    assert streams["host_watch"] == ["asyncio"] and streams["encoding"] == ["events"]


@pytest.mark.parametrize(
    ("host_delay_us", "watch", "reason"),
    [
        (
            [1, 2],
            "asyncio",
            "chunk arrays of unequal length (offset_us 3, tokens 3, content_bytes 3, wire_bytes 3, host_delay_us 2)",
        ),
        ([1, 2, 3, 4], "asyncio", "unequal length"),
        ([0, -1, 0], "asyncio", f"{sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US} out of range 0..{2**32 - 1}"),
        ([0, 2**32, 0], "thread", f"{sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US} out of range 0..{2**32 - 1}"),
        ([0, 0, 0], "uvloop", f"{sc.STREAMSCOPE_HOST_WATCH} must be one of asyncio, thread, longtask"),
    ],
)
def test_a_malformed_host_delay_rejects_its_span_only(host_delay_us, watch, reason):
    """An array that does not fit its chunks is never stored shifted or cut: its span is refused with the reason
    (counted in partial_success), and the request's other spans are kept."""
    bad = with_host_delay(
        stream_span(7, 7, side="client", offsets_ms=[1, 2, 3], tokens=[1, 1, 1]), host_delay_us, watch
    )
    good = with_host_delay(stream_span(8, 8, side="client", offsets_ms=[1], tokens=[1]), [5], "thread")
    batch = decode_traces(trace_request([bad, good]), tenant="t")
    (rejection,) = batch.rejected
    assert reason in rejection.reason
    assert batch.blocks["streams"]["trace_id"].to_pylist() == [f"{8:032x}"]
    assert pc.list_flatten(batch.blocks["chunk_arrays"]["host_delay_us"]).to_pylist() == [5]


def test_a_string_over_the_limit_is_stored_cut_and_its_span_named_in_the_warning():
    long_model, long_note = "m" * 70_000, "n" * 65_537
    span = stream_span(
        7,
        9,
        side="client",
        offsets_ms=[10],
        tokens=[1],
        attributes={sc.GEN_AI_REQUEST_MODEL: long_model, "note": long_note},
    )
    batch = decode_traces(trace_request([span]), tenant="t")
    subject = f"span {(9).to_bytes(8, 'big').hex()} of trace {(7).to_bytes(16, 'big').hex()}"
    # the columns cut, then the attributes
    assert batch.warnings == [f"{subject}: request_model, model, note cut to 65536 characters"]
    streams = batch.blocks["streams"].to_pylist()
    assert streams[0]["request_model"] == long_model[:65_536]
    assert dict(streams[0]["attributes"])["note"] == long_note[:65_536]


@pytest.mark.parametrize(
    ("attributes", "name", "cut"),
    [
        ({}, "n" * 41, "span_name"),
        ({sc.GEN_AI_RESPONSE_ID: "i" * 41}, "s", "response_id"),
        ({"note": "n" * 41}, "s", "note"),
        ({"flags": [True] * 9}, "s", "flags"),  # stored as JSON, longer than the list's encoding
    ],
)
def test_any_one_string_over_the_limit_is_cut(attributes, name, cut):
    span = stream_span(7, 9, side="client", offsets_ms=[10], tokens=[1], attributes=attributes)
    span.name = name
    batch = decode_traces(trace_request([span]), tenant="t", limits=SpanLimits(max_string_length=40))
    assert batch.warnings == [f"{_subject(7, 9)}: {cut} cut to 40 characters"]


def test_strings_each_within_the_limit_are_kept_whole_however_long_together():
    notes = {f"note.{i}": str(i) * 40 for i in range(5)}
    span = stream_span(
        7, 9, side="client", offsets_ms=[10], tokens=[1], attributes={**notes, sc.GEN_AI_RESPONSE_ID: "i" * 40}
    )
    span.name = "n" * 40
    batch = decode_traces(trace_request([span]), tenant="t", limits=SpanLimits(max_string_length=40))
    assert batch.warnings == []
    stored = batch.blocks["streams"].to_pylist()[0]
    assert (stored["span_name"], stored["response_id"]) == ("n" * 40, "i" * 40)
    assert dict(stored["attributes"]) == notes


def _subject(trace: int, span: int) -> str:
    return f"span {span.to_bytes(8, 'big').hex()} of trace {trace.to_bytes(16, 'big').hex()}"


def as_bytes(span, *, only: int | None = None):
    """``span`` with its packed arrays (or only the ``only``-th of them) in the bytes form the SDKs send."""
    copy = type(span)()
    copy.CopyFrom(span)
    packed = [kv for kv in copy.attributes if kv.key in sc.PACKED_ARRAYS]
    for index, kv in enumerate(packed):
        if (only is None or index == only) and kv.value.HasField("array_value"):
            kv.value.CopyFrom(AnyValue(bytes_value=int64_bytes([v.int_value for v in kv.value.array_value.values])))
    return copy


def _both_forms(spans):
    """The request decoded with its arrays as int values (read span by span) and as bytes (read together)."""
    results = []
    for request_spans in (spans, [as_bytes(span) for span in spans]):
        batch = decode_traces(trace_request(request_spans), tenant="t")
        blocks = {name: block.to_pydict() for name, block in batch.blocks.items()}
        results.append((blocks, [(r.subject, r.reason) for r in batch.rejected]))
    return results


timeline = st.lists(st.tuples(st.integers(0, 900_000), st.integers(0, 9), st.integers(0, 40)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(timeline, min_size=1, max_size=6), st.booleans(), st.booleans())
def test_packed_arrays_sent_as_bytes_decode_as_the_same_arrays_sent_as_int_values(timelines, painted, reordered):
    """Also when every other span sends its attributes in the opposite order, which the bytes cannot be joined in."""
    spans = [
        stream_span(
            1 + i, 1, side="browser", offsets_ms=[w / 1000 for w in itertools.accumulate(w for w, _, _ in chunks)],
            tokens=[t for _, t, _ in chunks], content_bytes=[b for _, _, b in chunks],
            paint_delay_us=[7 * t for _, t, _ in chunks] if painted else None,
        )
        for i, chunks in enumerate(timelines)
    ]  # fmt: skip
    for span in spans[1::2] if reordered else ():
        span.attributes.reverse()
    as_ints, as_bytes_ = _both_forms(spans)
    assert as_bytes_ == as_ints
    assert not as_ints[1]


def test_a_bad_timeline_among_bytes_arrays_rejects_its_span_only():
    good = stream_span(1, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1])
    backwards = stream_span(2, 2, side="client", offsets_ms=[20, 10], tokens=[1, 1])
    short = stream_span(3, 3, side="client", offsets_ms=[10, 20], tokens=[1, 1])
    next(kv for kv in short.attributes if kv.key == sc.STREAMSCOPE_CHUNKS_TOKENS).value.array_value.values.pop()
    mixed = as_bytes(stream_span(4, 4, side="client", offsets_ms=[1, 2, 3], tokens=[1, 2, 3]), only=0)
    as_ints, as_bytes_ = _both_forms([good, backwards, short, mixed])
    assert as_bytes_ == as_ints
    assert [reason for _, reason in as_ints[1]] == [
        "chunk arrays of unequal length (offset_us 2, tokens 1, content_bytes 2, wire_bytes 2)",
        "chunk offsets are not in order",
    ]
    assert as_ints[0]["streams"]["trace_id"] == [f"{1:032x}", f"{4:032x}"]


def test_each_stream_keeps_the_attributes_of_its_own_resource():
    """Spans of two resources, interleaved with a resource that sends no attributes: each row holds its
    resource's map, however many spans share it."""
    spans = [plain_stream_span(span_byte, [10, 20]) for span_byte in range(1, 6)]
    first, second = trace_request(spans[:2], "checkout"), trace_request(spans[2:3], "")
    third = trace_request(spans[3:], "search")
    second.resource_spans[0].resource.Clear()
    first.resource_spans.extend([*second.resource_spans, *third.resource_spans])
    batch = decode_traces(first, tenant="t")
    streams = batch.blocks["streams"].to_pydict()
    assert streams["service"] == ["checkout", "checkout", "", "search", "search"]
    assert [dict(pairs) for pairs in streams["resource_attributes"]] == [
        {"service.name": "checkout"},
        {"service.name": "checkout"},
        {},
        {"service.name": "search"},
        {"service.name": "search"},
    ]
