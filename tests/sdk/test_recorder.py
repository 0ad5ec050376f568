from __future__ import annotations

import gc
import sys
import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import streamscope
import streamscope._internal.recorder as recorder_module
from streamscope import StreamRecorder
from streamscope import semconv as sc
from streamscope._internal import host_watch, instruments
from tests.clock import FakeClock
from tests.support import int64s, memory_provider


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(recorder_module, "time", fake)
    return fake


@pytest.fixture
def spans():
    return memory_provider()


def test_semconv_streaming_histograms_with_their_buckets(clock, spans):
    provider, _ = spans
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    recorder = StreamRecorder(
        side="client", provider="openai", request_model="m", tracer_provider=provider, meter_provider=meters
    ).start()
    clock.advance_us(5_000)
    recorder.chunk(0, 0, 50)  # role chunk: no content
    for wait in (300_000, 20_000, 30_000, 900_000):
        clock.advance_us(wait)
        recorder.chunk(1, 4, 90)
    recorder.finish()
    assert streamscope.flush_metrics()  # recorded on a thread of their own
    points = {
        m.name: m.data.data_points[0]
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
    }
    first, per_chunk = points[instruments.TIME_TO_FIRST_CHUNK], points[instruments.TIME_PER_OUTPUT_CHUNK]
    assert list(first.explicit_bounds) == list(instruments.DURATION_BUCKETS)
    assert (first.count, first.sum) == (1, pytest.approx(0.305))
    assert (per_chunk.count, per_chunk.sum) == (3, pytest.approx(0.95))
    assert dict(first.attributes) == {
        sc.GEN_AI_OPERATION_NAME: "chat",
        sc.GEN_AI_PROVIDER_NAME: "openai",
        sc.GEN_AI_REQUEST_MODEL: "m",
    }


def test_span_carries_the_packed_timeline_and_stream_facts(clock, spans):
    provider, exporter = spans
    with StreamRecorder(side="client", provider="anthropic", request_model="c", tracer_provider=provider) as rec:
        clock.advance_us(1_000)
        rec.first_byte()
        clock.advance_us(2_000)
        rec.chunk(2, 7, 100, text="hello")
    (span,) = exporter.get_finished_spans()
    attributes = span.attributes
    assert span.name == "chat c"
    assert int64s(attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US]) == [3_000]
    assert int64s(attributes[sc.STREAMSCOPE_CHUNKS_TOKENS]) == [2]
    assert attributes[sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US] == 1_000
    assert attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(0.003)
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
    assert span.end_time - span.start_time == 3_000_000


def test_an_exception_inside_is_an_error_outcome_and_propagates(clock, spans):
    provider, exporter = spans
    with pytest.raises(KeyError), StreamRecorder(side="client", provider="p", tracer_provider=provider):
        raise KeyError("boom")
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_OUTCOME] == "error"
    assert span.attributes[sc.ERROR_TYPE] == "KeyError"


def test_recorder_never_raises_into_the_application(clock, caplog):
    class BrokenProvider(TracerProvider):
        def get_tracer(self, *args, **kwargs):
            raise RuntimeError("exporter misconfigured")

    with StreamRecorder(side="client", provider="p", tracer_provider=BrokenProvider()) as recorder:
        recorder.chunk(1, 1, 1)
        recorder.inject({})
    assert "streams are not recorded" in caplog.text


def test_chunks_past_the_cap_are_counted_not_kept(clock, spans, monkeypatch):
    monkeypatch.setattr(recorder_module, "MAX_CHUNKS", 3)
    provider, exporter = spans
    with StreamRecorder(side="server", provider="p", tracer_provider=provider) as rec:
        for i in range(5):
            rec.chunk(1, 1, 1, tool_call=i == 4)
    (span,) = exporter.get_finished_spans()
    assert len(int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) == 3
    assert span.attributes[sc.STREAMSCOPE_CHUNKS_DROPPED] == 2
    assert sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK not in span.attributes  # its chunk was not kept


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_the_first_tool_call_chunk_is_the_one_remembered(clock, spans, encoding):
    provider, exporter = spans
    with StreamRecorder(side="client", provider="p", encoding=encoding, tracer_provider=provider) as rec:
        rec.chunk(0, 0, 10)  # role
        rec.chunk(1, 5, 40, text="Let me")
        clock.advance_us(400_000)
        rec.chunk(0, 0, 60, tool_call=True)  # the call's name
        rec.chunk(2, 9, 50, text='{"city":', tool_call=True)
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] == 2


def test_a_stream_without_a_tool_call_has_no_tool_call_attribute(clock, spans):
    provider, exporter = spans
    with StreamRecorder(side="client", provider="p", tracer_provider=provider) as rec:
        rec.chunk(1, 5, 40)
    (span,) = exporter.get_finished_spans()
    assert sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK not in span.attributes


