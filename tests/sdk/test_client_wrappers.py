"""The client wrappers against a real local SSE server replaying the providers' wire formats.

A FastAPI app on 127.0.0.1 (ephemeral port) replays the bodies in ``tests/fixtures/sse/`` one SSE event per
write, a few milliseconds apart, with one deliberately long pause, so every chunk crosses a real socket at a
real time. Spans are captured with the OpenTelemetry SDK and compared with what the fixture itself says: its
events, their bytes, the text each carries, and the stream-level facts (id, model, finish reasons, usage).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from openai import AsyncOpenAI, OpenAI
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import ProxyTracerProvider, StatusCode

import streamscope
from streamscope import semconv as sc
from streamscope_collector.serving import BackgroundServer
from tests.sse_fixtures import (
    TOOL_CALL_FIXTURES,
    WireEvent,
    first_call_arguments,
    first_tool_call,
    fixture_body,
    fixture_events,
)
from tests.support import int64s, memory_provider

STEP_S = 0.005
"""The server's wait before each event."""
PAUSE_S = 0.15
"""The stall before the event at ``pause_at`` that the client's timeline must show at least."""
PAUSE_MARGIN_S = 0.01
"""Added to the server's stall: absorbs how late the client may read the event before it (GIL, scheduling)."""
STEP_US = round(STEP_S * 1e6)
PAUSE_US = round(PAUSE_S * 1e6)

# (stream_sse format, fixture, gen_ai.provider.name, request model)
FORMATS = {
    "openai-chat": ("openai_chat", "openai", "gpt-4o-mini"),
    "openai-responses": ("openai_responses", "openai", "gpt-4o-mini"),
    "anthropic": ("anthropic_messages", "anthropic", "claude-sonnet-4-5"),
}


# --- what the fixtures say ----------------------------------------------------------------------------------


def event_text(stream_format: str, event: WireEvent) -> str:
    """The generated text an event carries, read from the fields the providers document."""
    payload = event.payload
    if payload is None:
        return ""
    if stream_format == "openai-chat":
        return "".join(choice["delta"].get("content") or "" for choice in payload["choices"])
    if stream_format == "openai-responses":
        return payload["delta"] if payload["type"] == "response.output_text.delta" else ""
    if payload["type"] == "content_block_delta":
        delta = payload["delta"]
        return {"text_delta": delta.get("text"), "thinking_delta": delta.get("thinking")}.get(delta["type"]) or ""
    return ""


def expected_facts(stream_format: str, events: list[WireEvent]) -> dict[str, Any]:
    payloads = [e.payload for e in events if e.payload is not None]
    if stream_format == "openai-chat":
        usage = next(p["usage"] for p in payloads if p.get("usage"))
        return {
            sc.GEN_AI_RESPONSE_ID: payloads[0]["id"],
            sc.GEN_AI_RESPONSE_MODEL: payloads[0]["model"],
            sc.GEN_AI_RESPONSE_FINISH_REASONS: tuple(
                c["finish_reason"] for p in payloads for c in p["choices"] if c["finish_reason"]
            ),
            sc.GEN_AI_USAGE_INPUT_TOKENS: usage["prompt_tokens"],
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: usage["completion_tokens"],
        }
    if stream_format == "openai-responses":
        (response,) = [p["response"] for p in payloads if p["type"] == "response.completed"]
        return {
            sc.GEN_AI_RESPONSE_ID: response["id"],
            sc.GEN_AI_RESPONSE_MODEL: response["model"],
            sc.GEN_AI_RESPONSE_FINISH_REASONS: (response["status"],),
            sc.GEN_AI_USAGE_INPUT_TOKENS: response["usage"]["input_tokens"],
            sc.GEN_AI_USAGE_OUTPUT_TOKENS: response["usage"]["output_tokens"],
        }
    (message,) = [p["message"] for p in payloads if p["type"] == "message_start"]
    (delta,) = [p for p in payloads if p["type"] == "message_delta"]
    return {
        sc.GEN_AI_RESPONSE_ID: message["id"],
        sc.GEN_AI_RESPONSE_MODEL: message["model"],
        sc.GEN_AI_RESPONSE_FINISH_REASONS: (delta["delta"]["stop_reason"],),
        sc.GEN_AI_USAGE_INPUT_TOKENS: message["usage"]["input_tokens"],
        sc.GEN_AI_USAGE_OUTPUT_TOKENS: delta["usage"]["output_tokens"],
    }


