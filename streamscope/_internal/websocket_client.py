"""Record a response received over a WebSocket: each message is one chunk, as it reaches the application.

``astream_websocket(connection)`` (and ``stream_websocket`` for a synchronous connection) wraps an open connection
of the ``websockets`` library, or any object with the same ``recv()``, for one response: the recording starts as
the block is entered (before the request is sent in it), every message read through it is a chunk with its size on
the wire, and it ends when the format says the response is done (``response.done`` of OpenAI's Realtime API), when
the server closes the connection, or when the block is left early (cancelled). A connection carries no trace
context with its messages: the server's side (``ServerWebSocketResponse``) joins this one's trace when the request
carries ``trace_context`` (the Realtime API's ``response.metadata``).

``format`` names a format of ``streamscope.formats`` read from each message's JSON (``openai-realtime``), or is a
function of the raw message returning the ``EventFacts`` it carried (its text, ``done`` on the last one): one
message, one chunk, whatever the protocol. With a function, a connection the server closes normally ends the
response as completed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, StreamRecorder
from streamscope.formats import Carried, MessageFormat, StreamFormat, make_format

_CLOSED_NORMALLY = "ConnectionClosedOK"
_CLOSED = frozenset({_CLOSED_NORMALLY, "ConnectionClosedError", "ConnectionClosed"})
"""The ``websockets`` exceptions of a closed connection, by name (the SDK does not import the library)."""


def stopped(exc: BaseException) -> bool:
    """Leaving the block so is the application stopping, not a failure: cancelled.

    asyncio is looked up, not imported: a synchronous application never loads it, and cannot raise its errors.
    """
    if isinstance(exc, (GeneratorExit, KeyboardInterrupt)):
        return True
    asyncio = sys.modules.get("asyncio")
    return asyncio is not None and isinstance(exc, asyncio.CancelledError)


class _Messages:
    """Shared by the sync and async iterators: a message in, the application's value out, recorded."""

    def __init__(self, connection: Any, observer: StreamObserver) -> None:
        self.observer = observer
        self._connection = connection

    @property
    def trace_context(self) -> dict[str, str]:
        """This response's trace context (``traceparent``), for a request that can carry it to the server (the
        Realtime API's ``response.metadata``): the server's ``ServerWebSocketResponse`` then continues this trace."""
        return dict(self.observer.recorder.inject({}))

    def take(self, message: Any) -> Any:
        return recorded_message(self.observer, message)

    def closed(self, exc: BaseException) -> bool:
        """Record a failed read; whether it ends the response as completed (a message format's normal close)."""
        name = type(exc).__name__
        if name == _CLOSED_NORMALLY and isinstance(self.observer.format, MessageFormat):
            self.observer.close("completed")
            return True
        self.observer.close("disconnected" if name in _CLOSED else "error", name)
        return False

    def left(self, exc: BaseException | None) -> None:
        """The block was left: done already, or with an exception, or early (the application stopped reading)."""
        if exc is not None and not stopped(exc):
            self.observer.close("error", type(exc).__name__)
        self.observer.close("completed" if self.observer.done else "cancelled")


def recorded_message(observer: StreamObserver, message: str | bytes) -> Any:
    """One WebSocket message recorded as a chunk, with its size on the wire; returns what the application reads:
    its JSON where the format is named, else the message itself."""
    recorder = observer.recorder
    recorder.first_byte()
    wire = len(message.encode()) if isinstance(message, str) else len(message)
    if isinstance(observer.format, MessageFormat):  # the application's function reads the raw message
        observer.on_payload("", message, wire)
        return message
    try:
        payload = json.loads(message)
    except ValueError:
        recorder.chunk(0, 0, wire)  # not JSON: bytes, no content
        return message
    observer.on_payload(str(payload.get("type", "")) if isinstance(payload, dict) else "", payload, wire)
    return payload


def message_format(format: str | Carried, provider: str | None) -> StreamFormat:
    """A named format of ``streamscope.formats``, or a function of the raw message as one."""
    return make_format(format) if isinstance(format, str) else MessageFormat(format, provider or "unknown")


class WebSocketMessages(_Messages):
    """The messages of one response on an asyncio connection, recorded; iteration ends with the response."""

    def __aiter__(self) -> WebSocketMessages:
        return self

    async def __anext__(self) -> Any:
        if self.observer.done or self.observer.closed:
            raise StopAsyncIteration
        try:
            message = await self._connection.recv()
        except Exception as exc:
            if self.closed(exc):
                raise StopAsyncIteration from None
            raise
        return self.take(message)


class SyncWebSocketMessages(_Messages):
    """The same on a synchronous connection (``websockets.sync``)."""

    def __iter__(self) -> SyncWebSocketMessages:
        return self

    def __next__(self) -> Any:
        if self.observer.done or self.observer.closed:
            raise StopIteration
        try:
            message = self._connection.recv()
        except Exception as exc:
            if self.closed(exc):
                raise StopIteration from None
            raise
        return self.take(message)


@asynccontextmanager
async def astream_websocket(
    connection: Any,
    *,
    format: str | Carried = "openai-realtime",
    provider: str | None = None,
    request_model: str | None = None,
    operation: str = "chat",
    encoding: Encoding | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: Any = None,
) -> AsyncIterator[WebSocketMessages]:
    """One response's messages on ``connection`` (asyncio), recorded: send the request inside the block, then
    iterate (each message as JSON with a named format, raw with a function)."""
    observer = _observer(format, provider, request_model, operation, encoding, attributes, tracer_provider)
    messages = WebSocketMessages(connection, observer)
    try:
        yield messages
    except BaseException as exc:
        messages.left(exc)
        raise
    messages.left(None)


@contextmanager
def stream_websocket(
    connection: Any,
    *,
    format: str | Carried = "openai-realtime",
    provider: str | None = None,
    request_model: str | None = None,
    operation: str = "chat",
    encoding: Encoding | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: Any = None,
) -> Iterator[SyncWebSocketMessages]:
    """``astream_websocket`` for a synchronous connection."""
    observer = _observer(format, provider, request_model, operation, encoding, attributes, tracer_provider)
    messages = SyncWebSocketMessages(connection, observer)
    try:
        yield messages
    except BaseException as exc:
        messages.left(exc)
        raise
    messages.left(None)


def _observer(
    format: str | Carried,
    provider: str | None,
    request_model: str | None,
    operation: str,
    encoding: Encoding | None,
    attributes: Mapping[str, Any] | None,
    tracer_provider: Any,
) -> StreamObserver:
    stream_format = message_format(format, provider)
    recorder = StreamRecorder(
        side="client",
        transport="websocket",
        provider=provider or stream_format.provider,
        request_model=request_model,
        operation=operation,
        encoding=encoding,
        attributes=attributes,
        tracer_provider=tracer_provider,
    ).start()
    return StreamObserver(recorder, stream_format)
