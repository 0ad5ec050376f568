"""SDK → real OTel exporters (HTTP protobuf, HTTP JSON, gRPC) → collector over loopback → embedded ClickHouse."""

from __future__ import annotations

import random
import time

import httpx
import pytest
from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as ProtobufExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope._internal.recorder as recorder_module
from streamscope import StreamRecorder
from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope.formats import make_format
from streamscope_dashboards.panels.common import median_of
from tests.clock import FakeClock
from tests.sse_fixtures import TOOL_CALL_FIXTURES, first_tool_call, fixture_events
from tests.support import int64s, metric

EXPORTERS = {
    "http-protobuf": lambda c: ProtobufExporter(endpoint=f"{c.http_url}/v1/traces"),
    "http-json": lambda c: JsonExporter(endpoint=f"{c.http_url}/v1/traces"),
    "grpc": lambda c: GrpcExporter(endpoint=c.grpc_endpoint, insecure=True),
}


def provider_for(collector, transport: str, service: str, max_events: int = 128):
    """A TracerProvider exporting to ``collector`` and keeping a copy of every span it exported."""
    copies = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": service}), span_limits=SpanLimits(max_events=max_events)
    )
    provider.add_span_processor(SimpleSpanProcessor(EXPORTERS[transport](collector)))
    provider.add_span_processor(SimpleSpanProcessor(copies))
    return provider, copies


def record_stream(
    provider,
    encoding: str,
    chunks: list[tuple[int, int, int, int]],
    clock: FakeClock | None = None,
    tool_call_at: int | None = None,
):
    """Record (wait_us, tokens, content_bytes, wire_bytes) chunks; real sleeps unless a fake clock is given."""
    recorder = StreamRecorder(
        side="client", provider="openai", request_model="m-1", encoding=encoding, tracer_provider=provider
    )
    recorder.start()
    for i, (wait_us, tokens, content, wire) in enumerate(chunks):
        if clock:
            clock.advance_us(wait_us)
        else:
            time.sleep(wait_us / 1e6)
        recorder.chunk(tokens, content, wire, tool_call=i == tool_call_at)
    recorder.finish()


def expected_gaps(offsets: list[int], content: list[int]) -> list[tuple[str, int]]:
    """Reference definition of chunks.kind and chunks.gap_us, written plainly."""
    rows, last_content, seen = [], 0, 0
    for offset, size in zip(offsets, content):
        if size > 0:
            kind = "first" if seen == 0 else "content"
            rows.append((kind, offset - last_content))
            last_content, seen = offset, seen + 1
        else:
            rows.append(("lead" if seen == 0 else "aside", offset - last_content))
    return rows


@pytest.mark.parametrize("transport", sorted(EXPORTERS))
def test_gaps_read_back_equal_to_what_the_client_recorded(collector, transport):
    provider, copies = provider_for(collector, transport, f"svc-{transport}")
    rng = random.Random(7)
    chunks = [(rng.randint(1_000, 15_000), rng.choice([0, 1, 2]), 0, 40) for _ in range(3)]
    chunks += [
        (rng.randint(500, 8_000), rng.randint(1, 3), rng.randint(1, 12), rng.randint(60, 200)) for _ in range(40)
    ]
    chunks.insert(20, (60_000, 0, 0, 9))  # a keep-alive in a pause: must not split the gap
    record_stream(provider, "packed", chunks)
    provider.shutdown()

    (span,) = copies.get_finished_spans()
    offsets = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    content = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])
    client = collector.query_client
    rows = client.query(
        "SELECT kind, gap_us, tokens, content_bytes, wire_bytes FROM chunks WHERE span_id = {s:String} ORDER BY seq",
        parameters={"s": format(span.context.span_id, "016x")},
    ).result_rows
    assert [(k, g) for k, g, *_ in rows] == expected_gaps(offsets, content)
    assert [r[2:] for r in rows] == [c[1:] for c in chunks]
    timeline = client.query(
        "SELECT offset_us FROM chunk_timeline WHERE span_id = {s:String} ORDER BY seq",
        parameters={"s": format(span.context.span_id, "016x")},
    ).result_rows
    assert [o for (o,) in timeline] == offsets

    # the request log: one traces request, its transport and encoding, the rows it wrote
    logged = client.query(
        "SELECT signal, transport, content_type, received_bytes, message_bytes, rows['chunks'], rows['streams'] "
        "FROM ingest_requests"
    ).result_rows
    assert logged == [
        (
            "traces",
            transport.split("-")[0],
            "json" if transport == "http-json" else "protobuf",
            logged[0][3],
            logged[0][4],
            len(chunks),
            1,
        )
    ]
    received, message = logged[0][3:5]
    assert message == encode_spans([span]).ByteSize()  # the request's protobuf size, whatever the transport
    if transport == "http-json":
        assert received > message > 0  # JSON spells out what protobuf packs
    else:
        assert received == message > 0  # protobuf, not compressed: the body is the message