def middle_content_index(stream_format: str, events: list[WireEvent]) -> int:
    """Where the server pauses: before a content event in the middle of the stream."""
    content = [i for i, e in enumerate(events) if event_text(stream_format, e)]
    return content[len(content) // 2]


def test_fixtures_are_well_formed_provider_streams():
    chat = fixture_events("openai_chat")
    assert chat[0].payload["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert chat[-2].payload["choices"] == [] and chat[-2].payload["usage"]["total_tokens"] > 0
    assert chat[-1].data == "[DONE]"
    assert all(e.event == "message" for e in chat)

    responses = fixture_events("openai_responses")
    assert [e.payload["sequence_number"] for e in responses] == list(range(len(responses)))
    assert all(e.payload["type"] == e.event for e in responses)
    (done,) = [e.payload for e in responses if e.event == "response.output_text.done"]
    assert done["text"] == "".join(event_text("openai-responses", e) for e in responses)

    anthropic = fixture_events("anthropic_messages")
    assert all(e.payload["type"] == e.event for e in anthropic)
    kinds = [e.event for e in anthropic]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert "ping" in kinds
    deltas = [e.payload["delta"]["type"] for e in anthropic if e.event == "content_block_delta"]
    assert {"thinking_delta", "signature_delta", "text_delta"} <= set(deltas)


# --- the replay server ---------------------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: Any


class ReplayServer:
    def __init__(self) -> None:
        self.received: list[Received] = []
        self.app = FastAPI()
        self._server: BackgroundServer | None = None
        app = self.app

        @app.post("/sse/{name}")
        async def sse(name: str, request: Request) -> StreamingResponse:
            return await self._replay(name, request)

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> StreamingResponse:
            return await self._replay("openai_chat", request)

        @app.post("/v1/responses")
        async def responses(request: Request) -> StreamingResponse:
            return await self._replay("openai_responses", request)

        @app.post("/fail")
        async def fail(request: Request) -> JSONResponse:
            await self._record(request)
            error = {"message": "The server had an error while processing your request.", "type": "server_error"}
            return JSONResponse({"error": error}, status_code=500)

    async def _record(self, request: Request) -> None:
        raw = await request.body()
        self.received.append(Received(request.url.path, dict(request.headers), json.loads(raw) if raw else None))

    async def _replay(self, name: str, request: Request) -> StreamingResponse:
        """Query: ``pause_at`` (event index), ``events`` (serve only the first N), ``abort`` (drop the connection)."""
        await self._record(request)
        query = request.query_params
        pause_at = int(query.get("pause_at", -1))
        events = [e.raw for e in fixture_events(name)][: int(query["events"]) if "events" in query else None]
        abort = query.get("abort") == "1"

        async def body() -> Any:
            for index, event in enumerate(events):
                await wait(PAUSE_S + PAUSE_MARGIN_S if index == pause_at else STEP_S)
                yield event
            if abort:
                raise ConnectionAbortedError("replay server drops the connection mid-body")

        return StreamingResponse(body(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    def start(self) -> ReplayServer:
        self._server = BackgroundServer(self.app, "127.0.0.1", 0, name="sse-replay").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def url(self, path: str, **query: Any) -> str:
        return f"http://127.0.0.1:{self.port}{path}" + (f"?{urlencode(query)}" if query else "")


async def wait(seconds: float) -> None:
    """Sleep at least ``seconds`` by the clock: uvloop's timers may fire up to a millisecond early."""
    deadline = time.perf_counter() + seconds
    while (left := deadline - time.perf_counter()) > 0:
        await asyncio.sleep(left)


@pytest.fixture(scope="module")
def server() -> Iterator[ReplayServer]:
    running = ReplayServer().start()
    yield running
    running.stop()


# --- span capture --------------------------------------------------------------------------------------------

PROVIDER, EXPORTER = memory_provider()


@pytest.fixture(scope="module")
def global_tracing() -> None:
    """``instrument_openai`` records with the global tracer provider, which OTel lets a process set only once.

    Set it to this module's provider if nobody has; if another provider is already global, copy its spans here.
    """
    current = trace.get_tracer_provider()
    if isinstance(current, ProxyTracerProvider):
        trace.set_tracer_provider(PROVIDER)
        current = trace.get_tracer_provider()
    if current is not PROVIDER:
        assert isinstance(current, TracerProvider), f"cannot capture spans from global {current!r}"
        current.add_span_processor(SimpleSpanProcessor(EXPORTER))


@pytest.fixture(autouse=True)
def spans(server: ReplayServer) -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    server.received.clear()
    yield EXPORTER
    EXPORTER.clear()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    """The one stream span (FastAPI traces the replay server itself with the global provider: not ours)."""
    finished = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
    assert len(finished) == 1, [s.name for s in finished]
    return finished[0]


@dataclass(frozen=True)
class Chunks:
    offsets: list[int]
    tokens: list[int]
    content: list[int]
    wire: list[int]


def chunks_of(span: ReadableSpan) -> Chunks:
    attributes = span.attributes
    assert attributes is not None
    arrays = [
        int64s(attributes.get(key, b""))
        for key in (
            sc.STREAMSCOPE_CHUNKS_OFFSET_US,
            sc.STREAMSCOPE_CHUNKS_TOKENS,
            sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES,
            sc.STREAMSCOPE_CHUNKS_WIRE_BYTES,
        )
    ]
    assert len({len(a) for a in arrays}) == 1, "packed arrays of different lengths"
    return Chunks(*arrays)


def assert_traceparent(received: Received, span: ReadableSpan) -> None:
    version, trace_id, span_id, _flags = received.headers["traceparent"].split("-")
    assert version == "00"
    assert trace_id == format(span.context.trace_id, "032x")
    assert span_id == format(span.context.span_id, "016x")


def assert_timeline(chunks: Chunks, span: ReadableSpan, pause_at: int) -> None:
    """Non-decreasing offsets, the server's stall visible where it happened, TTFC at the first content."""
    offsets = chunks.offsets
    assert offsets == sorted(offsets)
    assert offsets[pause_at] - offsets[pause_at - 1] >= PAUSE_US
    # the server cannot send event i before the sum of its waits up to i, all after the span started
    assert offsets[-1] >= PAUSE_US + (len(offsets) - 1) * STEP_US
    first_byte = span.attributes[sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US]
    assert 0 < first_byte <= offsets[0]
    first_content = next(i for i, c in enumerate(chunks.content) if c > 0)
    assert span.attributes[sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK] == pytest.approx(offsets[first_content] / 1e6)


def assert_content_and_estimated_tokens(chunks: Chunks, stream_format: str, events: list[WireEvent]) -> None:
    assert chunks.content == [len(event_text(stream_format, e).encode()) for e in events]
    assert any(c == 0 for c in chunks.content) and any(c > 0 for c in chunks.content)
    # no per-chunk usage in these fixtures: tokens are estimated for every chunk with text, and only those
    assert [t > 0 for t in chunks.tokens] == [c > 0 for c in chunks.content]


def assert_stream_facts(span: ReadableSpan, stream_format: str, events: list[WireEvent]) -> None:
    attributes = span.attributes
    for key, value in expected_facts(stream_format, events).items():
        assert attributes.get(key) == value, key
    assert attributes.get(sc.STREAMSCOPE_TOKENS_ESTIMATED) is True


# --- stream_sse / astream_sse --------------------------------------------------------------------------------


def check_recorded_stream(
    span: ReadableSpan,
    seen: list[streamscope.StreamEvent],
    stream_format: str,
    server: ReplayServer,
    pause_at: int,
) -> None:
    name, provider, model = FORMATS[stream_format]
    events = fixture_events(name)

    # the application sees every event, unchanged
    assert [(e.event, e.data) for e in seen] == [(e.event, e.data) for e in events]
    assert [e.payload for e in seen] == [e.payload for e in events]

    chunks = chunks_of(span)
    assert len(chunks.offsets) == len(events)
    assert chunks.wire == [len(e.raw) for e in events]
    assert sum(chunks.wire) == len(fixture_body(name))
    assert_content_and_estimated_tokens(chunks, stream_format, events)
    assert_timeline(chunks, span, pause_at)

    attributes = span.attributes
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
    assert sc.STREAMSCOPE_CANCEL_OFFSET_US not in attributes
    assert sc.ERROR_TYPE not in attributes
    assert attributes[sc.STREAMSCOPE_SIDE] == "client"
    assert attributes[sc.GEN_AI_PROVIDER_NAME] == provider
    assert attributes[sc.GEN_AI_REQUEST_MODEL] == model
    assert attributes[sc.SERVER_ADDRESS] == "127.0.0.1"
    assert attributes[sc.SERVER_PORT] == server.port
    assert span.kind == trace.SpanKind.CLIENT
    assert span.status.status_code != StatusCode.ERROR
    assert_stream_facts(span, stream_format, events)

    (received,) = server.received
    assert received.path == f"/sse/{name}"
    assert received.body == {"model": model, "stream": True}
    assert_traceparent(received, span)


def read_with_stream_sse(
    server: ReplayServer, name: str, stream_format: str, model: str, pause_at: int, **body: Any
) -> list[streamscope.StreamEvent]:
    """Every event of fixture ``name`` through ``stream_sse``, the server pausing before event ``pause_at``; ``body``
    adds to the request's."""
    with (
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url(f"/sse/{name}", pause_at=pause_at),
            format=stream_format,
            tracer_provider=PROVIDER,
            json={"model": model, "stream": True, **body},
        ) as events,
    ):
        return list(events)


def json_facts(span: ReadableSpan) -> dict[str, Any]:
    return {key: span.attributes.get(key) for key in sc.JSON_PROGRESS}


@pytest.mark.parametrize("stream_format", sorted(TOOL_CALL_FIXTURES))
def test_stream_sse_follows_the_tool_calls_arguments_as_they_stream(server, spans, stream_format):
    name = TOOL_CALL_FIXTURES[stream_format]
    pieces = first_call_arguments(stream_format, fixture_events(name))
    read_with_stream_sse(server, name, stream_format, "m", -1)
    span = only_span(spans)
    offsets = chunks_of(span).offsets
    facts = json_facts(span)
    arguments = json.loads("".join(piece for _, piece in pieces))
    assert facts[sc.STREAMSCOPE_JSON_DOCUMENT] == "tool_call"
    assert facts[sc.STREAMSCOPE_JSON_OUTCOME] == "valid"
    assert list(facts[sc.STREAMSCOPE_JSON_FIELD_NAMES]) == list(arguments)
    assert facts[sc.STREAMSCOPE_JSON_FIELD_COUNT] == len(arguments)
    assert facts[sc.STREAMSCOPE_JSON_VALID_OFFSET_US] == offsets[pieces[-1][0]]  # the piece that closed it
    argument_offsets = {offsets[index] for index, _ in pieces}
    assert set(facts[sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US]) <= argument_offsets


def test_stream_sse_follows_a_json_answer_when_the_request_asks_for_one(server, spans):
    events = fixture_events("openai_chat_json")
    response_format = {"type": "json_schema", "json_schema": {"name": "city", "schema": {"type": "object"}}}
    read_with_stream_sse(server, "openai_chat_json", "openai-chat", "m", -1, response_format=response_format)
    span = only_span(spans)
    offsets = chunks_of(span).offsets
    content = [
        e.payload["choices"][0]["delta"].get("content") if e.payload and e.payload["choices"] else None for e in events
    ]
    answer = json.loads("".join(c or "" for c in content))
    ends = {  # by hand: the piece after which each field's value was whole
        "city": content.index("Paris") + 1,  # the closing quote
        "population": content.index(',"'),  # 2102650 could have gone on until the comma
        "landmarks": content.index('"],"'),
        "capital": content.index("}"),
    }
    facts = json_facts(span)
    assert list(facts[sc.STREAMSCOPE_JSON_FIELD_NAMES]) == list(answer) == list(ends)
    assert list(facts[sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US]) == [offsets[i] for i in ends.values()]
    assert facts[sc.STREAMSCOPE_JSON_VALID_OFFSET_US] == offsets[content.index("}")]
    assert (facts[sc.STREAMSCOPE_JSON_DOCUMENT], facts[sc.STREAMSCOPE_JSON_OUTCOME]) == ("content", "valid")

    spans.clear()
    read_with_stream_sse(server, "openai_chat_json", "openai-chat", "m", -1)  # no response format
    assert set(json_facts(only_span(spans)).values()) == {None}  # text, however it looks, is not followed


def test_stream_sse_says_a_json_answer_cut_short_was_truncated(server, spans):
    response_format = {"type": "json_object"}
    with (
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url("/sse/openai_chat_json", events=8),
            tracer_provider=PROVIDER,
            json={"model": "m", "stream": True, "response_format": response_format},
        ) as events,
    ):
        list(events)
    facts = json_facts(only_span(spans))
    assert facts[sc.STREAMSCOPE_JSON_OUTCOME] == "truncated" and facts[sc.STREAMSCOPE_JSON_VALID_OFFSET_US] is None
    assert list(facts[sc.STREAMSCOPE_JSON_FIELD_NAMES]) == ["city"]


@pytest.mark.parametrize("stream_format", sorted(FORMATS))
def test_stream_sse_records_every_event(server, spans, stream_format):
    name, _, model = FORMATS[stream_format]
    pause_at = middle_content_index(stream_format, fixture_events(name))
    seen = read_with_stream_sse(server, name, stream_format, model, pause_at)
    check_recorded_stream(only_span(spans), seen, stream_format, server, pause_at)


@pytest.mark.parametrize("stream_format", sorted(TOOL_CALL_FIXTURES))
def test_stream_sse_marks_the_chunk_that_began_the_tool_call(server, spans, stream_format):
    name = TOOL_CALL_FIXTURES[stream_format]
    events = fixture_events(name)
    tool_at = first_tool_call(stream_format, events)
    seen = read_with_stream_sse(server, name, stream_format, "m", tool_at)
    assert [e.data for e in seen] == [e.data for e in events]
    span = only_span(spans)
    offsets = chunks_of(span).offsets
    assert span.attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] == tool_at
    assert offsets[tool_at] - offsets[tool_at - 1] >= PAUSE_US


@pytest.mark.parametrize("stream_format", sorted(FORMATS))
def test_astream_sse_records_every_event(server, spans, stream_format):
    name, _, model = FORMATS[stream_format]
    pause_at = middle_content_index(stream_format, fixture_events(name))

    async def consume() -> list[streamscope.StreamEvent]:
        async with (
            httpx.AsyncClient() as client,
            streamscope.astream_sse(
                client,
                "POST",
                server.url(f"/sse/{name}", pause_at=pause_at),
                format=stream_format,
                tracer_provider=PROVIDER,
                json={"model": model, "stream": True},
            ) as events,
        ):
            return [event async for event in events]

    seen = asyncio.run(consume())
    check_recorded_stream(only_span(spans), seen, stream_format, server, pause_at)


def test_exact_per_chunk_tokens_from_continuous_usage(server, spans):
    """vLLM's continuous usage stats: every chunk carries cumulative completion tokens; no estimate needed."""
    name = "vllm_chat_continuous_usage"
    events = fixture_events(name)
    with (
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url(f"/sse/{name}"),
            format="openai-chat",
            tracer_provider=PROVIDER,
            json={"model": "meta-llama/Llama-3.1-8B-Instruct", "stream": True},
        ) as stream,
    ):
        seen = list(stream)
    assert len(seen) == len(events)

    cumulative, previous, deltas = [], 0, []
    for event in events:
        total = event.payload["usage"]["completion_tokens"] if event.payload else previous
        cumulative.append(total)
        deltas.append(total - previous)
        previous = total
    assert cumulative == sorted(cumulative) and cumulative[-1] > 0

    span = only_span(spans)
    chunks = chunks_of(span)
    assert chunks.tokens == deltas
    assert sum(chunks.tokens) == cumulative[-1] == span.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS]
    assert chunks.content == [len(event_text("openai-chat", e).encode()) for e in events]
    assert sum(chunks.wire) == len(fixture_body(name))
    assert sc.STREAMSCOPE_TOKENS_ESTIMATED not in span.attributes
    assert span.attributes[sc.STREAMSCOPE_OUTCOME] == "completed"


