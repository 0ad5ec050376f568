"""The proxy's HTTP and WebSocket side: forward any request to the upstream, stream the answer back, impair
event streams.

Requests go out with the client's method, path, query, headers and body (streamed), minus hop-by-hop headers;
responses come back streamed, byte for byte. Only event streams (SSE or lines of JSON; 2xx, not content-encoded)
are candidates for impairment; a stream no rule hits is relayed exactly as read. Each request gets its own
``httpx.AsyncClient`` so nothing outlives it, whichever event loop or server runs the app.

A WebSocket is relayed message by message both ways, with the handshake's headers (``traceparent`` among them);
the upstream's messages are events to the rules, each kept whole (a rechunk rule does not apply: a message is not
cut into bytes on its way).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Receive, Scope, Send
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as websocket_connect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK, InvalidHandshake

from streamscope_cli.proxy.config import ProxyConfig
from streamscope_cli.proxy.framing import MEDIA_TYPES, EventFramer
from streamscope_cli.proxy.impairments import (
    Dropped,
    Fact,
    Finish,
    Held,
    Piece,
    Schedule,
    Shaper,
    Stalled,
    StreamPlan,
    Write,
)
from streamscope_cli.workload.ground_truth import GroundTruth, GroundTruthSink, trace_id_of
from streamscope_ingest.blocks.stalls import EXPLAINING_SHARE, StallRule

log = logging.getLogger("streamscope_cli.proxy")

REQUEST_ID_HEADER = "x-streamscope-proxy-request-id"
"""Added to every proxied response: the ``request_id`` of this request's ground-truth records."""
_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_HOP_BY_HOP = frozenset(
    b"connection keep-alive proxy-connection proxy-authenticate proxy-authorization te trailer trailers "
    b"transfer-encoding upgrade".split()
)
_NOT_FORWARDED_UP = _HOP_BY_HOP | {b"host", b"expect"}
_NOT_FORWARDED_DOWN = _HOP_BY_HOP | {b"server", b"date"}  # the proxy's own server writes these
HEARTBEAT_S = 0.010
PAUSE_RECORDED_S = EXPLAINING_SHARE * StallRule.configured().shortest_us / 1e6
"""The proxy not running this long (its process starved on a busy machine) held every stream it relayed: recorded
as ``connection`` ground truth of each (``detail.kind = paused``, source ``watchdog``), which scoring counts apart.
It is the share of the shortest stall a record must hold to have made it: a shorter pause made no stall, and a
longer one may have (all streams held together at once read as their endpoint's hold, whatever its length)."""


def create_app(config: ProxyConfig, sink: GroundTruthSink | None = None) -> Starlette:
    """The proxy as an ASGI app; every impairment that really happens is recorded in ``sink``."""
    proxy = _Proxy(config, sink)
    app = Starlette(
        routes=[
            Route("/{path:path}", proxy.handle, methods=_METHODS),
            WebSocketRoute("/{path:path}", proxy.handle_websocket),
        ]
    )
    app.state.proxy = proxy
    return app