def test_per_stream_statistics_are_reproducible_in_sql(collector):
    provider, _ = provider_for(collector, "http-protobuf", "stats")
    rng = random.Random(3)
    for _ in range(5):
        chunks = [
            (rng.randint(100, 30_000), rng.randint(0, 6), rng.choice((0, 3, 9)), 80) for _ in range(rng.randint(2, 60))
        ]
        record_stream(provider, "packed", chunks, clock=_clock_for(rng))
    provider.shutdown()
    mismatches = collector.query_client.query(
        """
        SELECT count() FROM streams AS s
        INNER JOIN (
            SELECT span_id, quantileExact(0.5)(gap_us) AS p50, quantileExact(0.95)(gap_us) AS p95,
                   quantileExact(0.99)(gap_us) AS p99, max(gap_us) AS mx, countIf(gap_us > 400000) AS stalls
            FROM chunks WHERE kind = 'content' GROUP BY span_id
        ) AS c ON c.span_id = s.span_id
        INNER JOIN (
            SELECT span_id, max(offset_us) AS last_content, sumIf(tokens, offset_us <= first + 200000) AS head
            FROM (
                SELECT span_id, offset_us, tokens, min(offset_us) OVER (PARTITION BY span_id) AS first
                FROM chunk_timeline WHERE kind IN ('first', 'content')
            ) GROUP BY span_id
        ) AS t ON t.span_id = s.span_id
        INNER JOIN (
            SELECT span_id, CAST(sumMap(map(tokens, toUInt32(1))), 'Map(UInt16, UInt32)') AS by_tokens
            FROM chunks WHERE kind IN ('first', 'content') GROUP BY span_id
        ) AS h ON h.span_id = s.span_id
        WHERE NOT (s.gap_p50_us = c.p50 AND s.gap_p95_us = c.p95 AND s.gap_p99_us = c.p99
                   AND s.gap_max_us = c.mx AND s.stall_count = c.stalls
                   AND s.last_content_us = t.last_content AND s.head_tokens = t.head
                   AND s.content_chunks_by_tokens = h.by_tokens)
        """
    ).result_rows[0][0]
    assert collector.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 5
    assert mismatches == 0
    # the panels' median tokens per chunk, from the streams' counts, is quantileExact's over their chunks
    (median,) = collector.query_client.query(
        f"SELECT {median_of('sumMap(content_chunks_by_tokens)', 'sum(content_chunks)')} FROM streams"
    ).result_rows[0]
    (exact,) = collector.query_client.query(
        "SELECT quantileExact(0.5)(tokens) FROM chunks WHERE kind IN ('first', 'content')"
    ).result_rows[0]
    assert median == exact


def _clock_for(rng: random.Random):
    clock = FakeClock(perf_ns=rng.randint(1, 10**12))
    recorder_module.time = clock  # undone by the autouse fixture below
    return clock


@pytest.fixture(autouse=True)
def _restore_recorder_clock():
    yield
    recorder_module.time = time


@pytest.mark.parametrize("transport", ["http-protobuf", "grpc"])
def test_packed_and_events_encodings_give_identical_rows(collector, transport):
    provider, _ = provider_for(collector, transport, "enc", max_events=10_000)
    rng = random.Random(11)
    chunks = [(0, 0, 0, 30)] + [(rng.randint(1, 50_000), 1, rng.randint(1, 8), 90) for _ in range(200)]
    chunks += [(1_000, 0, 0, 25)]
    for encoding in ("packed", "events"):
        clock = FakeClock()
        recorder_module.time = clock
        record_stream(provider, encoding, chunks, clock=clock, tool_call_at=150)
    provider.shutdown()
    client = collector.query_client
    chunk_rows = client.query(
        "SELECT groupArray((seq, kind, gap_us, tokens, content_bytes, wire_bytes)) FROM "
        "(SELECT * FROM chunks ORDER BY seq) GROUP BY span_id_bytes"
    ).result_rows
    assert len(chunk_rows) == 2 and chunk_rows[0] == chunk_rows[1]
    assert len(chunk_rows[0][0]) == len(chunks)
    ignored = ("span_id", "trace_id", "encoding", "ingested_at")
    names = [
        n
        for (n,) in client.query(
            "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'streams' ORDER BY position"
        ).result_rows
        if n not in ignored
    ]
    stream_rows = client.query(f"SELECT encoding, {', '.join(names)} FROM streams ORDER BY encoding").result_rows
    assert [r[0] for r in stream_rows] == ["events", "packed"]
    assert stream_rows[0][1:] == stream_rows[1][1:]
    assert client.query("SELECT DISTINCT first_tool_call_seq FROM streams").result_rows == [(150,)]


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_a_stream_longer_than_128_chunks_keeps_its_first_chunk(collector, encoding):
    """The OTel SDK keeps 128 events per span by default and drops the oldest; setup() raises that limit."""
    from streamscope._internal.setup import EVENTS_PER_SPAN

    provider, _ = provider_for(collector, "http-protobuf", f"long-{encoding}", max_events=EVENTS_PER_SPAN)
    clock = FakeClock()
    recorder_module.time = clock
    chunks = [(250_000, 1, 5, 70)] + [(20_000, 1, 4, 70)] * 299
    record_stream(provider, encoding, chunks, clock=clock)
    provider.shutdown()
    client = collector.query_client
    assert client.query("SELECT count(), min(seq) FROM chunks").result_rows[0] == (300, 0)
    assert client.query("SELECT ttft_us, chunk_count, timeline_truncated FROM streams").result_rows[0] == (
        250_000,
        300,
        False,
    )


