"""ServerStream on a real uvicorn server, read by the real client wrapper over loopback."""

from __future__ import annotations

import asyncio
import itertools
import json

import httpx
import pytest
from fastapi import FastAPI, Request
from fastapi.responses import RedirectResponse
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope
from streamscope import semconv as sc
from streamscope_collector.serving import BackgroundServer
from tests.sse_fixtures import TOOL_CALL_FIXTURES, carries_tool_call, first_tool_call, fixture_events
from tests.support import int64s, memory_provider, wait_until

WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"] * 5


@pytest.fixture
def engine():
    server_provider, server_spans = memory_provider()
    generated_after_cancel = {"tokens": 0}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        stream = streamscope.ServerStream(
            request, provider="vllm", request_model="m", node_name="gpu-3", tracer_provider=server_provider
        )

        async def events():
            sent = 0
            try:
                for word in WORDS:
                    await asyncio.sleep(0.01)
                    chunk = {"id": "chatcmpl-1", "model": "m", "choices": [{"index": 0, "delta": {"content": word}}]}
                    yield f"data: {json.dumps(chunk)}\n\n"
                    sent += 1
                yield "data: [DONE]\n\n"
            finally:
                if sent < len(WORDS):  # the engine would still have been generating: report the tax
                    stream.add_tokens_after_cancel(7)
                    generated_after_cancel["tokens"] = 7

        return stream.response(events())

    @app.post("/moved")
    async def moved() -> RedirectResponse:
        return RedirectResponse("/v1/chat/completions", status_code=307)

    server = BackgroundServer(app).start()
    yield f"http://127.0.0.1:{server.port}", server_spans, generated_after_cancel
    server.stop()


def wait_for_spans(exporter: InMemorySpanExporter, count: int, timeout_s: float = 5.0) -> tuple[ReadableSpan, ...]:
    """The spans ``exporter`` has, once there are at least ``count``."""

    def finished() -> tuple[ReadableSpan, ...] | None:
        spans = exporter.get_finished_spans()
        return spans if len(spans) >= count else None

    return wait_until(finished, f"{count} finished spans", timeout_s, interval_s=0.02)


def test_server_span_continues_the_client_trace_and_times_every_chunk(engine):
    url, server_spans, _ = engine
    client_provider, client_spans = memory_provider()
    with (
        httpx.Client(base_url=url) as client,
        streamscope.stream_sse(
            client, "POST", "/v1/chat/completions", json={"model": "m", "stream": True}, tracer_provider=client_provider
        ) as events,
    ):
        text = "".join(e.payload["choices"][0]["delta"]["content"] for e in events if e.payload)
    assert text == "".join(WORDS)
    (client_span,) = client_spans.get_finished_spans()
    (server_span,) = wait_for_spans(server_spans, 1)
    assert server_span.context.trace_id == client_span.context.trace_id
    assert server_span.parent.span_id == client_span.context.span_id
    server = server_span.attributes
    assert server[sc.STREAMSCOPE_SIDE] == "server"
    assert server[sc.STREAMSCOPE_OUTCOME] == "completed"
    assert server[sc.STREAMSCOPE_NODE_NAME] == "gpu-3"
    assert server[sc.HTTP_ROUTE] == "/v1/chat/completions"
    assert int64s(server[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES]) == [len(w) for w in WORDS] + [0]
    assert len(int64s(client_span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) == len(WORDS) + 1
    emitted = int64s(server[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    content_emits = emitted[:-1]  # the last chunk, [DONE], follows the last word at once
    assert all(b - a >= 9_000 for a, b in itertools.pairwise(content_emits))  # the engine's 10 ms pacing


def test_a_client_that_goes_away_is_a_disconnect_with_the_cancellation_tax(engine):
    url, server_spans, generated = engine
    client_provider, client_spans = memory_provider()
    with (
        httpx.Client(base_url=url) as client,
        streamscope.stream_sse(
            client, "POST", "/v1/chat/completions", json={"model": "m"}, tracer_provider=client_provider
        ) as events,
    ):
        for i, _ in enumerate(events):
            if i == 2:
                break
    (client_span,) = client_spans.get_finished_spans()
    assert client_span.attributes[sc.STREAMSCOPE_OUTCOME] == "cancelled"
    assert sc.STREAMSCOPE_CANCEL_OFFSET_US in client_span.attributes
    (server_span,) = wait_for_spans(server_spans, 1)
    server = server_span.attributes
    assert server[sc.STREAMSCOPE_OUTCOME] == "disconnected"
    assert server[sc.STREAMSCOPE_CANCEL_OFFSET_US] >= int64s(server[sc.STREAMSCOPE_CHUNKS_OFFSET_US])[2]
    assert server[sc.STREAMSCOPE_TOKENS_AFTER_CANCEL] == generated["tokens"] == 7
    assert len(int64s(server[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) < len(WORDS)


def test_send_options_such_as_follow_redirects_are_honoured(engine):
    url, _, _ = engine
    client_provider, client_spans = memory_provider()
    with (
        httpx.Client(base_url=url) as client,
        streamscope.stream_sse(
            client, "POST", "/moved", json={"model": "m"}, follow_redirects=True, tracer_provider=client_provider
        ) as events,
    ):
        assert sum(1 for e in events if e.payload) == len(WORDS)
    (span,) = client_spans.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_OUTCOME] == "completed"


@pytest.mark.parametrize("counted", [False, True], ids=["parsed", "server-chunks"])
def test_server_and_client_agree_on_the_chunk_that_began_the_tool_call(counted):
    """The server marks it from the payloads it sends, or from ServerChunk.tool_call when the app counts."""
    events = fixture_events(TOOL_CALL_FIXTURES["openai-chat"])
    server_provider, server_spans = memory_provider()
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        stream = streamscope.ServerStream(request, provider="vllm", tracer_provider=server_provider)

        async def payloads():
            for event in events:
                await asyncio.sleep(0.002)
                calls = carries_tool_call("openai-chat", event)
                yield streamscope.ServerChunk(event.raw, 0, 0, tool_call=calls) if counted else event.raw

        return stream.response(payloads())

    server = BackgroundServer(app).start()
    try:
        client_provider, client_spans = memory_provider()
        with (
            httpx.Client(base_url=f"http://127.0.0.1:{server.port}") as client,
            streamscope.stream_sse(
                client, "POST", "/v1/chat/completions", json={"model": "m"}, tracer_provider=client_provider
            ) as seen,
        ):
            assert len(list(seen)) == len(events)
        (server_span,) = wait_for_spans(server_spans, 1)
    finally:
        server.stop()
    (client_span,) = client_spans.get_finished_spans()
    expected = first_tool_call("openai-chat", events)
    assert server_span.attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] == expected
    assert client_span.attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] == expected