class _Proxy:
    def __init__(self, config: ProxyConfig, sink: GroundTruthSink | None) -> None:
        self.config = config
        self._sink = sink
        self._schedule = Schedule(config.impairments, config.seed)
        self._timeout = httpx.Timeout(
            config.read_timeout_s, connect=config.connect_timeout_s, pool=config.connect_timeout_s
        )
        self._ssl: ssl.SSLContext | None = None
        self._relaying: set[_StreamContext] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def _watching(self) -> None:
        """The heartbeat runs on the serving loop from the first stream on (only its records need it)."""
        if self._watchdog is None and self._sink is not None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def handle(self, request: Request) -> Response:
        self._watching()
        request_id = uuid.uuid4().hex
        raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
        query: bytes = request.scope.get("query_string", b"")
        url = self.config.upstream + raw_path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")
        connection_listed = {
            name.strip().lower().encode() for name in request.headers.get("connection", "").split(",") if name.strip()
        }
        headers = [
            (name, value)
            for name, value in request.headers.raw
            if name.lower() not in _NOT_FORWARDED_UP and name.lower() not in connection_listed
        ]
        has_body = "content-length" in request.headers or "transfer-encoding" in request.headers
        if self._ssl is None:  # loaded once: httpx would build a verifying context (~30 ms of CPU) per client
            self._ssl = ssl.create_default_context()
        client = httpx.AsyncClient(timeout=self._timeout, trust_env=False, verify=self._ssl)
        try:
            upstream_request = httpx.Request(
                request.method, url, headers=headers, content=request.stream() if has_body else None
            )
            upstream = await client.send(upstream_request, stream=True)
        except BaseException as exc:
            await client.aclose()
            if isinstance(exc, httpx.TimeoutException):
                return _error(504, f"upstream {self.config.upstream} did not answer in time ({type(exc).__name__})")
            if isinstance(exc, httpx.ConnectError):
                return _error(502, f"upstream {self.config.upstream} unreachable: {exc or type(exc).__name__}")
            if isinstance(exc, httpx.TransportError):
                return _error(502, f"upstream {self.config.upstream} failed: {exc or type(exc).__name__}")
            if isinstance(exc, ClientDisconnect):
                return Response(status_code=499)  # nobody is listening any more
            if isinstance(exc, Exception):
                log.exception("proxying %s %s failed", request.method, url)
                return _error(502, f"proxy could not forward the request: {type(exc).__name__}: {exc}")
            raise
        framing = _framing(upstream)
        plan = self._schedule.plan(request.url.path) if framing else None
        stream = _StreamContext(
            proxy=self,
            plan=plan if plan is not None and plan.impaired else None,
            trace_id=trace_id_of(request.headers.get("traceparent")),
            request_id=request_id,
            framing=framing or "sse",
        )
        return _Relay(upstream, client, stream)

    async def handle_websocket(self, websocket: WebSocket) -> None:
        """Relay a WebSocket: the client's messages up as they come, the upstream's down as the rules shape them."""
        self._watching()
        raw_path: bytes = websocket.scope.get("raw_path") or websocket.url.path.encode()
        query: bytes = websocket.scope.get("query_string", b"")
        url = "ws" + self.config.upstream.removeprefix("http") + raw_path.decode("latin-1")
        url += "?" + query.decode("latin-1") if query else ""
        headers = [
            (name.decode("latin-1"), value.decode("latin-1"))
            for name, value in websocket.headers.raw
            if name.lower() not in _NOT_FORWARDED_UP and not name.lower().startswith(b"sec-websocket-")
        ]
        try:
            upstream = await websocket_connect(url, additional_headers=headers, open_timeout=self._timeout.connect)
        except (OSError, TimeoutError, InvalidHandshake) as exc:
            log.warning("upstream WebSocket %s refused: %s", url, exc or type(exc).__name__)
            await websocket.accept()  # then closed with the reason, which a refused handshake could not carry
            await websocket.close(code=1011, reason=f"upstream {self.config.upstream} unreachable")
            return
        stream = self.message_stream(websocket.url.path, websocket.headers.get("traceparent"), "websocket")
        await websocket.accept(headers=[(REQUEST_ID_HEADER.encode(), stream.request_id.encode())])
        self.relaying(stream, True)
        complete = False  # the client leaving cancels the relay
        try:
            async with upstream, anyio.create_task_group() as group:
                group.start_soon(_client_to_upstream, websocket, upstream, group.cancel_scope)
                complete = await _upstream_to_client(upstream, websocket, stream)
                group.cancel_scope.cancel()
            with contextlib.suppress(RuntimeError, WebSocketDisconnect):  # the client may have gone already
                await websocket.close(code=1000 if complete else 1011)
        finally:
            self.relaying(stream, False)

    def message_stream(self, path: str, traceparent: str | None, framing: str) -> _StreamContext:
        """A stream whose events are messages (a WebSocket's, gRPC's), the rules drawn for ``path``: each message
        is kept whole, so a rechunk rule does not apply."""
        plan = dataclasses.replace(self._schedule.plan(path), rechunk=None)
        return _StreamContext(
            proxy=self,
            plan=plan if plan.impaired else None,
            trace_id=trace_id_of(traceparent),
            request_id=uuid.uuid4().hex,
            framing=framing,
        )

    def record(self, facts: list[Fact], stream: _StreamContext, wall_offset_ns: int) -> None:
        """Turn the shaper's facts into ground-truth records (monotonic → wall clock)."""
        for fact in facts:
            self._record(_ground_truth(fact, self.config.node, stream, wall_offset_ns))

    def _record(self, truth: GroundTruth) -> None:
        if self._sink is None:
            return
        try:
            self._sink.record(truth)
        except Exception:
            log.exception("ground-truth sink failed; record lost: %s", truth)

    def relaying(self, stream: _StreamContext, relaying: bool) -> None:
        """Note that the proxy is (or no longer is) relaying ``stream``'s body: a pause of the proxy holds it."""
        if relaying:
            self._relaying.add(stream)
        else:
            self._relaying.discard(stream)

    async def _watch(self) -> None:
        """A heartbeat on the proxy's loop: a wake-up ``PAUSE_RECORDED_S`` late held every stream being relayed."""
        while True:
            due = time.monotonic() + HEARTBEAT_S
            await asyncio.sleep(HEARTBEAT_S)
            late = time.monotonic() - due
            if late < PAUSE_RECORDED_S:
                continue
            end_ns = time.time_ns()
            for stream in list(self._relaying):
                self._record(
                    GroundTruth(
                        cause="connection",
                        start_ns=end_ns - round(late * 1e9),
                        end_ns=end_ns,
                        magnitude=late,
                        detail={"kind": "paused", "source": "watchdog"},
                        node=self.config.node,
                        trace_id=stream.trace_id,
                        request_id=stream.request_id,
                    )
                )