CANCEL_AFTER = 2
"""Events the application reads before it leaves; the server stalls before the next one, so it has left."""


def check_cancelled(span: ReadableSpan, seen: list[streamscope.StreamEvent]) -> None:
    events = fixture_events("openai_chat")[:CANCEL_AFTER]
    assert [e.data for e in seen] == [e.data for e in events]
    attributes = span.attributes
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "cancelled"
    chunks = chunks_of(span)
    assert chunks.wire == [len(e.raw) for e in events]
    assert chunks.content == [len(event_text("openai-chat", e).encode()) for e in events]
    assert attributes[sc.STREAMSCOPE_CANCEL_OFFSET_US] >= chunks.offsets[-1]
    assert sc.ERROR_TYPE not in attributes
    assert span.status.status_code != StatusCode.ERROR


def test_leaving_the_block_early_is_cancelled(server, spans):
    seen = []
    with (
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url("/sse/openai_chat", pause_at=CANCEL_AFTER),
            format="openai-chat",
            tracer_provider=PROVIDER,
            json={"model": "gpt-4o-mini", "stream": True},
        ) as stream,
    ):
        for event in stream:
            seen.append(event)
            if len(seen) == CANCEL_AFTER:
                break
    check_cancelled(only_span(spans), seen)


def test_leaving_the_async_block_early_is_cancelled(server, spans):
    async def consume() -> list[streamscope.StreamEvent]:
        seen = []
        async with (
            httpx.AsyncClient() as client,
            streamscope.astream_sse(
                client,
                "POST",
                server.url("/sse/openai_chat", pause_at=CANCEL_AFTER),
                format="openai-chat",
                tracer_provider=PROVIDER,
                json={"model": "gpt-4o-mini", "stream": True},
            ) as stream,
        ):
            async for event in stream:
                seen.append(event)
                if len(seen) == CANCEL_AFTER:
                    break
        return seen

    seen = asyncio.run(consume())
    check_cancelled(only_span(spans), seen)


