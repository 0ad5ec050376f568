"""`streamscope replay`: one recorded stream's rhythm served again as SSE, so a team can feed it into its own client
renderer (or a page with the browser snippet) and watch what that rhythm does there.

The timing is the recording's: each chunk leaves at its recorded offset from the request, with optional pauses
injected before chosen chunks. The text is placeholder ASCII of each chunk's recorded byte length; what the model
said is not stored.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, StreamingResponse

from streamscope.errors import StreamscopeError
from streamscope_cli.query import Query

TRACE_ID = re.compile(r"[0-9a-f]{32}")
SPAN_ID = re.compile(r"[0-9a-f]{16}")
WHOLE_TIMELINES = ("full", "arrivals")
"""``streams.coverage`` of the streams whose every chunk's time is known: the only ones a replay can be true to."""

_TEXT = b"The quick brown fox jumps over the lazy dog. "


@dataclass(frozen=True)
class Recording:
    """One stored stream: when each chunk arrived (µs from the request) and how many content bytes it carried."""

    trace_id: str
    span_id: str
    side: str
    model: str
    offsets_us: tuple[int, ...]
    content_bytes: tuple[int, ...]


@dataclass(frozen=True)
class Pause:
    """``ms`` of silence injected before chunk ``index`` (0 is the first chunk): it and every later chunk wait."""

    index: int
    ms: float

    @classmethod
    def parse(cls, text: str) -> Pause:
        """``INDEX:MS``, for example ``12:1500``."""
        index, sep, ms = text.partition(":")
        try:
            pause = cls(int(index), float(ms)) if sep else None
        except ValueError:
            pause = None
        if pause is None or pause.index < 0 or not 0 <= pause.ms < float("inf"):
            raise ValueError(f"a pause is INDEX:MS with a chunk index ≥ 0 and a length in ms ≥ 0, not {text!r}")
        return pause


def load_recording(run: Query, trace_id: str, side: str, span_id: str | None = None) -> Recording:
    """The stream of ``trace_id`` seen from ``side``; ``span_id`` picks one where the trace holds several."""
    if not TRACE_ID.fullmatch(trace_id) or (span_id is not None and not SPAN_ID.fullmatch(span_id)):
        raise StreamscopeError("a trace id is 32 lowercase hex digits and a span id 16")
    model = "if(response_model != '', response_model, request_model)"
    streams = run(
        f"SELECT span_id, {model}, coverage FROM streams WHERE trace_id = '{trace_id}' AND side = '{side}'"
        + (f" AND span_id = '{span_id}'" if span_id else "")
        + " ORDER BY start_time, span_id"
    ).rows
    if not streams:
        sides = sorted({str(row[0]) for row in run(f"SELECT side FROM streams WHERE trace_id = '{trace_id}'").rows})
        where = f"its sides: {', '.join(sides)}" if sides else "no stream of that trace is stored"
        raise StreamscopeError(f"no {side} stream{f' {span_id}' if span_id else ''} in trace {trace_id} ({where})")
    if len(streams) > 1:
        spans = ", ".join(str(row[0]) for row in streams)
        raise StreamscopeError(
            f"trace {trace_id} holds {len(streams)} {side} streams; pick one with --span-id: {spans}"
        )
    span, model, coverage = (str(value) for value in streams[0])
    if coverage not in WHOLE_TIMELINES:
        raise StreamscopeError(
            f"stream {span} of trace {trace_id} has no whole timeline (coverage {coverage}): "
            "a replay of it would play a rhythm that never happened"
        )
    chunks = run(
        "SELECT offset_us, content_bytes FROM chunk_timeline "
        f"WHERE trace_id_bytes = unhex('{trace_id}') AND span_id_bytes = unhex('{span}') ORDER BY seq"
    ).rows
    return Recording(
        trace_id, span, side, model, tuple(int(row[0]) for row in chunks), tuple(int(row[1]) for row in chunks)
    )


def schedule(recording: Recording, pauses: Sequence[Pause] = ()) -> list[tuple[int, int]]:
    """``(µs from the request, content bytes)`` for each chunk: the recorded offset, later by every pause at or
    before its index."""
    beyond = [p for p in pauses if p.index >= len(recording.offsets_us)]
    if beyond:
        raise StreamscopeError(
            f"the stream has {len(recording.offsets_us)} chunks (indices 0 to {len(recording.offsets_us) - 1}); "
            f"no chunk {beyond[0].index} to pause before"
        )
    return [
        (offset + round(sum(p.ms for p in pauses if p.index <= i) * 1000), size)
        for i, (offset, size) in enumerate(zip(recording.offsets_us, recording.content_bytes, strict=True))
    ]


