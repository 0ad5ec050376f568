"""The gateway's forwarding: each request to the upstream as it came, each answer back as it arrives.

The answer's bytes go back as the upstream's reads return them (neither decoded nor re-chunked), one read at a time:
the next read waits until the client's connection has taken the last, so a slow client slows the upstream down
instead of filling the gateway's memory. A client that leaves stops the exchange at once and closes the upstream
connection, so the engine sees it close and frees the request's slot.

A JSON request body (``application/json`` or ``+json``) is read whole first, up to ``max_body_bytes`` (413 past it:
a stream is asked for in it, and the recording reads it whatever its size); any other body is forwarded as it
arrives.
When ``StreamMiddleware`` records the request and it asked for a stream, the upstream gets the gateway span's trace
context; otherwise the caller's is forwarded untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import anyio
import httpx

from streamscope.asgi import Message, Receive, RecordedRequest, Scope, Send, is_json, stream_of
from streamscope_cli.gateway.headers import end_to_end, replaced, upstream_request_headers

log = logging.getLogger("streamscope_cli.gateway")

UPSTREAM_TIMEOUT = httpx.Timeout(connect=10.0, read=600.0, write=60.0, pool=None)
"""A read may wait long: a queued or long prompt delays an engine's first byte by minutes."""
UPSTREAM_LIMITS = httpx.Limits(max_connections=None, max_keepalive_connections=256)
"""As many connections as clients: the engine, not the gateway, decides how many requests it takes."""


class ClientLeft(Exception):
    """The client went away while its request body was being forwarded."""


class BodyTooLarge(Exception):
    """A JSON request body longer than the gateway reads whole."""


class Gateway:
    """The forwarding ASGI app, in front of ``upstream`` (a base URL whose path, if any, prefixes every request's)."""

    def __init__(self, upstream: str, max_body_bytes: int = 64 << 20) -> None:
        """``max_body_bytes``: the largest JSON request body read whole; a longer one is answered 413."""
        self.upstream = upstream.rstrip("/")
        self.max_body_bytes = max_body_bytes
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._exchange(scope, receive, send)
        elif scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        # anything else (websockets) is not forwarded: the server refuses it

    def _upstream_client(self) -> httpx.AsyncClient:
        """One pool of upstream connections, made on the server's event loop by its first request."""
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=UPSTREAM_TIMEOUT, limits=UPSTREAM_LIMITS, trust_env=False)
        return self._client

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _exchange(self, scope: Scope, receive: Receive, send: Send) -> None:
        recorded = stream_of(scope)
        headers = upstream_request_headers(scope)
        content: bytes | AsyncIterator[bytes] | None
        if is_json(_header(headers, b"content-type")):
            try:
                content = await _whole_body(receive, self.max_body_bytes)
            except BodyTooLarge:
                limit = f"{self.max_body_bytes / (1 << 20):g} MiB"
                await _answer_error(send, 413, f"request body over the gateway's --max-request-mib ({limit})")
                return
            if content is None:
                return  # the client left before its request was whole
            if recorded is not None:
                recorded.read_request(content)  # past the middleware's limit, it read none of it
        elif any(name in (b"content-length", b"transfer-encoding") for name, _ in scope.get("headers", ())):
            content = _body_as_it_arrives(receive)
        else:
            content = None
        if recorded is not None and recorded.asked_for_stream:
            headers = replaced(headers, recorded.recorder.inject({}))
        request = self._upstream_client().build_request(
            scope["method"], self._url(scope), headers=headers, content=content
        )
        body_read = not isinstance(content, AsyncIterator)
        async with anyio.create_task_group() as exchange:
            if body_read:  # only the client's leaving is left to receive: watch for it from the start
                exchange.start_soon(_cancel_when_client_leaves, receive, exchange.cancel_scope)
            upstream = await _open(self._upstream_client(), request, send, recorded)
            if upstream is not None:
                try:
                    if not body_read:
                        exchange.start_soon(_cancel_when_client_leaves, receive, exchange.cancel_scope)
                    await _relay(upstream, send, recorded)
                finally:
                    with anyio.CancelScope(shield=True):
                        await upstream.aclose()
            exchange.cancel_scope.cancel()

    def _url(self, scope: Scope) -> str:
        path: bytes = scope.get("raw_path") or scope["path"].encode()
        query: bytes = scope.get("query_string", b"")
        return self.upstream + path.decode("latin-1") + ("?" + query.decode("latin-1") if query else "")


async def _open(
    client: httpx.AsyncClient, request: httpx.Request, send: Send, recorded: RecordedRequest | None
) -> httpx.Response | None:
    """The upstream's answer, its body still to come; None when the gateway answered the client itself."""
    try:
        return await client.send(request, stream=True)
    except ClientLeft:
        return None
    except httpx.HTTPError as exc:
        if recorded is not None:
            recorded.end("error", type(exc).__qualname__)
        status = 504 if isinstance(exc, httpx.TimeoutException) else 502
        reason = str(exc) or type(exc).__name__
        await _answer_error(send, status, f"upstream {request.url.host}:{request.url.port}: {reason}")
        return None


async def _relay(upstream: httpx.Response, send: Send, recorded: RecordedRequest | None) -> None:
    """The upstream's answer to the client, read by read; a body the upstream broke off is cut short too."""
    headers = end_to_end(upstream.headers.raw)
    await send({"type": "http.response.start", "status": upstream.status_code, "headers": headers})
    try:
        async for data in upstream.aiter_raw():
            if recorded is not None:
                recorded.recorder.first_byte()
            await send({"type": "http.response.body", "body": data, "more_body": True})
    except httpx.HTTPError as exc:
        log.warning("upstream broke off mid-body (%s); cutting the client's connection", exc or type(exc).__name__)
        if recorded is not None:
            recorded.end("disconnected", type(exc).__qualname__)
        return  # a response left unfinished: the server closes the client's connection
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_when_client_leaves(receive: Receive, scope: anyio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    scope.cancel()


async def _whole_body(receive: Receive, limit: int) -> bytes | None:
    """The request body, or None if the client left first; ``BodyTooLarge`` past ``limit`` bytes."""
    parts, size = [], 0
    while True:
        message: Message = await receive()
        if message["type"] == "http.disconnect":
            return None
        part = message.get("body", b"")
        size += len(part)
        if size > limit:
            raise BodyTooLarge
        parts.append(part)
        if not message.get("more_body", False):
            return b"".join(parts)


async def _body_as_it_arrives(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientLeft
        if body := message.get("body", b""):
            yield body
        if not message.get("more_body", False):
            return


async def _answer_error(send: Send, status: int, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "gateway_error", "code": status}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _header(headers: list[tuple[bytes, bytes]], wanted: bytes) -> str:
    return next((value for name, value in headers if name == wanted), b"").decode("latin-1")