def test_body_ending_before_message_stop_is_disconnected(server, spans):
    name = "anthropic_messages"
    events = fixture_events(name)
    stop = [e.event for e in events].index("message_stop")
    served = events[:stop]
    with (
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url(f"/sse/{name}", events=stop),
            format="anthropic",
            tracer_provider=PROVIDER,
            json={"model": "claude-sonnet-4-5", "stream": True},
        ) as stream,
    ):
        seen = list(stream)

    assert [e.data for e in seen] == [e.data for e in served]
    span = only_span(spans)
    attributes = span.attributes
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"
    assert sc.STREAMSCOPE_CANCEL_OFFSET_US in attributes
    chunks = chunks_of(span)
    assert chunks.wire == [len(e.raw) for e in served]
    assert sum(chunks.wire) == len(b"".join(e.raw for e in served))
    assert chunks.content == [len(event_text("anthropic", e).encode()) for e in served]
    # what did arrive is still reported: message_start and message_delta came before the cut
    assert_stream_facts(span, "anthropic", served)


def test_connection_dropped_mid_body_is_disconnected(server, spans):
    name = "anthropic_messages"
    events = fixture_events(name)
    served = events[:5]
    seen = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.Client() as client,
        streamscope.stream_sse(
            client,
            "POST",
            server.url(f"/sse/{name}", events=len(served), abort=1),
            format="anthropic",
            tracer_provider=PROVIDER,
            json={"model": "claude-sonnet-4-5", "stream": True},
        ) as stream,
    ):
        for event in stream:
            seen.append(event)

    assert [e.data for e in seen] == [e.data for e in served]
    span = only_span(spans)
    assert span.attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"
    assert sc.STREAMSCOPE_CANCEL_OFFSET_US in span.attributes
    assert chunks_of(span).wire == [len(e.raw) for e in served]


