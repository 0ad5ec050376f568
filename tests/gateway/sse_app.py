"""A small Starlette app that streams as engines do, served by uvicorn in a thread of the test's process.

``POST /v1/chat/completions`` streams one Chat Completions chunk per word, a usage chunk and ``[DONE]`` when the body
asks for a stream (``pace_s`` apart, if given; gzip-encoded, flushed per event, with ``"gzip": true``; its event
loop blocked before one event with ``"block_ms"``), answers JSON otherwise, and 400 for the model ``refuse``;
``POST /v1/messages`` streams Anthropic's events; ``POST /big`` streams ``count`` events of ``size`` bytes, counting
how many it has handed to the server. Every request's headers are kept, in order.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

import streamscope
from streamscope_collector.serving import BackgroundServer
from tests.support import memory_provider

WORDS = ["alpha ", "beta ", "gamma ", "delta ", "epsilon ", "zeta ", "eta ", "theta"]
BIG_EVENT_BYTES = 65_536
BLOCKED_EVENT = 4
"""With ``"block_ms": N``, the app blocks its event loop for N ms before sending this event."""


@dataclass
class Seen:
    """What the app saw: each request's headers, and how many events ``/big`` handed to the server."""

    headers: list[dict[str, str]] = field(default_factory=list)
    big_events_sent: int = 0


def chat_chunk(delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return "data: " + json.dumps({"id": "chatcmpl-1", "model": "m", "choices": [choice], **extra}) + "\n\n"


def chat_events(words: list[str]) -> list[str]:
    """The SSE events of a stream of ``words``, as an OpenAI-compatible engine sends them with usage asked for."""
    usage = {"prompt_tokens": 3, "completion_tokens": len(words), "total_tokens": 3 + len(words)}
    return [
        chat_chunk({"role": "assistant", "content": ""}),
        *(chat_chunk({"content": word}) for word in words),
        chat_chunk({}, "stop"),
        "data: " + json.dumps({"id": "chatcmpl-1", "model": "m", "choices": [], "usage": usage}) + "\n\n",
        "data: [DONE]\n\n",
    ]


def anthropic_events(words: list[str]) -> list[str]:
    def event(kind: str, **payload: Any) -> str:
        return f"event: {kind}\ndata: {json.dumps({'type': kind, **payload})}\n\n"

    return [
        event("message_start", message={"id": "msg_1", "model": "m", "usage": {"input_tokens": 3}}),
        event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        *(event("content_block_delta", index=0, delta={"type": "text_delta", "text": w}) for w in words),
        event("content_block_stop", index=0),
        event("message_delta", delta={"stop_reason": "end_turn"}, usage={"output_tokens": len(words)}),
        event("message_stop"),
    ]


async def gzipped(events: AsyncIterator[str]) -> AsyncIterator[bytes]:
    """``events`` as one gzip stream, flushed after each so every event reaches the client when it is sent."""
    compressor = zlib.compressobj(wbits=16 + zlib.MAX_WBITS)
    async for event in events:
        yield compressor.compress(event.encode()) + compressor.flush(zlib.Z_SYNC_FLUSH)
    yield compressor.flush()


def create_app(seen: Seen, tracer_provider: TracerProvider) -> Starlette:
    """The app, with ``StreamMiddleware`` added as a server adds middleware it is told to load (vLLM's
    ``--middleware``: ``app.add_middleware``)."""

    async def paced(events: list[str], pace_s: float, block_ms: float = 0) -> AsyncIterator[str]:
        for index, event in enumerate(events):
            if pace_s:
                await asyncio.sleep(pace_s)
            if block_ms and index == BLOCKED_EVENT:  # synchronous work on the loop: the server's own host held
                time.sleep(block_ms / 1000)
            yield event

    async def chat(request: Request) -> Response:
        seen.headers.append(dict(request.headers))
        body = await request.json()
        if body.get("model") == "refuse":
            return JSONResponse({"error": {"message": "no such model", "type": "invalid_request_error"}}, 400)
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(WORDS)}
            return JSONResponse({"id": "chatcmpl-1", "choices": [{"index": 0, "message": message}]})
        events = chat_events(WORDS * body.get("repeat", 1))
        if body.get("gzip"):
            return StreamingResponse(
                gzipped(paced(events, body.get("pace_s", 0.0))),
                media_type="text/event-stream",
                headers={"content-encoding": "gzip"},
            )
        return StreamingResponse(
            paced(events, body.get("pace_s", 0.0), body.get("block_ms", 0)), media_type="text/event-stream"
        )

    async def messages(request: Request) -> Response:
        seen.headers.append(dict(request.headers))
        return StreamingResponse(paced(anthropic_events(WORDS), 0.0), media_type="text/event-stream")

    async def big(request: Request) -> Response:
        seen.headers.append(dict(request.headers))
        body = await request.json()

        async def events() -> AsyncIterator[bytes]:
            payload = b"data: " + b"x" * (body.get("size", BIG_EVENT_BYTES) - 8) + b"\n\n"
            for _ in range(body["count"]):
                yield payload
                seen.big_events_sent += 1

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/big", big, methods=["POST"]),
        ]
    )
    app.add_middleware(streamscope.StreamMiddleware, tracer_provider=tracer_provider)
    return app


@dataclass
class RunningApp:
    url: str
    seen: Seen
    spans: InMemorySpanExporter
    """The server side of each stream, recorded by ``StreamMiddleware``."""


@contextmanager
def running_app() -> Iterator[RunningApp]:
    """The app behind ``StreamMiddleware`` (side server, spans kept in memory), on a free loopback port."""
    provider, spans = memory_provider()
    seen = Seen()
    server = BackgroundServer(create_app(seen, provider)).start()
    try:
        yield RunningApp(f"http://127.0.0.1:{server.port}", seen, spans)
    finally:
        server.stop()
