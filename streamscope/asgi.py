"""Record every event stream an ASGI app sends, with no code in its endpoints.

    app.add_middleware(streamscope.StreamMiddleware)             # Starlette, FastAPI
    vllm serve MODEL --middleware streamscope.StreamMiddleware   # any server that loads ASGI middleware

Each HTTP request starts a span on receipt, continuing the caller's trace (``traceparent``). A response that is a
``text/event-stream`` is recorded as a stream span, one chunk per event, each timed when the app's ``send`` of its
bytes returned: handed to the connection, so the recording's work follows the bytes instead of delaying them. A
gzip- or deflate-encoded stream is read through an inflated copy (wire bytes are then the inflated size, as the
client side counts them); one in another encoding is not recorded, and a warning says so once. An error status
answering a request that asked for a stream (``"stream": true``) is recorded as an error; any other response leaves
its span unended, so it is never exported. The request's JSON body, copied as the app reads it (up to
``BODY_LIMIT``; an app holding a longer one whole hands it over with ``read_request``), names the model; the path
picks the stream format (``/responses``, ``/messages``, else Chat Completions and legacy Completions) and, without a
framework's route, names ``http.route`` when it ends in one of those endpoints.

How a stream ended: its last body sent (``completed``, or ``error`` when the stream reported one); its client gone
first (``disconnected``; on a ``gateway``, which stops the upstream stream for its client, ``cancelled``); the app
raising (``error``; ``cancelled`` when it was cancelled) or returning with its response unfinished (``error``). An
app that knows better (a gateway whose upstream broke off) says so with ``stream_of(scope).end(...)``.

Pure ASGI: no web framework is imported. Spans go to the global tracer provider (``streamscope.setup``) unless one
is given.
"""

from __future__ import annotations

import json
import logging
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import KW_ONLY, dataclass
from typing import Any, Literal

from opentelemetry import propagate
from opentelemetry import trace as otel_trace

from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, Outcome, StreamRecorder
from streamscope.formats import FORMATS, json_answer_requested, make_format

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SCOPE_KEY = "streamscope.stream"
"""Where the request's ``RecordedRequest`` is kept in the ASGI scope (``stream_of`` reads it)."""
BODY_LIMIT = 1 << 20
"""Request bodies up to this many bytes are read for the model and the stream flag; longer ones are not."""
_FORMAT_BY_PATH_END = (("/responses", "openai-responses"), ("/messages", "anthropic"))
ENDPOINT_ENDS = ("/completions", "/responses", "/messages")
"""Paths ending so are a streaming API's endpoint: without a framework's route, the path itself is ``http.route``
(any other path may carry ids, too many values for a route)."""
_INFLATE_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
log = logging.getLogger("streamscope")
_unread_encodings: set[str] = set()
_CLIENT_LEFT: dict[str, Outcome] = {"server": "disconnected", "gateway": "cancelled"}


def format_for_path(path: str) -> str:
    """The stream format a request path serves: the Responses API, Anthropic's Messages, else Chat Completions."""
    path = path.rstrip("/")
    return next((name for end, name in _FORMAT_BY_PATH_END if path.endswith(end)), "openai-chat")


def stream_of(scope: Scope) -> RecordedRequest | None:
    """The recording of the request ``scope`` belongs to, inside an app wrapped by ``StreamMiddleware``."""
    return scope.get(SCOPE_KEY)


@dataclass(eq=False)
class StreamMiddleware:
    """ASGI middleware recording each event-stream response as a stream span of ``side``.

    ``provider`` defaults to the stream format's (``openai``, ``anthropic``); ``node_name`` joins the spans with that
    node's GPU agent.
    """

    app: ASGIApp
    _: KW_ONLY
    side: Literal["server", "gateway"] = "server"
    provider: str | None = None
    node_name: str | None = None
    encoding: Encoding | None = None
    tracer_provider: otel_trace.TracerProvider | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = scope[SCOPE_KEY] = RecordedRequest(self, scope)
        try:
            await self.app(scope, request.receiving(receive), request.sending(send))
        except BaseException as exc:
            request.raised(exc)
            raise
        request.returned()