def test_http_500_raises_and_records_error(server, spans):
    with (
        httpx.Client() as client,
        pytest.raises(httpx.HTTPStatusError) as raised,
        streamscope.stream_sse(
            client,
            "POST",
            server.url("/fail"),
            format="openai-chat",
            tracer_provider=PROVIDER,
            json={"model": "gpt-4o-mini", "stream": True},
        ) as stream,
    ):
        list(stream)

    assert raised.value.response.status_code == 500
    span = only_span(spans)
    attributes = span.attributes
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "error"
    assert attributes[sc.ERROR_TYPE] == "http_500"
    assert span.status.status_code == StatusCode.ERROR
    assert chunks_of(span).offsets == []
    (received,) = server.received
    assert_traceparent(received, span)


# --- the OpenAI client wrapper -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def openai_warmed_up(server: ReplayServer) -> None:
    """One uninstrumented round trip per API first: the SDK imports its response types lazily on first use
    (a few hundred milliseconds), which would otherwise hold back the first events of the measured stream."""
    with OpenAI(base_url=server.url("/v1"), api_key="test", max_retries=0) as client:
        list(client.chat.completions.create(model="warm-up", messages=[], stream=True))
        list(client.responses.create(model="warm-up", input="", stream=True))


@pytest.fixture
def openai_client(server, global_tracing, openai_warmed_up) -> Iterator[OpenAI]:
    client = streamscope.instrument_openai(
        OpenAI(base_url=server.url("/v1"), api_key="test", max_retries=0, timeout=10.0)
    )
    yield client
    client.close()