def test_events_dropped_by_the_sender_are_flagged_not_silently_wrong(collector):
    """With the SDK's default limit the first chunks are lost: the stored stream is a partial timeline whose time
    to first token is unknown (the 73rd chunk's offset is not it), the collector counts it, and the sender hears
    why in partial_success."""
    provider, copies = provider_for(collector, "http-protobuf", "default-limits", max_events=128)
    clock = FakeClock()
    recorder_module.time = clock
    record_stream(provider, "events", [(250_000, 1, 4, 60)] + [(1_000, 1, 4, 60)] * 199, clock=clock, tool_call_at=100)
    provider.shutdown()
    # the stored seqs no longer count from the stream's first chunk: where the tool call began is unknown
    query = "SELECT chunk_count, timeline_truncated, first_tool_call_seq, ttft_us, ttfb_us, coverage FROM streams"
    assert collector.query_client.query(query).result_rows == [(128, True, None, None, None, "partial")]
    assert metric(collector.http_url, "streamscope_collector_incomplete_streams_total", coverage="partial") == 1

    (span,) = copies.get_finished_spans()
    assert span.dropped_events == 72
    response = httpx.post(
        f"{collector.http_url}/v1/traces",
        content=encode_spans([span]).SerializeToString(),
        headers={"content-type": "application/x-protobuf"},
        timeout=10,
    )
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 0
    assert "the sender dropped 72 of its span events" in partial.error_message
    assert "time to first token unknown" in partial.error_message


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_browser_paint_and_render_times_are_stored_per_chunk(collector, encoding):
    """A browser's stream span, as an OTel SDK sends it: each chunk's paint delay and render work reach `chunks`
    (the packed arrays or the chunk events' attributes); client and server rows carry zeros."""
    provider, _ = provider_for(collector, "http-protobuf", f"browser-{encoding}")
    offsets, tokens, content = [90_000, 110_000, 150_000], [1, 2, 1], [4, 8, 4]
    paint, render = [16_000, 9_000, 0], [3_000, 1_500, 0]  # the last chunk's paint was not measured
    start_ns = time.time_ns()
    span = provider.get_tracer("glass").start_span(
        "chat", start_time=start_ns, attributes={sc.STREAMSCOPE_SIDE: "browser", sc.STREAMSCOPE_ENCODING: encoding}
    )
    if encoding == "packed":
        span.set_attributes(
            {
                sc.STREAMSCOPE_CHUNKS_OFFSET_US: offsets,
                sc.STREAMSCOPE_CHUNKS_TOKENS: tokens,
                sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES: content,
                sc.STREAMSCOPE_CHUNKS_PAINT_DELAY_US: paint,
                sc.STREAMSCOPE_CHUNKS_RENDER_US: render,
            }
        )
    else:
        for chunk in zip(offsets, tokens, content, paint, render, strict=True):
            attributes = dict(zip(sc.CHUNK_EVENT_ATTRIBUTES[:2] + sc.CHUNK_EVENT_ATTRIBUTES[3:], chunk[1:]))
            span.add_event(sc.CHUNK_EVENT, attributes, timestamp=start_ns + chunk[0] * 1000)
    span.end(end_time=start_ns + 200_000_000)
    record_stream(provider, encoding, [(1_000, 1, 4, 60)] * 2)  # a client stream alongside
    provider.shutdown()
    rows = collector.query_client.query(
        "SELECT side, groupArray(paint_delay_us), groupArray(render_us) FROM (SELECT * FROM chunks ORDER BY seq) "
        "GROUP BY side ORDER BY side"
    ).result_rows
    assert rows == [("browser", paint, render), ("client", [0, 0], [0, 0])]


