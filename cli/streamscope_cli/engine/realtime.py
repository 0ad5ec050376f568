"""The simulated engine's Realtime-style WebSocket (``/v1/realtime``): OpenAI's Realtime API, text only.

A session opens with ``session.created``; each ``response.create`` the client sends (``response.max_output_tokens``,
``response.instructions`` as the prompt, and the engine's ``sim`` knobs) is scheduled on the node's engine like any
request, and answered with ``response.created``, one ``response.output_text.delta`` a chunk (the node's tokens per
chunk), ``response.output_text.done`` and ``response.done`` with the usage. A request the engine refuses gets an
``error`` event, and the session goes on. Each response is recorded as a server stream (``ServerWebSocketResponse``)
in the trace its ``response.metadata.traceparent`` names, else the handshake's, and what delayed its events is
ground truth in that trace.
"""

from __future__ import annotations

import json
import random
import uuid
from typing import TYPE_CHECKING, Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from streamscope import ServerWebSocketResponse
from streamscope_cli.engine.truth import StreamTruth, chunked
from streamscope_cli.engine.words import words
from streamscope_cli.workload.ground_truth import trace_id_of

if TYPE_CHECKING:
    from streamscope_cli.engine.app import EngineNode


async def serve_realtime(websocket: WebSocket, node: EngineNode) -> None:
    """One client's session, until it leaves."""
    await websocket.accept()
    session = {"id": f"sess_{uuid.uuid4().hex[:20]}", "object": "realtime.session", "model": node.config.model}
    await websocket.send_text(_event("session.created", session=session))
    try:
        while True:
            try:
                message = json.loads(await websocket.receive_text())
            except ValueError:
                await websocket.send_text(_error("a client event is one JSON object"))
                continue
            if isinstance(message, dict) and message.get("type") == "response.create":
                await _respond(websocket, node, message.get("response") or {})
    except WebSocketDisconnect:
        return


async def _respond(websocket: WebSocket, node: EngineNode, options: dict[str, Any]) -> None:
    """One response, streamed as the engine generates it."""
    length = options.get("max_output_tokens", node.config.default_max_tokens)
    body = {
        "messages": [{"role": "user", "content": str(options.get("instructions") or "hello")}],
        "max_tokens": length,
        "sim": options.get("sim"),
    }
    try:
        sequence = node.sequence_for(body, chat=True)
        generation = node.engine.submit(sequence)
    except ValueError as exc:
        await websocket.send_text(_error(str(exc)))
        return
    response_id = f"resp_{sequence.request_id[4:]}"
    rng = random.Random(f"{node.config.seed}:{sequence.request_id}")
    sent = 0
    text: list[str] = []
    metadata = options.get("metadata")
    carrier = metadata if isinstance(metadata, dict) and "traceparent" in metadata else dict(websocket.headers)
    response = ServerWebSocketResponse(
        websocket,
        provider=node.config.flavor,
        request_model=node.config.model,
        carrier=carrier,
        node_name=node.config.node,
        tracer_provider=node.tracer_provider,
    )
    truth = StreamTruth(node.sink, node.config.node, trace_id_of(carrier.get("traceparent")), sequence.request_id)

    async def delta(tokens: int) -> None:
        nonlocal sent
        piece = words(rng, tokens, sent)
        sent += tokens
        text.append(piece)
        await response.send_text(
            _event("response.output_text.delta", response_id=response_id, output_index=0, content_index=0, delta=piece)
        )

    try:
        async with response:
            await response.send_text(_event("response.created", response={"id": response_id, "status": "in_progress"}))
            async for tokens in chunked(generation, node.output.tokens_per_chunk, truth, first_index=1):
                await delta(tokens)  # event 0 was response.created
            await response.send_text(_event("response.output_text.done", response_id=response_id, text="".join(text)))
            usage = {"input_tokens": sequence.prompt_tokens, "output_tokens": sent}
            usage["total_tokens"] = usage["input_tokens"] + sent
            done = {"id": response_id, "object": "realtime.response", "status": "completed", "usage": usage}
            await response.send_text(_event("response.done", response=done))
    finally:
        node.engine.release(sequence.request_id)


def _event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, "event_id": f"event_{uuid.uuid4().hex[:16]}", **fields}, separators=(",", ":"))


def _error(message: str) -> str:
    return _event("error", error={"type": "invalid_request_error", "message": message})