def check_openai_span(span: ReadableSpan, stream_format: str, events: list[WireEvent], server, pause_at) -> None:
    chunks = chunks_of(span)
    assert len(chunks.offsets) == len(events)
    assert chunks.wire == [0] * len(events)  # the OpenAI client parses the wire itself
    assert_content_and_estimated_tokens(chunks, stream_format, events)
    assert_timeline(chunks, span, pause_at)
    attributes = span.attributes
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
    assert attributes[sc.STREAMSCOPE_SIDE] == "client"
    assert attributes[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert attributes[sc.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert attributes[sc.SERVER_ADDRESS] == "127.0.0.1"
    assert attributes[sc.SERVER_PORT] == server.port
    assert_stream_facts(span, stream_format, events)
    (received,) = server.received
    assert_traceparent(received, span)


def chat_request(pause_at: int) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": "How do streams arrive?"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "extra_query": {"pause_at": pause_at},
    }


def responses_request(pause_at: int) -> dict[str, Any]:
    return {
        "model": "gpt-4o-mini",
        "input": "Is chunk timing real?",
        "stream": True,
        "extra_query": {"pause_at": pause_at},
    }


def check_chat_chunks(chunks: list[Any], events: list[WireEvent]) -> list[WireEvent]:
    """The SDK swallows [DONE]; every other event reaches the application with its text unchanged."""
    events = [e for e in events if e.data != "[DONE]"]
    assert [c.id for c in chunks] == [e.payload["id"] for e in events]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "".join(event_text("openai-chat", e) for e in events)
    assert chunks[-1].usage.completion_tokens == events[-1].payload["usage"]["completion_tokens"]
    return events


def check_responses_events(seen: list[Any], events: list[WireEvent]) -> list[WireEvent]:
    assert [e.type for e in seen] == [e.event for e in events]
    assert [e.sequence_number for e in seen] == [e.payload["sequence_number"] for e in events]
    text = "".join(e.delta for e in seen if e.type == "response.output_text.delta")
    assert text == "".join(event_text("openai-responses", e) for e in events)
    assert text == next(e.text for e in seen if e.type == "response.output_text.done")
    return events


def test_openai_client_chat_completions(server, spans, openai_client):
    events = fixture_events("openai_chat")
    pause_at = middle_content_index("openai-chat", events)
    chunks = list(openai_client.chat.completions.create(**chat_request(pause_at)))

    events = check_chat_chunks(chunks, events)
    assert server.received[0].path == "/v1/chat/completions"
    check_openai_span(only_span(spans), "openai-chat", events, server, pause_at)


def test_openai_client_responses(server, spans, openai_client):
    events = fixture_events("openai_responses")
    pause_at = middle_content_index("openai-responses", events)
    seen = list(openai_client.responses.create(**responses_request(pause_at)))

    events = check_responses_events(seen, events)
    assert server.received[0].path == "/v1/responses"
    check_openai_span(only_span(spans), "openai-responses", events, server, pause_at)


@pytest.mark.parametrize("wrapper", ["stream_sse", "instrument_openai"])
def test_the_first_byte_is_the_first_event_through_either_wrapper(server, spans, openai_client, wrapper):
    """One first byte, every wrapper: when the first event of the body arrived, not the response headers (the
    replay server sends its headers at once and pauses before its first event)."""
    if wrapper == "stream_sse":
        read_with_stream_sse(server, "openai_chat", "openai-chat", "gpt-4o-mini", pause_at=0)
    else:
        list(openai_client.chat.completions.create(**chat_request(pause_at=0)))
    span = only_span(spans)
    first_byte = span.attributes[sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US]
    assert PAUSE_US <= first_byte <= chunks_of(span).offsets[0]


@pytest.mark.parametrize("api", ["chat", "responses"])
def test_async_openai_client_streams(server, spans, global_tracing, openai_warmed_up, api):
    """``instrument_openai`` documents ``AsyncOpenAI`` too: ``await create(..., stream=True)`` must still work."""
    stream_format, name = {
        "chat": ("openai-chat", "openai_chat"),
        "responses": ("openai-responses", "openai_responses"),
    }[api]
    events = fixture_events(name)
    pause_at = middle_content_index(stream_format, events)

    async def consume() -> list[Any]:
        async with AsyncOpenAI(base_url=server.url("/v1"), api_key="test", max_retries=0, timeout=10.0) as client:
            streamscope.instrument_openai(client)
            if api == "chat":
                stream = await client.chat.completions.create(**chat_request(pause_at))
            else:
                stream = await client.responses.create(**responses_request(pause_at))
            return [item async for item in stream]

    seen = asyncio.run(consume())
    events = check_chat_chunks(seen, events) if api == "chat" else check_responses_events(seen, events)
    check_openai_span(only_span(spans), stream_format, events, server, pause_at)