@dataclass(frozen=True, kw_only=True, eq=False)
class _StreamContext:
    proxy: _Proxy
    plan: StreamPlan | None
    """None: relay the body untouched."""
    trace_id: str
    request_id: str
    framing: str = "sse"
    """How the body is cut into events: ``sse``, ``ndjson`` (a JSON document a line), or ``websocket`` and ``grpc``
    (a message an event)."""


def _ground_truth(fact: Fact, node: str, stream: _StreamContext, wall_offset_ns: int) -> GroundTruth:
    if isinstance(fact, Held):
        return GroundTruth(
            cause="network_buffering",
            start_ns=fact.start_ns + wall_offset_ns,
            end_ns=fact.end_ns + wall_offset_ns,
            chunk_indices=fact.indices,
            magnitude=fact.longest_ns / 1e9,
            detail={"kind": fact.kind},
            node=node,
            trace_id=stream.trace_id,
            request_id=stream.request_id,
        )
    if isinstance(fact, Stalled):
        return GroundTruth(
            cause="connection",
            start_ns=fact.start_ns + wall_offset_ns,
            end_ns=fact.end_ns + wall_offset_ns,
            chunk_indices=fact.indices,
            magnitude=(fact.end_ns - fact.start_ns) / 1e9,
            detail={"kind": "stall", "after_event": str(fact.after_event)},
            node=node,
            trace_id=stream.trace_id,
            request_id=stream.request_id,
        )
    assert isinstance(fact, Dropped)
    return GroundTruth(
        cause="connection",
        start_ns=fact.at_ns + wall_offset_ns,
        end_ns=fact.at_ns + wall_offset_ns,
        detail={"kind": "drop", "after_event": str(fact.after_event)},
        node=node,
        trace_id=stream.trace_id,
        request_id=stream.request_id,
    )


async def _client_to_upstream(websocket: WebSocket, upstream: ClientConnection, done: anyio.CancelScope) -> None:
    """The client's messages to the upstream as they come; the client leaving ends the relay both ways."""
    try:
        while True:
            message = await websocket.receive()
            if message["type"] == "websocket.disconnect":
                break
            text = message.get("text")
            await upstream.send(text if text is not None else message.get("bytes") or b"")
    except ConnectionClosed:
        pass
    done.cancel()


async def _upstream_to_client(upstream: ClientConnection, websocket: WebSocket, stream: _StreamContext) -> bool:
    """The upstream's messages to the client, shaped by ``stream``'s plan; whether the upstream closed cleanly."""
    texts: set[int] = set()  # the messages that were text, by index (as the shaper numbers them): text again down

    async def messages() -> AsyncIterator[bytes]:
        index = 0
        try:
            async for message in upstream:
                if isinstance(message, str):
                    texts.add(index)
                    message = message.encode()
                index += 1
                yield message
        except ConnectionClosedOK:
            return
        except ConnectionClosed as exc:
            raise UpstreamBroke(str(exc)) from exc

    async def write(step: Write) -> None:
        for piece in step.pieces:
            if piece.index in texts:
                await websocket.send_text(piece.data.decode())
            else:
                await websocket.send_bytes(piece.data)

    return await relayed(stream, messages(), write)


async def relayed(
    stream: _StreamContext, messages: AsyncIterator[bytes], write: Callable[[Write], Awaitable[None]]
) -> bool:
    """Relay ``messages`` through ``write``, shaped if ``stream`` has a plan; whether the stream ended complete."""
    if stream.plan is not None:
        return await shaped(stream, stream.plan, messages, write)
    index = 0
    try:
        async for data in messages:
            await write(Write((Piece(index, data),)))
            index += 1
    except UpstreamBroke:
        return False
    return True


