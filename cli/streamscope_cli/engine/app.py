"""The simulated engine's HTTP face: the OpenAI API a real vLLM or SGLang server offers.

``POST /v1/chat/completions`` and ``POST /v1/completions`` (streamed as SSE with ``[DONE]`` and the usage
chunk of ``stream_options.include_usage``, or not streamed), Anthropic's ``POST /v1/messages`` (its named
events), a Realtime-style WebSocket (``/v1/realtime``, engine/realtime.py), Ollama's ``POST /api/chat`` and
``POST /api/generate``, ``GET /v1/models``, ``GET /health``,
``GET /metrics`` and, for its simulated GPU, what dcgm-exporter would serve (``GET /dcgm/metrics``). Output knobs
shape the stream as providers do: tokens per SSE chunk, and burst-at-head (hold the first tokens, release them
at once, then trickle). Requests may carry a ``sim`` object with exact prompt sizes, a shared-prefix key and a
speculative-decoding collapse window, so scenarios control the workload precisely; without it, sizes are
estimated from the text.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST

from streamscope import semconv as sc
from streamscope.formats import estimate_tokens, json_answer_requested
from streamscope.server import ServerChunk, ServerStream
from streamscope_cli.engine.gpu import SimulatedGpu
from streamscope_cli.engine.metrics import exposition, make_metrics
from streamscope_cli.engine.realtime import serve_realtime
from streamscope_cli.engine.runtime import Delay, Engine
from streamscope_cli.engine.scheduler import Scheduler, SchedulerConfig, Sequence
from streamscope_cli.engine.truth import StreamTruth
from streamscope_cli.engine.words import WORDS, words
from streamscope_cli.workload.ground_truth import GroundTruth, GroundTruthSink, trace_id_of

_JSON_FIELDS = ("answer", "detail")
"""The string fields of a JSON answer, each a share of its tokens; a number, ``tokens``, closes it."""


@dataclass(frozen=True)
class OutputConfig:
    tokens_per_chunk: int = 1
    burst_at_head: int = 0
    """Hold the first this-many tokens and release them together."""
    show_drafts: bool = False
    """With speculative decoding: show each step's draft tokens before they are verified, and withdraw the ones
    the verifier rejects (``"retract"`` in the next delta). One event a step: tokens_per_chunk, burst_at_head and
    JSON answers do not apply."""

    def __post_init__(self) -> None:
        if self.tokens_per_chunk < 1 or self.burst_at_head < 0:
            raise ValueError("tokens_per_chunk must be at least 1 and burst_at_head at least 0")


@dataclass(frozen=True)
class NodeConfig:
    node: str = "node-0"
    model: str = "sim-llm"
    flavor: str = "vllm"
    """Metric names: vllm or sglang."""
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    ignore_disconnect: bool = False
    interference_threshold_s: float = 0.05
    default_max_tokens: int = 128
    seed: int = 0


class _BadRequest(ValueError):
    """The request body is not a valid completion request."""


class EngineNode:
    """One simulated engine node: scheduler, step loop, metrics and the OpenAI app in front of them."""

    def __init__(
        self,
        config: NodeConfig,
        *,
        sink: GroundTruthSink | None = None,
        tracer_provider: Any = None,
        grpc_address: tuple[str, int] | None = None,
    ) -> None:
        """``grpc_address``: also serve the gRPC service there (port 0: a free one, then in ``grpc_port``), on the
        HTTP server's loop, which must run the app's lifespan."""
        self.config = config
        self.output = config.output
        self.sink = sink
        spec = config.scheduler.spec_decode
        self.metrics = make_metrics(config.flavor, config.model, spec_draft_tokens=spec.draft_tokens if spec else 0)
        self.gpu = SimulatedGpu(config.node)
        self.engine = Engine(
            Scheduler(config.scheduler, random.Random(config.seed)),
            self.metrics,
            interference_threshold_s=config.interference_threshold_s,
            ignore_disconnect=config.ignore_disconnect,
            gpu=self.gpu,
        )
        self.tracer_provider = tracer_provider
        """Where the node's server spans go (None: the global provider)."""
        self._grpc_address = grpc_address
        self.grpc_port: int | None = None
        self.app = self._create_app()

    def set_output(self, output: OutputConfig) -> None:
        """Change the stream shape from now on; a change in tokens per chunk is recorded as ground truth."""
        if output.tokens_per_chunk != self.output.tokens_per_chunk and self.sink is not None:
            now = time.time_ns()
            self.sink.record(
                GroundTruth(
                    cause="chunking_regression",
                    node=self.config.node,
                    start_ns=now,
                    end_ns=now,
                    magnitude=float(output.tokens_per_chunk),
                    detail={"from": str(self.output.tokens_per_chunk), "to": str(output.tokens_per_chunk)},
                )
            )
        self.output = output

    # --- HTTP ---------------------------------------------------------------------------------------------

    def _create_app(self) -> FastAPI:
        app = FastAPI(
            title=f"streamscope engine {self.config.node}",
            docs_url=None,
            redoc_url=None,
            openapi_url=None,
            lifespan=self._lifespan,
        )
        config = self.config

        @app.get("/health")
        async def health() -> dict[str, str]:
            return {"status": "ok", "node": config.node}

        @app.get("/v1/models")
        async def models() -> dict[str, Any]:
            return {"object": "list", "data": [{"id": config.model, "object": "model", "owned_by": "streamscope"}]}

        @app.get("/metrics")
        async def metrics() -> Response:
            return Response(exposition(self.metrics), media_type=CONTENT_TYPE_LATEST)

        @app.get("/dcgm/metrics")
        async def dcgm() -> Response:
            return Response(self.gpu.exposition(), media_type=CONTENT_TYPE_LATEST)

        @app.post("/v1/chat/completions")
        async def chat(request: Request) -> Response:
            return await self._complete(request, chat=True)

        @app.post("/v1/completions")
        async def completions(request: Request) -> Response:
            return await self._complete(request, chat=False)

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            return await self._complete(request, chat=True, anthropic=True)

        @app.websocket("/v1/realtime")
        async def realtime(websocket: WebSocket) -> None:
            await serve_realtime(websocket, self)

        @app.post("/api/chat")
        async def ollama_chat(request: Request) -> Response:
            return await self._complete(request, chat=True, ollama=True)

        @app.post("/api/generate")
        async def ollama_generate(request: Request) -> Response:
            return await self._complete(request, chat=False, ollama=True)

        return app

    @asynccontextmanager
    async def _lifespan(self, app: FastAPI) -> AsyncIterator[None]:
        if self._grpc_address is None:
            yield
            return
        from streamscope_cli.engine import grpc_service

        host, port = self._grpc_address
        async with grpc_service.serving(self, host, port, self.tracer_provider) as bound:
            self.grpc_port = bound
            yield

    async def _complete(
        self, request: Request, *, chat: bool, ollama: bool = False, anthropic: bool = False
    ) -> Response:
        """An OpenAI-compatible completion; with ``anthropic`` a message of Anthropic's Messages API (its system
        prompt apart, content a string or text blocks); with ``ollama`` one of Ollama's native API (a JSON document
        a line, streamed unless the body says ``"stream": false``)."""
        try:
            body = await request.json()
            if not isinstance(body, dict):
                raise _BadRequest("body must be a JSON object")
            if ollama:  # Ollama's length is options.num_predict
                options = body.get("options") or {}
                if not isinstance(options, dict):
                    raise _BadRequest("options must be an object")
                body = {**body, "max_tokens": options.get("num_predict", self.config.default_max_tokens)}
            if anthropic:
                body = {**body, "messages": _anthropic_messages(body)}
            sequence = self.sequence_for(body, chat)
            generation = self.engine.submit(sequence)
        except ValueError as exc:
            return _error(400, str(exc))
        rng = random.Random(f"{self.config.seed}:{sequence.request_id}")
        api = "anthropic" if anthropic else (("ollama-chat" if chat else "ollama-generate") if ollama else
                                             ("chat" if chat else "completions"))  # fmt: skip
        if not body.get("stream", ollama):
            return await self._whole(sequence, generation, api, rng)
        stream = ServerStream(
            request,
            provider="ollama" if ollama else "anthropic" if anthropic else self.config.flavor,
            request_model=str(body.get("model") or self.config.model),
            format="ollama" if ollama else "anthropic" if anthropic else "openai-chat",
            node_name=self.config.node,
            engine_request_id=sequence.request_id,
            tracer_provider=self.tracer_provider,
        )
        truth = StreamTruth(
            self.sink, self.config.node, trace_id_of(request.headers.get("traceparent")), sequence.request_id
        )
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        json_answer = api == "chat" and json_answer_requested(body)
        events = self._events(sequence, generation, api, rng, stream, truth, include_usage, json_answer)
        return stream.response(events)

    def sequence_for(self, body: dict[str, Any], chat: bool) -> Sequence:
        """The engine's request for an API's body (its messages or prompt, its length, the ``sim`` knobs); a
        ValueError names what is wrong with it."""
        sim = body.get("sim") or {}
        if not isinstance(sim, dict):
            raise _BadRequest("sim must be an object")
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                raise _BadRequest("messages must be a non-empty list")
            texts = [str(m.get("content", "")) if isinstance(m, dict) else "" for m in messages]
            system = next((t for m, t in zip(messages, texts) if isinstance(m, dict) and m.get("role") == "system"), "")
            prompt_text = "\n".join(texts)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise _BadRequest("prompt must be a string")
            prompt_text, system = prompt, ""
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens", self.config.default_max_tokens))
        prompt_tokens = sim.get("prompt_tokens", max(1, estimate_tokens(prompt_text)))
        prefix_tokens = sim.get("prefix_tokens", estimate_tokens(system))
        collapse = sim.get("spec_collapse")
        for name, value in (
            ("max_tokens", max_tokens),
            ("sim.prompt_tokens", prompt_tokens),
            ("sim.prefix_tokens", prefix_tokens),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise _BadRequest(f"{name} must be a non-negative integer")
        if max_tokens < 1 or prompt_tokens < 1:
            raise _BadRequest("max_tokens and the prompt must be at least one token")
        if collapse is not None and not (
            isinstance(collapse, list) and len(collapse) == 2 and all(isinstance(v, int) for v in collapse)
        ):
            raise _BadRequest("sim.spec_collapse must be [first_token, end_token]")
        prefix_key = sim.get("prefix") or (hashlib.sha1(system.encode()).hexdigest()[:16] if system else None)
        return Sequence(
            request_id=f"req-{uuid.uuid4().hex[:20]}",
            prompt_tokens=prompt_tokens,
            max_tokens=max_tokens,
            prefix_key=str(prefix_key) if prefix_key else None,
            prefix_tokens=min(prefix_tokens, prompt_tokens),
            spec_collapse=tuple(collapse) if collapse else None,
        )

    async def _events(
        self,
        sequence: Sequence,
        generation: AsyncIterator[Any],
        api: str,
        rng: random.Random,
        stream: ServerStream,
        truth: StreamTruth,
        include_usage: bool,
        json_answer: bool = False,
    ) -> AsyncIterator[ServerChunk]:
        """The stream's events in ``api``'s shape: ``chat`` and ``completions`` as OpenAI's SSE, ``anthropic`` as
        Anthropic's named events (the message and its text block opened first, the stop reason and the count in
        the closing ones), ``ollama-chat`` and ``ollama-generate`` as Ollama's lines of JSON (no role-only head,
        the counts on the last line)."""
        chat, ollama = api in ("chat", "ollama-chat", "anthropic"), api.startswith("ollama")
        created = int(time.time())
        response_id = f"{'chatcmpl' if chat else 'cmpl'}-{sequence.request_id[4:]}"
        output = self.output
        index = 0
        sent = 0
        pending = 0
        delays: list[Delay] = []

        def event(
            text: str | None,
            finish: str | None = None,
            usage: dict[str, int] | None = None,
            retract: dict[str, int] | None = None,
        ) -> str:
            if ollama:
                return _ollama_line(self.config.model, chat, text or "", finish, sequence.prompt_tokens, sent)
            if api == "anthropic":
                return _anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": text})
            if chat:
                delta: dict[str, Any] = (
                    {} if text is None else ({"role": "assistant", "content": ""} if text == "" else {"content": text})
                )
                if retract:
                    delta["retract"] = retract
                choices = [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            else:
                choices = [{"index": 0, "text": text or "", "finish_reason": finish, "logprobs": None}]
            document: dict[str, Any] = {
                "id": response_id,
                "object": "chat.completion.chunk" if chat else "text_completion",
                "created": created,
                "model": self.config.model,
                "choices": [] if usage else choices,
            }
            if usage:
                document["usage"] = usage
            return f"data: {json.dumps(document, separators=(',', ':'))}\n\n"

        def content(tokens: int) -> ServerChunk:
            nonlocal index, sent
            text = words(rng, tokens, sent)
            if json_answer:
                text = _json_framed(text, sent, tokens, sequence.max_tokens)
            truth.event(index, delays)
            index += 1
            sent += tokens
            return ServerChunk(event(text), tokens, len(text.encode()))

        spec = self.config.scheduler.spec_decode
        drafts = spec.draft_tokens if api == "chat" and output.show_drafts and spec is not None else 0
        preview: list[str] = []  # draft words shown, not yet verified, each with its leading space

        def verified(tokens: int, step_delays: tuple[Delay, ...], last: bool = False) -> ServerChunk:
            """One verified step: the drafts shown before it that the verifier kept stay and the rest are withdrawn,
            the step's other tokens follow, then the next step's drafts."""
            nonlocal index, sent, preview
            kept = min(len(preview), max(0, tokens - 1))
            rejected = preview[kept:]
            fresh = tokens - kept
            text = words(rng, fresh, sent + kept)
            sent += kept + fresh
            upcoming = 0 if last else min(drafts, max(0, sequence.max_tokens - sent - 1))
            preview = [" " + rng.choice(WORDS) for _ in range(upcoming)]
            text += "".join(preview)
            withdrawn = len("".join(rejected).encode())
            truth.event(index, list(step_delays))
            index += 1
            retract = {"bytes": withdrawn, "tokens": len(rejected)} if rejected else None
            return ServerChunk(
                event(text, retract=retract),
                fresh + len(preview),
                len(text.encode()),
                retracted_bytes=withdrawn,
                retracted_tokens=len(rejected),
            )

        try:
            if api == "anthropic":  # the message, then its text block, opened before any text
                message: dict[str, Any] = {
                    "id": f"msg_{sequence.request_id[4:]}", "type": "message", "role": "assistant", "content": [],
                    "model": self.config.model, "stop_reason": None,
                    "usage": {"input_tokens": sequence.prompt_tokens, "output_tokens": 0},
                }  # fmt: skip
                yield ServerChunk(_anthropic_event("message_start", message=message), 0, 0)
                block = {"type": "text", "text": ""}
                yield ServerChunk(_anthropic_event("content_block_start", index=0, content_block=block), 0, 0)
                index += 2
            elif chat and not ollama:  # OpenAI-compatible servers say the role first; Ollama does not
                yield ServerChunk(event(""), 0, 0)
                index += 1
            batch = await anext(generation, None)
            if batch is not None and batch.time_in_queue_s is not None:
                stream.recorder.set_attribute(sc.GEN_AI_LATENCY_TIME_IN_QUEUE, batch.time_in_queue_s)
            while batch is not None and drafts:
                yield verified(batch.tokens, batch.delays)
                batch = await anext(generation, None)
            if preview:  # generation ended with drafts on screen
                yield verified(0, (), last=True)
            while batch is not None:
                pending += batch.tokens
                delays.extend(batch.delays)
                holding = (
                    output.burst_at_head and sent == 0 and pending < min(output.burst_at_head, sequence.max_tokens)
                )
                emitted = False
                while not holding and pending >= output.tokens_per_chunk:
                    pending -= output.tokens_per_chunk
                    emitted = True
                    yield content(output.tokens_per_chunk)
                if emitted:  # every event cut from this batch carried its delays; held tokens keep theirs
                    delays.clear()
                batch = await anext(generation, None)
            if pending:
                yield content(pending)
                pending = 0
            truth.close()
            if api == "anthropic":
                yield ServerChunk(_anthropic_event("content_block_stop", index=0), 0, 0)
                stop = {"stop_reason": "max_tokens", "stop_sequence": None}
                yield ServerChunk(_anthropic_event("message_delta", delta=stop, usage={"output_tokens": sent}), 0, 0)
                yield ServerChunk(_anthropic_event("message_stop"), 0, 0)
                return
            yield ServerChunk(event(None, finish="length"), 0, 0)
            if ollama:
                return
            if include_usage:
                usage = {
                    "prompt_tokens": sequence.prompt_tokens,
                    "completion_tokens": sent,
                    "total_tokens": sequence.prompt_tokens + sent,
                }
                yield ServerChunk(event(None, usage=usage), 0, 0)
            yield ServerChunk("data: [DONE]\n\n", 0, 0)
        finally:
            if sent < sequence.max_tokens:  # the client went away first
                truth.close()
                later = self.engine.remaining_tokens(sequence.request_id) if self.engine.ignore_disconnect else 0
                stream.add_tokens_after_cancel(pending + later)
            self.engine.release(sequence.request_id)

    async def _whole(
        self, sequence: Sequence, generation: AsyncIterator[Any], api: str, rng: random.Random
    ) -> Response:
        try:
            tokens = 0
            async for batch in generation:
                tokens += batch.tokens
        finally:
            self.engine.release(sequence.request_id)
        text = " ".join(rng.choice(WORDS) for _ in range(tokens))
        chat = api in ("chat", "ollama-chat", "anthropic")
        if api.startswith("ollama"):  # Ollama's whole answer: its stream's last line, with the text
            line = _ollama_line(self.config.model, chat, text, "length", sequence.prompt_tokens, tokens)
            return Response(line, media_type="application/json")
        if api == "anthropic":
            return JSONResponse(
                {"id": f"msg_{sequence.request_id[4:]}", "type": "message", "role": "assistant",
                 "content": [{"type": "text", "text": text}], "model": self.config.model,
                 "stop_reason": "max_tokens", "stop_sequence": None,
                 "usage": {"input_tokens": sequence.prompt_tokens, "output_tokens": tokens}}
            )  # fmt: skip
        choice = (
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
            if chat
            else {"index": 0, "text": text, "finish_reason": "length"}
        )
        usage = {
            "prompt_tokens": sequence.prompt_tokens,
            "completion_tokens": tokens,
            "total_tokens": sequence.prompt_tokens + tokens,
        }
        return JSONResponse(
            {
                "id": f"{'chatcmpl' if chat else 'cmpl'}-{sequence.request_id[4:]}",
                "object": "chat.completion" if chat else "text_completion",
                "created": int(time.time()),
                "model": self.config.model,
                "choices": [choice],
                "usage": usage,
            }
        )


def _anthropic_event(name: str, **fields: Any) -> str:
    """One of Anthropic's named SSE events: its name on the ``event:`` line and as the data's ``type``."""
    return f"event: {name}\ndata: {json.dumps({'type': name, **fields}, separators=(',', ':'))}\n\n"


def _anthropic_messages(body: dict[str, Any]) -> Any:
    """A Messages request's conversation as chat messages: its ``system`` prompt first, each content a string (a
    list of blocks gives its text blocks' text)."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return messages  # refused as the chat API refuses it
    system = body.get("system")
    head = [{"role": "system", "content": _text_of(system)}] if system else []
    return head + [{**m, "content": _text_of(m.get("content"))} if isinstance(m, dict) else m for m in messages]


def _text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text")
    return str(content or "")


def _ollama_line(model: str, chat: bool, text: str, finish: str | None, prompt_tokens: int, sent: int) -> str:
    """One line of Ollama's stream: a piece of the answer, or (``finish``) the last, with the counts."""
    document: dict[str, Any] = {"model": model, "created_at": datetime.now(UTC).isoformat().replace("+00:00", "Z")}
    document |= {"message": {"role": "assistant", "content": text}} if chat else {"response": text}
    document["done"] = finish is not None
    if finish is not None:
        document |= {"done_reason": finish, "prompt_eval_count": prompt_tokens, "eval_count": sent}
    return json.dumps(document, separators=(",", ":")) + "\n"


def _json_framed(text: str, first: int, tokens: int, total: int) -> str:
    """``text``, tokens ``first`` to ``first + tokens`` of ``total``, as its piece of a JSON answer: the words are
    the values of ``_JSON_FIELDS`` in turn (a chunk belongs to the field whose share holds its last token), and
    the last piece closes the document with the answer's length."""

    def field(position: int) -> int:
        return min(len(_JSON_FIELDS) - 1, len(_JSON_FIELDS) * position // total)

    if first == 0:
        text = f'{{"{_JSON_FIELDS[0]}": "' + text
    elif field(first + tokens - 1) != field(first - 1):
        text = f'", "{_JSON_FIELDS[field(first + tokens - 1)]}": "' + text
    if first + tokens >= total:
        text += f'", "tokens": {total}}}'
    return text


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "invalid_request_error", "code": status}}, status)
