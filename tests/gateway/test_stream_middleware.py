"""StreamMiddleware on a real uvicorn server: the server side of every event stream a Starlette app sends, recorded with
no code in its endpoints, read by the SDK's own client recorder over loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

import streamscope
from streamscope import semconv as sc
from tests.gateway.sse_app import BLOCKED_EVENT, WORDS, RunningApp, chat_events, running_app
from tests.support import int64s, memory_provider, wait_until


@pytest.fixture
def app() -> Iterator[RunningApp]:
    with running_app() as running:
        yield running


def stream_spans(exporter: InMemorySpanExporter, count: int) -> list[ReadableSpan]:
    spans = wait_until(
        lambda: (found := exporter.get_finished_spans()) and len(found) >= count and found, f"{count} spans", 10.0
    )
    return list(spans)


def read_stream(url: str, path: str, body: dict[str, Any], leave_after: int | None = None) -> ReadableSpan:
    """Stream ``path`` with the SDK's client recorder; leave after ``leave_after`` events. The client's span."""
    provider, spans = memory_provider()
    with (
        httpx.Client(base_url=url) as client,
        streamscope.stream_sse(
            client, "POST", path, json=body, format=streamscope.asgi.format_for_path(path), tracer_provider=provider
        ) as events,
    ):
        for index, _ in enumerate(events):
            if index + 1 == leave_after:
                break
    (span,) = spans.get_finished_spans()
    return span


def chunks(span: ReadableSpan, attribute: str) -> list[int]:
    return int64s(span.attributes[attribute])


def test_every_event_of_a_stream_is_a_chunk_of_the_server_span_in_the_clients_trace(app: RunningApp) -> None:
    client = read_stream(app.url, "/v1/chat/completions", {"model": "m", "stream": True})

    (server,) = stream_spans(app.spans, 1)
    assert server.kind is SpanKind.SERVER
    assert server.context.trace_id == client.context.trace_id
    assert server.parent is not None and server.parent.span_id == client.context.span_id
    assert server.name == "chat m"
    attributes = server.attributes
    assert attributes[sc.STREAMSCOPE_SIDE] == "server"
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
    assert attributes[sc.GEN_AI_REQUEST_MODEL] == attributes[sc.GEN_AI_RESPONSE_MODEL] == "m"
    assert attributes[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert attributes[sc.HTTP_ROUTE] == "/v1/chat/completions"
    assert list(attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == ["stop"]
    assert attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == len(WORDS)
    for each in (sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES, sc.STREAMSCOPE_CHUNKS_WIRE_BYTES):
        assert chunks(server, each) == chunks(client, each), each
    assert chunks(server, sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES)[1 : 1 + len(WORDS)] == [len(w) for w in WORDS]
    assert attributes[sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US] <= chunks(server, sc.STREAMSCOPE_CHUNKS_OFFSET_US)[0]


def test_the_path_picks_the_stream_format(app: RunningApp) -> None:
    client = read_stream(app.url, "/v1/messages", {"model": "m", "stream": True})

    (server,) = stream_spans(app.spans, 1)
    assert server.attributes[sc.GEN_AI_PROVIDER_NAME] == "anthropic"
    assert server.attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == len(WORDS)
    assert list(server.attributes[sc.GEN_AI_RESPONSE_FINISH_REASONS]) == ["end_turn"]
    content = chunks(server, sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES)
    assert sum(content) == len("".join(WORDS).encode())
    assert content == chunks(client, sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES)


def test_a_client_that_leaves_mid_stream_is_a_disconnect(app: RunningApp) -> None:
    body = {"model": "m", "stream": True, "pace_s": 0.02, "repeat": 20}
    client = read_stream(app.url, "/v1/chat/completions", body, leave_after=3)

    assert client.attributes[sc.STREAMSCOPE_OUTCOME] == "cancelled"
    (server,) = stream_spans(app.spans, 1)
    assert server.attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"
    offsets = chunks(server, sc.STREAMSCOPE_CHUNKS_OFFSET_US)
    assert 3 <= len(offsets) < 20 * len(WORDS)
    assert server.attributes[sc.STREAMSCOPE_CANCEL_OFFSET_US] >= offsets[2]


def test_answers_that_are_not_streams_are_not_recorded(app: RunningApp) -> None:
    with httpx.Client(base_url=app.url) as client:
        answer = client.post("/v1/chat/completions", json={"model": "m"})
        assert answer.json()["choices"][0]["message"]["content"] == "".join(WORDS)
    read_stream(app.url, "/v1/chat/completions", {"model": "m", "stream": True})

    (only,) = stream_spans(app.spans, 1)
    assert len(chunks(only, sc.STREAMSCOPE_CHUNKS_OFFSET_US)) == len(chat_events(WORDS))


def test_a_stream_asked_for_and_refused_is_an_error(app: RunningApp) -> None:
    with httpx.Client(base_url=app.url) as client:
        assert client.post("/v1/chat/completions", json={"model": "refuse", "stream": True}).status_code == 400

    (server,) = stream_spans(app.spans, 1)
    assert server.attributes[sc.STREAMSCOPE_OUTCOME] == "error"
    assert server.attributes[sc.ERROR_TYPE] == "http_400"
    assert server.attributes[sc.GEN_AI_REQUEST_MODEL] == "refuse"


def test_a_server_whose_own_loop_was_held_says_so_on_its_span(app: RunningApp) -> None:
    read_stream(app.url, "/v1/chat/completions", {"model": "m", "stream": True, "block_ms": 300})

    (server,) = stream_spans(app.spans, 1)
    assert server.attributes[sc.STREAMSCOPE_HOST_WATCH] == "asyncio"
    delays = chunks(server, sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US)
    # the loop did not run for 300 ms before that event went out; its heartbeat was due within 20 ms of the start
    assert delays[BLOCKED_EVENT] >= 280_000
    assert sc.STREAMSCOPE_CHUNKS_HOST_HELD_US not in server.attributes  # a reader's figure, not a sender's
