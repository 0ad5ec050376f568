"""Record streams on the server side of an SSE endpoint (FastAPI / Starlette).

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        stream = streamscope.ServerStream(request, provider="vllm", request_model=body["model"])
        return stream.response(generate_sse_events())

The span continues the client's trace (``traceparent``), records the time each chunk is handed to the
server, and notices a client that goes away (outcome ``disconnected``, with the cancel offset). Tokens the
engine generated after that can be reported with ``add_tokens_after_cancel`` from the generator's cleanup.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Mapping
from typing import Any, NamedTuple

import anyio
from opentelemetry import propagate
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Send

from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, Outcome, StreamRecorder
from streamscope.formats import FRAMINGS, make_format


class ServerChunk(NamedTuple):
    """A payload with its counts, for apps that know them (skips interpreting the payload)."""

    data: str | bytes
    tokens: int
    content_bytes: int
    tool_call: bool = False
    """The payload carries part of a tool call (marks where the stream's first tool call starts)."""
    retracted_bytes: int = 0
    """Bytes of content already sent that this payload withdraws (rejected draft tokens, a replaced suffix)."""
    retracted_tokens: int = 0


class ServerStream:
    def __init__(
        self,
        request: Request,
        *,
        provider: str,
        request_model: str | None = None,
        operation: str = "chat",
        format: str = "openai-chat",
        node_name: str | None = None,
        engine_request_id: str | None = None,
        encoding: Encoding | None = None,
        attributes: Mapping[str, Any] | None = None,
        tracer_provider: Any = None,
    ) -> None:
        extra: dict[str, Any] = dict(attributes or {})
        route_path = getattr(request.scope.get("route"), "path", None)
        if route_path:
            extra[sc.HTTP_ROUTE] = route_path
        if node_name:
            extra[sc.STREAMSCOPE_NODE_NAME] = node_name
        if engine_request_id:
            extra[sc.STREAMSCOPE_ENGINE_REQUEST_ID] = engine_request_id
        framing = FRAMINGS.get(format, "sse")
        recorder = StreamRecorder(
            side="server",
            transport="chunked" if framing == "ndjson" else "sse",
            provider=provider,
            request_model=request_model,
            operation=operation,
            encoding=encoding,
            attributes=extra,
            parent=propagate.extract(request.headers),
            tracer_provider=tracer_provider,
        ).start()
        self.observer = StreamObserver(recorder, make_format(format), framing=framing)
        self._framing = framing
        self._tokens_after_cancel = 0

    @property
    def recorder(self) -> StreamRecorder:
        return self.observer.recorder

    def add_tokens_after_cancel(self, tokens: int) -> None:
        """Count tokens the engine generated after the client went away (the cancellation tax)."""
        self._tokens_after_cancel += tokens
        self.recorder.tokens_after_cancel = self._tokens_after_cancel

    def response(
        self,
        chunks: AsyncIterable[str | bytes | ServerChunk],
        *,
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
    ) -> StreamingResponse:
        """The streamed response, recorded; ``media_type`` by default the format's (``text/event-stream``, or
        ``application/x-ndjson`` for lines of JSON)."""
        media_type = media_type or ("application/x-ndjson" if self._framing == "ndjson" else "text/event-stream")
        return _ObservedStreamingResponse(
            chunks, self.observer, status_code=status_code, headers=headers, media_type=media_type
        )


class _ObservedStreamingResponse(StreamingResponse):
    def __init__(self, chunks: AsyncIterable[str | bytes | ServerChunk], observer: StreamObserver, **kwargs: Any):
        self._source = chunks
        self._observer = observer
        super().__init__(self._emit(), **kwargs)

    async def _emit(self) -> AsyncIterator[bytes]:
        observer = self._observer
        async for item in self._source:
            if isinstance(item, ServerChunk):
                data = item.data.encode() if isinstance(item.data, str) else item.data
                observer.recorder.first_byte()
                observer.recorder.chunk(item.tokens, item.content_bytes, len(data), tool_call=item.tool_call)
                if item.retracted_bytes:
                    observer.recorder.retract(item.retracted_bytes, item.retracted_tokens)
            else:
                data = item.encode() if isinstance(item, str) else item
                observer.on_bytes(data)
            yield data
        observer.on_end_of_body()

    async def stream_response(self, send: Send) -> None:
        outcome: Outcome = "completed"
        error_type = None
        try:
            await super().stream_response(send)
        except BaseException as exc:
            if isinstance(exc, (anyio.get_cancelled_exc_class(), OSError)):
                outcome = "disconnected"
                self._observer.recorder.cancel()
            else:
                outcome, error_type = "error", type(exc).__qualname__
            raise
        finally:
            with anyio.CancelScope(shield=True):
                close = getattr(self._source, "aclose", None)
                if close is not None:
                    await close()
            self._observer.close(outcome, error_type)