def test_spans_that_are_not_streams_are_ignored(collector):
    provider, _ = provider_for(collector, "http-protobuf", "plain")
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("db query"):
        pass
    record_stream(provider, "packed", [(100, 1, 3, 10)])
    provider.shutdown()
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="traces") == 1
    assert collector.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 1


def replay_fixture(provider, stream_format: str, name: str, clock: FakeClock, pause_at: int, pause_us: int) -> None:
    """Feed a provider stream through the SDK's observer, 5 ms per event and ``pause_us`` before ``pause_at``."""
    recorder = StreamRecorder(side="client", provider="p", request_model="m", tracer_provider=provider)
    observer = StreamObserver(recorder.start(), make_format(stream_format))
    for i, event in enumerate(fixture_events(name)):
        clock.advance_us(pause_us if i == pause_at else 5_000)
        observer.on_bytes(event.raw)
    observer.close("completed")


def test_the_pause_before_a_tool_call_is_the_gap_at_first_tool_call_seq(collector):
    """Each provider's stream writes text, pauses, then calls a tool; joining chunks on first_tool_call_seq
    gives the pause per model, measured from the last content chunk as every gap is."""
    provider, copies = provider_for(collector, "http-protobuf", "tools")
    clock = FakeClock()
    recorder_module.time = clock
    expected = {}
    for pause_us, stream_format in zip((300_000, 500_000, 700_000), sorted(TOOL_CALL_FIXTURES)):
        name = TOOL_CALL_FIXTURES[stream_format]
        tool_at = first_tool_call(stream_format, fixture_events(name))
        replay_fixture(provider, stream_format, name, clock, tool_at, pause_us)
        span = copies.get_finished_spans()[-1]
        offsets = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
        content = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])
        last_content = max(o for o, c in zip(offsets[:tool_at], content) if c > 0)
        assert offsets[tool_at] - last_content >= pause_us
        expected[span.attributes[sc.GEN_AI_RESPONSE_MODEL]] = (tool_at, offsets[tool_at] - last_content)
    replay_fixture(provider, "anthropic", "anthropic_messages", clock, -1, 0)  # no tool call
    provider.shutdown()
    assert len(expected) == 3
    client = collector.query_client
    rows = client.query(
        """
        SELECT s.response_model, s.first_tool_call_seq, c.gap_us, s.tool_call_pause_us
        FROM streams AS s
        INNER JOIN chunks AS c ON c.tenant = s.tenant AND c.span_id = s.span_id AND c.seq = s.first_tool_call_seq
        """
    ).result_rows
    assert {model: (seq, gap) for model, seq, gap, _ in rows} == expected
    assert all(pause == gap for _, _, gap, pause in rows)  # kept with the stream when it is decoded
    without = "SELECT countIf(first_tool_call_seq IS NULL), countIf(tool_call_pause_us IS NULL), count() FROM streams"
    assert client.query(without).result_rows == [(1, 1, 4)]


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_a_json_answer_reaches_streams_field_by_field(collector, encoding):
    """The SDK follows a structured answer as it streams; the collector stores when each field and the document
    were complete, at the offsets of the chunks that completed them."""
    provider, _ = provider_for(collector, "http-protobuf", f"json-{encoding}")
    clock = FakeClock()
    recorder_module.time = clock
    pieces = [(300_000, '{"title": "Dun'), (20_000, 'e", "year": 19'), (20_000, '65, "tags": ["sf"'), (500_000, "]}")]
    for document, cut_at in (("content", len(pieces)), ("tool_call", 2)):
        recorder = StreamRecorder(side="client", provider="openai", encoding=encoding, tracer_provider=provider)
        recorder.start()
        for wait_us, text in pieces[:cut_at]:
            clock.advance_us(wait_us)
            recorder.chunk(3, len(text), 60, text)
            recorder.json_text(text, document)
        recorder.finish()
    provider.shutdown()
    rows = collector.query_client.query(
        "SELECT json_document, json_outcome, json_valid_us, json_field_count, json_fields, json_field_us "
        "FROM streams ORDER BY json_document"
    ).result_rows
    assert rows == [
        ("content", "valid", 840_000, 3, ["title", "year", "tags"], [320_000, 340_000, 840_000]),
        ("tool_call", "truncated", None, 1, ["title"], [320_000]),  # 1965 was not known to be whole
    ]
