"""The proxy's gRPC side: each call relayed to the upstream as bytes, each answer message an event to the rules.

gRPC runs on HTTP/2, which the HTTP side does not speak, so this is a ``grpc.aio`` server of its own. Every method is
relayed as server streaming: a unary answer is one message on the wire, so unary calls pass as well (calls that
stream from the client are not relayed). The call's metadata goes up (``traceparent`` with it), the upstream's
status comes back; each message is kept whole (a rechunk rule does not apply). A drop ends the call UNAVAILABLE.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio

from streamscope.threads import named_thread
from streamscope_cli.proxy.app import REQUEST_ID_HEADER, UpstreamBroke, relayed
from streamscope_cli.proxy.impairments import Write

if TYPE_CHECKING:
    from streamscope_cli.proxy.app import _Proxy

_NOT_FORWARDED = frozenset({"user-agent", "content-type", "te", "grpc-accept-encoding", "grpc-encoding"})
"""Metadata the upstream call sets for itself."""


class GrpcRelay(grpc.GenericRpcHandler):
    """Relays every call to ``upstream`` (``host:port``) for ``proxy``, whose rules shape the answers."""

    def __init__(self, proxy: _Proxy, upstream: str) -> None:
        self._proxy = proxy
        self._upstream = upstream
        self._channel: grpc.aio.Channel | None = None
        self._server: grpc.aio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Serve on ``host:port`` (0: a free port) on the running loop; returns the port bound."""
        self._channel = grpc.aio.insecure_channel(self._upstream)
        self._server = grpc.aio.server()
        self._server.add_generic_rpc_handlers([self])
        bound = self._server.add_insecure_port(f"{host}:{port}")
        await self._server.start()
        return bound

    async def stop(self, grace_s: float = 1.0) -> None:
        if self._server is not None:
            await self._server.stop(grace_s)
        if self._channel is not None:
            await self._channel.close()

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler:
        method: str = handler_call_details.method
        # bytes in, bytes out: no (de)serializers; a coroutine function (gRPC tells it so), which writes each message
        return grpc.unary_stream_rpc_method_handler(functools.partial(self._relay, method))

    async def _relay(self, method: str, request: bytes, context: grpc.aio.ServicerContext[bytes, bytes]) -> None:
        assert self._channel is not None
        metadata = tuple(
            (key, value) for key, value in context.invocation_metadata() or () if key not in _NOT_FORWARDED
        )
        call = self._channel.unary_stream(method)(request, metadata=metadata, timeout=context.time_remaining())
        traceparent = next((str(value) for key, value in metadata if key == "traceparent"), None)
        stream = self._proxy.message_stream(method, traceparent, "grpc")
        await context.send_initial_metadata(((REQUEST_ID_HEADER, stream.request_id),))
        failed: list[grpc.aio.AioRpcError] = []

        async def messages() -> AsyncIterator[bytes]:
            try:
                async for message in call:
                    yield message
            except grpc.aio.AioRpcError as exc:
                failed.append(exc)
                raise UpstreamBroke(f"{exc.code().name}: {exc.details()}") from exc

        async def write(step: Write) -> None:
            for piece in step.pieces:
                await context.write(piece.data)

        self._proxy.relaying(stream, True)
        try:
            complete = await relayed(stream, messages(), write)
        finally:
            self._proxy.relaying(stream, False)
            call.cancel()  # a no-op once it ended; else the client left, or the proxy dropped the call
        if failed:
            await context.abort(failed[0].code(), failed[0].details() or "")
        if not complete:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the proxy dropped the connection")


def serve_in_thread(proxy: _Proxy, upstream: str, host: str, port: int) -> tuple[int, Callable[[], None]]:
    """The relay on a thread and event loop of its own (the HTTP side has uvicorn's): its port, and how to stop it."""
    loop = asyncio.new_event_loop()
    relay = GrpcRelay(proxy, upstream)
    thread = named_thread(loop.run_forever, "streamscope-proxy-grpc")
    thread.start()
    try:
        bound = asyncio.run_coroutine_threadsafe(relay.start(host, port), loop).result(30)
    except BaseException:
        loop.call_soon_threadsafe(loop.stop)
        raise
    stopped = threading.Event()

    def stop() -> None:
        if stopped.is_set():
            return
        stopped.set()
        asyncio.run_coroutine_threadsafe(relay.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)

    return bound, stop