def test_repetition_score_flags_loops():
    prose = "streams of tokens reach the reader one by one and each pause between them is felt " * 1
    prose += "differently depending on where in the answer it lands and what the reader expected next"
    assert recorder_module.repetition_score(prose) < 0.1
    assert recorder_module.repetition_score("I will check that. " * 20) > 0.8
    assert recorder_module.repetition_score("too short") is None


class FixedWatch(host_watch.ThreadWatch):
    """The process's kind of watch, never started: its late intervals are the ones a test gives it."""

    def acquire(self) -> None:
        self.acquired = getattr(self, "acquired", 0) + 1

    def release(self) -> None:
        self.released = getattr(self, "released", 0) + 1


@pytest.fixture
def watch(monkeypatch, clock):
    fixed = FixedWatch()
    monkeypatch.setattr(host_watch, "acquire", lambda: fixed.acquire() or fixed)
    return fixed


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_host_delays_are_measured_on_the_first_chunk_and_after_gaps_of_100_ms(clock, spans, watch, encoding):
    provider, exporter = spans
    ms = 1_000_000
    start = clock.perf
    for due, ran in ((20, 98), (400, 688), (700, 720), (800, 830), (840, 855)):  # ms after the start: the host's holds
        watch._beat(start + due * ms, start + ran * ms)
    with StreamRecorder(side="client", provider="p", encoding=encoding, tracer_provider=provider) as rec:
        for wait_ms in (100, 30, 560, 99, 100):
            clock.advance_us(wait_ms * 1000)
            rec.chunk(1, 4, 4)
    (span,) = exporter.get_finished_spans()
    # read at 100, 130, 690, 789 and 889 ms: the first from the start, the hold it waited out; 30 ms after: not
    # looked at; 560: the hold that ended as it read; 99: not looked at; 100: the short hold that ended 34 ms before
    expected = [78_000, 0, 288_000, 0, 15_000]
    # and the longer hold inside that last wait, kept apart as the longest there (longer than its host delay), and
    # both summed
    expected_held = [0, 0, 0, 0, 30_000]
    expected_total = [0, 0, 0, 0, 45_000]
    assert span.attributes[sc.STREAMSCOPE_HOST_WATCH] == "thread"
    if encoding == "packed":
        assert int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US]) == expected
        assert int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_HOST_HELD_US]) == expected_held
        assert int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US]) == expected_total
    else:
        assert [e.attributes.get(sc.STREAMSCOPE_CHUNK_HOST_DELAY_US, 0) for e in span.events] == expected
        assert sum(sc.STREAMSCOPE_CHUNK_HOST_DELAY_US in e.attributes for e in span.events) == 3
        assert [e.attributes.get(sc.STREAMSCOPE_CHUNK_HOST_HELD_US, 0) for e in span.events] == expected_held
        assert [e.attributes.get(sc.STREAMSCOPE_CHUNK_HOST_HELD_TOTAL_US, 0) for e in span.events] == expected_total
    assert (watch.acquired, watch.released) == (1, 1)


def test_a_failing_watch_costs_the_host_delays_only(clock, spans, watch, monkeypatch, caplog):
    def broken(since_ns: int, until_ns: int) -> int:
        raise RuntimeError("broken")

    monkeypatch.setattr(watch, "late_us", broken)
    provider, exporter = spans
    with StreamRecorder(side="client", provider="p", tracer_provider=provider) as rec:
        rec.chunk(1, 4, 4)
        clock.advance_us(200_000)
        rec.chunk(1, 4, 4)
    (span,) = exporter.get_finished_spans()
    assert int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US]) == [0, 200_000]
    assert sc.STREAMSCOPE_HOST_WATCH not in span.attributes
    assert sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US not in span.attributes
    assert sc.STREAMSCOPE_CHUNKS_HOST_HELD_US not in span.attributes
    assert sc.STREAMSCOPE_CHUNKS_HOST_HELD_TOTAL_US not in span.attributes
    assert watch.released == 1
    assert "could not read the host watch" in caplog.text


@pytest.mark.parametrize("outcome", ["completed", "error", "cancelled"])
def test_the_watch_is_released_once_however_the_stream_ends(clock, spans, watch, outcome):
    provider, _ = spans
    recorder = StreamRecorder(side="client", provider="p", tracer_provider=provider).start()
    recorder.finish(outcome)
    recorder.finish(outcome)
    assert (watch.acquired, watch.released) == (1, 1)


def test_a_stream_never_started_never_watches(clock, spans, watch):
    provider, _ = spans
    StreamRecorder(side="client", provider="p", tracer_provider=provider).finish()
    assert not hasattr(watch, "acquired") and not hasattr(watch, "released")


