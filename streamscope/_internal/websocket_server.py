"""Record a response sent over a WebSocket, on the server: each message sent through it is one chunk, at the time
the server hands it over.

    async with streamscope.ServerWebSocketResponse(websocket, provider="vllm", carrier=metadata) as response:
        await response.send_text(json.dumps({"type": "response.output_text.delta", "delta": "Hel"}))

``websocket`` is Starlette's (FastAPI's), or any object with ``send_text`` and ``send_bytes``. A WebSocket carries
no trace context with its messages: the span continues the trace in ``carrier``, a mapping holding ``traceparent``
(what the client put in its request, such as the Realtime API's ``response.metadata``, which the client's
``astream_websocket(...).trace_context`` gives), else the handshake's headers. The response ends completed when
its format says it is done (``response.done``), disconnected when a send fails because the client left, cancelled
when the block is left before either, and error on any other exception.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any

from opentelemetry import propagate

from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, StreamRecorder
from streamscope._internal.websocket_client import message_format, recorded_message, stopped
from streamscope.formats import Carried

_LEFT = frozenset({"WebSocketDisconnect", "ClientDisconnected", "ConnectionClosed", "ConnectionClosedOK",
                   "ConnectionClosedError"})  # fmt: skip
"""What a send raises, by name, once the client has gone (Starlette, uvicorn, ``websockets``)."""


class ServerWebSocketResponse:
    """One response on a server's WebSocket, recorded as the server span of its stream."""

    def __init__(
        self,
        websocket: Any,
        *,
        provider: str,
        request_model: str | None = None,
        carrier: Mapping[str, str] | None = None,
        format: str | Carried = "openai-realtime",
        operation: str = "chat",
        node_name: str | None = None,
        encoding: Encoding | None = None,
        attributes: Mapping[str, Any] | None = None,
        tracer_provider: Any = None,
    ) -> None:
        """``carrier``: the trace context the client sent with its request (``traceparent``); without one, the
        handshake's headers'. ``node_name``: the node serving, which attribution reads its stalls against."""
        extra = dict(attributes or {})
        if node_name:
            extra[sc.STREAMSCOPE_NODE_NAME] = node_name
        context = carrier if carrier is not None else getattr(websocket, "headers", None) or {}
        recorder = StreamRecorder(
            side="server",
            transport="websocket",
            provider=provider,
            request_model=request_model,
            operation=operation,
            encoding=encoding,
            attributes=extra,
            parent=propagate.extract({str(key): str(value) for key, value in context.items()}),
            tracer_provider=tracer_provider,
        ).start()
        self.observer = StreamObserver(recorder, message_format(format, provider))
        self._websocket = websocket

    @property
    def recorder(self) -> StreamRecorder:
        return self.observer.recorder

    async def send_text(self, text: str) -> None:
        recorded_message(self.observer, text)
        await self._sent(self._websocket.send_text(text))

    async def send_bytes(self, data: bytes) -> None:
        recorded_message(self.observer, data)
        await self._sent(self._websocket.send_bytes(data))

    async def _sent(self, sending: Any) -> None:
        try:
            await sending
        except Exception as exc:
            self._failed(exc)
            raise

    def _failed(self, exc: BaseException) -> None:
        if type(exc).__name__ in _LEFT or isinstance(exc, OSError):
            self.recorder.cancel()
            self.observer.close("disconnected", type(exc).__name__)
        else:
            self.observer.close("error", type(exc).__name__)

    async def __aenter__(self) -> ServerWebSocketResponse:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if exc is not None and not stopped(exc):
            self._failed(exc)
        self.observer.close("completed" if self.observer.done else "cancelled")