class RecordedRequest:
    """One request's span, and what the middleware saw of the request and its response."""

    def __init__(self, middleware: StreamMiddleware, scope: Scope) -> None:
        headers = {name.decode("latin-1"): value.decode("latin-1") for name, value in scope.get("headers", ())}
        self._scope = scope
        self._format = format_for_path(scope.get("path", ""))
        self._client_left_outcome = _CLIENT_LEFT[middleware.side]
        attributes = {sc.STREAMSCOPE_NODE_NAME: middleware.node_name} if middleware.node_name else None
        self.recorder = StreamRecorder(
            side=middleware.side,
            provider=middleware.provider or FORMATS[self._format].provider,
            encoding=middleware.encoding,
            attributes=attributes,
            parent=propagate.extract(headers),
            tracer_provider=middleware.tracer_provider,
        ).start()
        self._body: bytearray | None = bytearray() if is_json(headers.get("content-type", "")) else None
        self._request_read = False
        self._inflate: Any = None
        self._asked_for_stream = False
        self._json_answer = False
        self._observer: StreamObserver | None = None
        self._http_error: str | None = None
        self._complete = False
        self._client_left = False
        self._ended: tuple[Outcome, str | None] | None = None

    @property
    def asked_for_stream(self) -> bool:
        """The request's JSON body said ``"stream": true`` (known once the app has read the body)."""
        return self._asked_for_stream

    def end(self, outcome: Outcome, error_type: str | None = None) -> None:
        """Say how the stream ended, for an app that knows better than its messages tell (first call counts)."""
        if self._ended is None:
            self._ended = (outcome, error_type)
            if outcome in ("cancelled", "disconnected"):
                self.recorder.cancel()

    # --- the request -------------------------------------------------------------------------------------

    def receiving(self, receive: Receive) -> Receive:
        async def receive_observed() -> Message:
            message = await receive()
            kind = message["type"]
            if kind == "http.request":
                if self._body is not None:
                    self._read_body(message)
            elif kind == "http.disconnect" and not self._complete:
                self._left()
            return message

        return receive_observed

    def _read_body(self, message: Message) -> None:
        body = self._body
        assert body is not None
        part = message.get("body", b"")
        if len(body) + len(part) > BODY_LIMIT:
            self._body = None
            return
        body += part
        if message.get("more_body", False):
            return
        self._body = None
        self.read_request(body)

    def read_request(self, body: bytes | bytearray) -> None:
        """Read the request's JSON body for the stream flag and the model, once: the middleware does as the app
        reads a body of up to ``BODY_LIMIT``; an app that holds a longer one whole (a gateway) hands it over."""
        if self._request_read:
            return
        self._request_read = True
        try:
            request = json.loads(body)
        except ValueError:
            return
        if not isinstance(request, dict):
            return
        self._asked_for_stream = request.get("stream") is True
        self._json_answer = json_answer_requested(request)
        model = request.get("model")
        if isinstance(model, str) and model:
            self.recorder.set_attribute(sc.GEN_AI_REQUEST_MODEL, model)
            self.recorder.span.update_name(f"chat {model}")

    def _left(self) -> None:
        self._client_left = True
        self.recorder.cancel()

    # --- the response ------------------------------------------------------------------------------------

    def sending(self, send: Send) -> Send:
        async def send_observed(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                self._response_start(message)
            elif kind == "http.response.body":
                await self._send_body(send, message)
                return
            await send(message)

        return send_observed

    def _response_start(self, message: Message) -> None:
        status = message["status"]
        media_type = encoding = ""
        for name, value in message.get("headers", ()):
            name = name.lower()
            if name == b"content-type":
                media_type = value.decode("latin-1").split(";")[0].strip().lower()
            elif name == b"content-encoding":
                encoding = value.decode("latin-1").strip().lower()
        if status >= 400:
            self._http_error = f"http_{status}"
        if media_type != "text/event-stream":
            return
        if encoding in _INFLATE_WBITS:
            self._inflate = zlib.decompressobj(_INFLATE_WBITS[encoding])
        elif encoding not in ("", "identity"):
            if encoding not in _unread_encodings:
                _unread_encodings.add(encoding)
                log.warning("streamscope: event streams with content-encoding %r are not recorded", encoding[:40])
            return
        self._observer = StreamObserver(self.recorder, make_format(self._format), json_answer=self._json_answer)

    async def _send_body(self, send: Send, message: Message) -> None:
        observer, body = self._observer, message.get("body", b"")
        if observer is not None and body:
            self.recorder.first_byte()
        try:
            await send(message)
        except OSError:  # servers of ASGI 2.4 say so when the client has gone
            self._left()
            raise
        if observer is not None and body:
            observer.on_bytes(self._inflated(body))
        if not message.get("more_body", False):
            self._complete = True  # a server's receive says "disconnect" from now on: not a client leaving
            if observer is not None:
                observer.on_end_of_body()

    def _inflated(self, body: bytes) -> bytes:
        """``body`` as the stream's events read, inflated when the response is encoded; a body that does not
        inflate ends the recording's reading of it (the bytes still go to the client)."""
        if self._inflate is None:
            return bytes(body)
        try:
            return bytes(self._inflate.decompress(body))
        except zlib.error:
            self._inflate, self._observer = None, None
            return b""

    # --- the end -----------------------------------------------------------------------------------------

    def returned(self) -> None:
        if self._client_left:
            self._close(self._client_left_outcome)
        elif self._http_error:
            self._close("error", self._http_error)
        elif self._complete:
            self._close("completed")
        else:
            self._close("error", "incomplete_response")

    def raised(self, exc: BaseException) -> None:
        from asyncio import CancelledError  # loaded already: the app runs on it (`import streamscope` does not)

        if self._client_left or isinstance(exc, OSError):
            self._left()
            self._close(self._client_left_outcome)
        elif isinstance(exc, CancelledError):
            self._close("cancelled")
        else:
            self._close("error", type(exc).__qualname__)

    def _close(self, outcome: Outcome, error_type: str | None = None) -> None:
        outcome, error_type = self._ended or (outcome, error_type)
        observer = self._observer
        if observer is None:
            if not (self._asked_for_stream and outcome == "error"):
                return  # not a stream: its span is never ended, so never exported
            observer = StreamObserver(self.recorder, make_format(self._format))
        route = getattr(self._scope.get("route"), "path", None)
        if not isinstance(route, str):
            path = self._scope.get("path", "")
            route = path if isinstance(path, str) and path.rstrip("/").endswith(ENDPOINT_ENDS) else None
        if route:
            self.recorder.set_attribute(sc.HTTP_ROUTE, route)
        observer.close(outcome, error_type)


def is_json(content_type: str) -> bool:
    """Whether a ``content-type`` value is JSON (``application/json``, or any ``+json`` type)."""
    media_type = content_type.split(";")[0].strip().lower()
    return media_type == "application/json" or media_type.endswith("+json")