def _framing(upstream: httpx.Response) -> str | None:
    """How the answer is cut into events, if the rules can apply to it: an event stream (SSE or lines of JSON)
    the upstream sent uncompressed and without error."""
    media_type = upstream.headers.get("content-type", "").split(";")[0].strip().lower()
    encoding = upstream.headers.get("content-encoding", "identity").strip().lower()
    return MEDIA_TYPES.get(media_type) if upstream.is_success and encoding in ("", "identity") else None


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": "proxy_error", "code": status}}, status_code=status)


class _Relay(Response):
    """Streams the upstream response to the client; ends the body early (cuts the connection) when told to."""

    def __init__(self, upstream: httpx.Response, client: httpx.AsyncClient, stream: _StreamContext) -> None:
        self.status_code = upstream.status_code
        self.background = None
        self._upstream, self._client, self._stream = upstream, client, stream
        self.raw_headers = [
            (name.lower(), value) for name, value in upstream.headers.raw if name.lower() not in _NOT_FORWARDED_DOWN
        ]
        self.raw_headers.append((REQUEST_ID_HEADER.encode(), stream.request_id.encode()))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        complete = False
        self._stream.proxy.relaying(self._stream, True)
        try:
            await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()  # the client left: stop reading the upstream at once

                group.start_soon(watch_disconnect)
                if self._stream.plan is None:
                    complete = await self._relay(send)
                else:
                    complete = await self._shape(send, self._stream.plan)
                group.cancel_scope.cancel()
            if complete:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            # else: returning without ending the body makes the server close the connection: a truncated body
        finally:
            self._stream.proxy.relaying(self._stream, False)
            with anyio.CancelScope(shield=True):
                await self._upstream.aclose()
                await self._client.aclose()

    async def _relay(self, send: Send) -> bool:
        try:
            async for chunk in self._upstream.aiter_raw():
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.HTTPError as exc:
            log.warning("upstream broke off mid-body (%s); cutting the client connection", exc or type(exc).__name__)
            return False
        return True

    async def _shape(self, send: Send, plan: StreamPlan) -> bool:
        async def write(step: Write) -> None:
            await send({"type": "http.response.body", "body": step.data, "more_body": True})

        return await shaped(self._stream, plan, _http_events(self._upstream, self._stream.framing), write)


class UpstreamBroke(Exception):
    """The upstream broke off mid-stream (the relay then cuts its client off)."""


async def _http_events(upstream: httpx.Response, framing: str) -> AsyncIterator[bytes]:
    """The upstream body, event by event, byte for byte."""
    framer = EventFramer(framing)
    try:
        async for chunk in upstream.aiter_raw():
            for event in framer.feed(chunk):
                yield event
    except httpx.HTTPError as exc:
        raise UpstreamBroke(str(exc) or type(exc).__name__) from exc
    for event in framer.close():
        yield event


async def shaped(
    stream: _StreamContext, plan: StreamPlan, events: AsyncIterator[bytes], write: Callable[[Write], Awaitable[None]]
) -> bool:
    """Relay the upstream's ``events`` through ``write`` as ``plan`` shapes them, recording what it did; whether
    the stream ended complete (False: cut it, a drop, or the upstream broke off)."""
    shaper = Shaper(plan)
    wall_offset_ns = time.time_ns() - time.monotonic_ns()
    arrived, room = asyncio.Event(), asyncio.Event()

    async def read_upstream() -> None:
        ok = True
        try:
            async for event in events:
                shaper.push(event)
                arrived.set()
                while shaper.buffered_bytes > shaper.max_buffer_bytes:  # backpressure on the upstream
                    room.clear()
                    await room.wait()
        except UpstreamBroke as exc:
            log.warning("upstream broke off mid-stream (%s)", exc)
            ok = False
        shaper.end(ok)
        arrived.set()

    async with anyio.create_task_group() as group:
        group.start_soon(read_upstream)
        while True:
            arrived.clear()
            step = shaper.poll(time.monotonic_ns())
            facts = shaper.take_facts()
            if facts:
                stream.proxy.record(facts, stream, wall_offset_ns)
            if isinstance(step, Write):
                await write(step)
                room.set()
            elif isinstance(step, Finish):
                group.cancel_scope.cancel()
                return step.complete
            else:
                timeout = None if step.until_ns is None else max(0.0, (step.until_ns - time.monotonic_ns()) / 1e9)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(arrived.wait(), timeout)
    return False  # not reached: the loop only leaves by returning