def test_a_recorder_dropped_without_finishing_releases_its_watch(clock, spans, watch):
    provider, _ = spans
    StreamRecorder(side="client", provider="p", tracer_provider=provider).start()
    gc.collect()
    assert (watch.acquired, watch.released) == (1, 1)


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_what_a_chunk_withdrew_is_carried_where_it_happened(clock, spans, encoding):
    provider, exporter = spans
    with StreamRecorder(side="client", provider="p", encoding=encoding, tracer_provider=provider) as rec:
        rec.chunk(3, 12, 40, text="one two three")
        rec.chunk(0, 0, 30)  # a retraction: no content of its own
        rec.retract(8, 2)
        rec.chunk(1, 4, 30, text=" six")
        rec.retract(4, 1)  # a replacement: withdraws and adds
        rec.retract(1, 0)  # said twice of one chunk: added up
        rec.retract(0, 0)  # nothing
    (span,) = exporter.get_finished_spans()
    if encoding == "packed":
        withdrawn = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES])
        tokens = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS])
    else:
        withdrawn = [e.attributes.get(sc.STREAMSCOPE_CHUNK_RETRACTED_BYTES, 0) for e in span.events]
        tokens = [e.attributes.get(sc.STREAMSCOPE_CHUNK_RETRACTED_TOKENS, 0) for e in span.events]
    assert (withdrawn, tokens) == ([0, 8, 5], [0, 2, 1])


def test_a_stream_that_took_nothing_back_sends_no_retraction_arrays(clock, spans):
    provider, exporter = spans
    with StreamRecorder(side="client", provider="p", tracer_provider=provider) as rec:
        rec.retract(5, 1)  # before any chunk: nothing to withdraw from
        rec.chunk(1, 5, 40)
    (span,) = exporter.get_finished_spans()
    assert sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES not in span.attributes


def test_streaming_histograms_are_recorded_off_the_streams_thread_and_never_pile_up(monkeypatch, caplog):
    """A finished stream hands its measurements over; a thread records them. When that thread cannot keep up,
    streams past ``MAX_PENDING`` are dropped, counted and warned about, not kept without bound."""
    started, release, recorded = threading.Event(), threading.Event(), []
    record, labels = instruments.record, {"case": "pile-up"}

    def slow_record(meter_provider, their_labels, offsets_us):
        if their_labels != labels:  # another test's stream, recorded by the global thread meanwhile
            return record(meter_provider, their_labels, offsets_us)
        started.set()
        release.wait(10)
        recorded.append(list(offsets_us))

    monkeypatch.setattr(instruments, "record", slow_record)
    monkeypatch.setattr(instruments, "MAX_PENDING", 3)
    records = instruments.DeferredRecords()
    records.submit(None, labels, [0, 500])
    assert started.wait(10)  # the thread holds the first stream
    for stream in range(1, 6):
        records.submit(None, labels, [0, 1_000 * stream])
    assert not records.flush(timeout_s=0.05)
    release.set()
    assert records.flush(timeout_s=10)
    assert records.dropped == 2
    assert recorded == [[0, 500]] + [[0, 1_000 * stream] for stream in range(1, 4)]  # and the three that waited
    assert "streaming histograms fall behind" in caplog.text


def test_a_tracer_is_made_once_per_provider_and_follows_the_global_one(monkeypatch):
    first, second = TracerProvider(), TracerProvider()
    tracers = [recorder_module._tracer(p) for p in (first, first, second)]
    assert tracers[0] is tracers[1] and tracers[0] is not tracers[2]
    monkeypatch.setattr(recorder_module.trace, "get_tracer_provider", lambda: second)
    assert recorder_module._tracer(None) is tracers[2]  # the global provider's, whichever is global now


def test_a_stream_finished_from_two_threads_at_once_is_one_span(spans):
    """A gRPC call's callback thread and the application may both end a stream (the peer leaves as the answer
    ends): one span, and its metrics once. Each thread yields to the other at every line of the recorder's module,
    so two finishes meet inside the first-call check unless it is one step."""
    import time

    provider, exporter = spans
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    recorder_file = recorder_module.__file__

    def yielding(frame, event, arg):
        if frame.f_code.co_filename != recorder_file:
            return None
        if event == "line":
            time.sleep(0.001)
        return yielding

    recorders = [
        StreamRecorder(side="client", provider="p", tracer_provider=provider, meter_provider=meters).start()
        for _ in range(5)
    ]
    for recorder in recorders:
        recorder.chunk(1, 4, 90)
        both = threading.Barrier(2)

        def finish(outcome, recorder=recorder, both=both):
            both.wait()
            sys.settrace(yielding)
            try:
                recorder.finish(outcome)
            finally:
                sys.settrace(None)

        threads = [threading.Thread(target=finish, args=(outcome,)) for outcome in ("completed", "cancelled")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(exporter.get_finished_spans()) == len(recorders)
    assert streamscope.flush_metrics()
    (first,) = [
        m.data.data_points[0]
        for rm in reader.get_metrics_data().resource_metrics
        for sm in rm.scope_metrics
        for m in sm.metrics
        if m.name == instruments.TIME_TO_FIRST_CHUNK
    ]
    assert first.count == len(recorders)