def placeholder(size: int, start: int) -> str:
    """``size`` bytes of ASCII text, continuing a fixed sentence from byte ``start`` of the stream."""
    repeated = _TEXT * ((start + size) // len(_TEXT) + 1)
    return repeated[start % len(_TEXT) : start % len(_TEXT) + size].decode("ascii")


def chunk_events(recording: Recording, timing: Sequence[tuple[int, int]]) -> list[tuple[int, bytes]]:
    """Each chunk's SSE event in the OpenAI chat-completion shape with the moment it is due, then the end of the
    answer and ``[DONE]`` right after the last chunk. A chunk without content (a role or keep-alive delta) stays
    one, so the reader sees as many events as were recorded."""
    base: dict[str, Any] = {"id": f"chatcmpl-replay-{recording.trace_id[:12]}", "object": "chat.completion.chunk"}
    base |= {"created": int(time.time()), "model": recording.model or "replay"}

    def event(delta: dict[str, str], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return f"data: {json.dumps({**base, 'choices': [choice]}, separators=(',', ':'))}\n\n".encode()

    events: list[tuple[int, bytes]] = []
    shown = 0
    for at_us, size in timing:
        if size:
            events.append((at_us, event({"content": placeholder(size, shown)})))
            shown += size
        else:
            events.append((at_us, event({"role": "assistant", "content": ""} if not shown else {})))
    end = timing[-1][0] if timing else 0
    return [*events, (end, event({}, "stop")), (end, b"data: [DONE]\n\n")]


async def _paced(events: Sequence[tuple[int, bytes]]) -> AsyncIterator[bytes]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    for at_us, data in events:
        delay = start + at_us / 1e6 - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        yield data


def replay_app(recording: Recording, pauses: Sequence[Pause] = ()) -> FastAPI:
    """An app that replays ``recording`` to every request, from the start: ``POST /v1/chat/completions`` for
    OpenAI-compatible clients, ``GET /v1/replay`` for a page's ``EventSource``. Any origin may read it."""
    timing = schedule(recording, pauses)
    app = FastAPI(title="streamscope replay", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"])

    def stream() -> StreamingResponse:
        headers = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        events = chunk_events(recording, timing)
        return StreamingResponse(_paced(events), media_type="text/event-stream", headers=headers)

    @app.get("/")
    async def about() -> dict[str, Any]:
        return {
            "trace_id": recording.trace_id,
            "span_id": recording.span_id,
            "side": recording.side,
            "chunks": len(timing),
            "pauses": [{"index": p.index, "ms": p.ms} for p in pauses],
        }

    @app.get("/v1/replay")
    async def replay() -> StreamingResponse:
        return stream()

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(request: Request) -> StreamingResponse | JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and body.get("stream") is False:
            message = 'a replay is a stream: send "stream": true (or leave it out)'
            return JSONResponse({"error": {"message": message, "type": "invalid_request_error"}}, status_code=400)
        return stream()

    return app


def serve_replay(
    recording: Recording,
    pauses: Sequence[Pause],
    host: str,
    port: int,
    *,
    announce: Callable[[str], None],
    stop: threading.Event | None = None,
) -> None:
    """Serve the replay until a signal (or ``stop``)."""
    from streamscope_collector.serving import BackgroundServer, stop_on_signals, wait_until_set

    stop = stop or threading.Event()
    app = replay_app(recording, pauses)
    server = BackgroundServer(app, host, port, name="replay").start()
    try:
        seconds = (schedule(recording, pauses)[-1][0] / 1e6) if recording.offsets_us else 0.0
        url = f"http://{host}:{server.port}"
        announce(
            f"Replaying the {recording.side} stream {recording.span_id} of trace {recording.trace_id} "
            f"({len(recording.offsets_us)} chunks over {seconds:.2f} s) to every request:\n"
            f"  POST {url}/v1/chat/completions  (OpenAI-compatible, base URL {url}/v1)\n"
            f"  GET  {url}/v1/replay            (EventSource)\n"
            "Ctrl-C stops."
        )
        with stop_on_signals(stop):
            wait_until_set(stop)
    finally:
        server.stop()
