"""A small OpenAI-compatible streaming server whose token generator has jitter and occasional stalls.

It stands in for a serving engine in ``streamscope demo``: lognormal time to first token, lognormal gaps
between tokens, and now and then a stall of hundreds of milliseconds, so the demo's distributions have the
long tail that averages hide. Each stream is recorded on the server side with ``ServerStream``.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from streamscope._internal.server import ServerStream

_WORDS = tuple(
    "the stream of tokens arrives at the screen in a rhythm that users feel long before any dashboard shows "
    "it a pause in the middle of an answer reads as a freeze even when the average looks healthy".split()
)


@dataclass(frozen=True)
class JitterProfile:
    ttft_ms: float = 180.0
    ttft_sigma: float = 0.5
    gap_ms: float = 22.0
    gap_sigma: float = 0.35
    stall_probability: float = 0.006
    """Chance per token that the generator pauses before it."""
    stall_ms: tuple[float, float] = (450.0, 1500.0)
    tokens: tuple[int, int] = (40, 140)


def create_app(
    profile: JitterProfile | None = None,
    *,
    model: str = "demo-llm",
    node_name: str = "demo-node-0",
    seed: int | None = None,
    tracer_provider: Any = None,
) -> FastAPI:
    profile = profile or JitterProfile()
    rng = random.Random(seed)
    app = FastAPI(title="streamscope demo engine", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model, "object": "model", "owned_by": "streamscope"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"error": {"message": "body must be JSON", "type": "invalid_request_error"}}, 400)
        count = rng.randint(*profile.tokens)
        words = [rng.choice(_WORDS) for _ in range(count)]
        if not body.get("stream"):
            return _completion(model, words)
        stream = ServerStream(
            request,
            provider="streamscope.demo",
            request_model=str(body.get("model") or model),
            node_name=node_name,
            engine_request_id=uuid.uuid4().hex,
            tracer_provider=tracer_provider,
        )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return stream.response(_events(profile, rng, model, words, include_usage))

    return app


async def _events(
    profile: JitterProfile, rng: random.Random, model: str, words: list[str], include_usage: bool
) -> AsyncIterator[str]:
    completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
    created = int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, usage: dict[str, int] | None = None) -> str:
        choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
        document = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        }
        if usage:
            document["usage"] = usage
        return f"data: {json.dumps(document, separators=(',', ':'))}\n\n"

    await asyncio.sleep(rng.lognormvariate(math.log(profile.ttft_ms), profile.ttft_sigma) / 1000)
    yield chunk({"role": "assistant", "content": ""})
    for i, word in enumerate(words):
        if i:
            pause = rng.lognormvariate(math.log(profile.gap_ms), profile.gap_sigma)
            if rng.random() < profile.stall_probability:
                pause += rng.uniform(*profile.stall_ms)
            await asyncio.sleep(pause / 1000)
        yield chunk({"content": f" {word}" if i else word})
    yield chunk({}, finish="stop")
    if include_usage:
        yield chunk({}, usage={"prompt_tokens": 12, "completion_tokens": len(words), "total_tokens": 12 + len(words)})
    yield "data: [DONE]\n\n"


def _completion(model: str, words: list[str]) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": " ".join(words)}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": len(words), "total_tokens": 12 + len(words)},
    }
