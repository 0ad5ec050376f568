"""Record gRPC server-streaming responses (unary request, stream of messages) on both ends, with interceptors.

A client interceptor (``StreamClientInterceptor`` for ``grpc`` channels, ``AsyncStreamClientInterceptor`` for
``grpc.aio``) records each message as it reaches the application and sends the trace context in the call's
metadata; a server interceptor (``StreamServerInterceptor``, ``AsyncStreamServerInterceptor`` for ``grpc.aio``
servers whose unary-stream methods are async generators) records each message as the servicer yields it, in the
caller's trace. gRPC
has no format of its own: ``carried`` is the user's function from a message to the ``EventFacts`` it carried (its
text, its tokens where it counts them). A message's size on the wire is its serialized size plus gRPC's 5-byte
prefix (HTTP/2's framing not counted); a message that is not protobuf counts 0 bytes.

The response ends as completed when the server ends the call with OK, cancelled when the client cancels it or stops
reading, an error named by its status code otherwise.

Needs ``grpcio`` (the ``grpc`` extra). Calls other than unary-stream pass through unrecorded, as do those whose
method is not in ``methods`` when it is given.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import grpc
import grpc.aio
from opentelemetry import propagate

from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, Side, StreamRecorder
from streamscope.formats import Carried, MessageFormat

FRAME_PREFIX_BYTES = 5
"""gRPC's length prefix before each message: a compression flag and four bytes of length."""


def wire_bytes(message: Any) -> int:
    """A protobuf message's size on the wire (prefix included); 0 for a message of another kind."""
    size = getattr(message, "ByteSize", None)
    return size() + FRAME_PREFIX_BYTES if callable(size) else 0


class _Records:
    """The options every interceptor takes, and one call's observer made from them."""

    def __init__(
        self,
        carried: Carried,
        *,
        provider: str = "unknown",
        request_model: str | None = None,
        operation: str = "chat",
        methods: Collection[str] | None = None,
        encoding: Encoding | None = None,
        attributes: Mapping[str, Any] | None = None,
        tracer_provider: Any = None,
    ) -> None:
        """``methods``: record only these (``/package.Service/Method``); the others pass through."""
        self._carried = carried
        self._provider = provider
        self._request_model = request_model
        self._operation = operation
        self._methods = frozenset(methods) if methods is not None else None
        self._encoding = encoding
        self._attributes = dict(attributes or {})
        self._tracer_provider = tracer_provider

    def _records(self, method: str | bytes) -> bool:
        return self._methods is None or _method_name(method) in self._methods

    def _observer(self, side: Side, method: str | bytes, **recorder: Any) -> StreamObserver:
        attributes = {**self._attributes, sc.RPC_METHOD: _method_name(method).lstrip("/")}
        started = StreamRecorder(
            side=side,
            transport="grpc",
            provider=self._provider,
            request_model=self._request_model,
            operation=self._operation,
            encoding=self._encoding,
            attributes=attributes,
            tracer_provider=self._tracer_provider,
            **recorder,
        ).start()
        return StreamObserver(started, MessageFormat(self._carried, self._provider))


class _ServerRecords(_Records):
    def __init__(self, carried: Carried, *, node_name: str | None = None, **options: Any) -> None:
        """``node_name``: the node serving, which attribution reads its stalls against."""
        if node_name:
            options["attributes"] = {**(options.get("attributes") or {}), sc.STREAMSCOPE_NODE_NAME: node_name}
        super().__init__(carried, **options)

    def _recorded(self, handler: Any, method: str | bytes) -> bool:
        """Whether ``handler`` serves a unary-stream method this records."""
        return (
            handler is not None
            and not handler.request_streaming
            and handler.response_streaming
            and self._records(method)
        )


def _method_name(method: str | bytes) -> str:
    return method.decode() if isinstance(method, bytes) else method


def _record(observer: StreamObserver, message: Any) -> None:
    observer.recorder.first_byte()
    observer.on_payload("", message, wire_bytes(message))


def _ended(observer: StreamObserver, code: grpc.StatusCode | None) -> None:
    """Close on how the call ended: OK is left to the reader, which sees the end after the last message."""
    if code == grpc.StatusCode.CANCELLED:
        observer.close("cancelled")
    elif code is not None and code != grpc.StatusCode.OK:
        observer.close("error", code.name)


class _CallDetails(NamedTuple):
    method: str
    timeout: float | None
    metadata: Any
    credentials: Any
    wait_for_ready: bool | None
    compression: Any


class _ClientCallDetails(_CallDetails, grpc.ClientCallDetails):
    """The call's details with the trace context added to its metadata."""


def _with_trace(details: Any, recorder: StreamRecorder) -> _ClientCallDetails:
    metadata = list(details.metadata or ())
    metadata.extend(recorder.inject({}).items())
    return _ClientCallDetails(
        details.method,
        details.timeout,
        metadata,
        details.credentials,
        getattr(details, "wait_for_ready", None),
        getattr(details, "compression", None),
    )


class _RecordedCall:
    """A unary-stream call whose messages are recorded as the application reads them; otherwise the call itself."""

    def __init__(self, call: Any, observer: StreamObserver) -> None:
        self._call = call
        self._observer = observer
        call.add_done_callback(lambda done: _ended(observer, done.code()))

    def __iter__(self) -> _RecordedCall:
        return self

    def __next__(self) -> Any:
        try:
            message = next(self._call)
        except StopIteration:
            self._observer.close("completed")
            raise
        except grpc.RpcError as exc:
            _ended(self._observer, exc.code())
            raise
        _record(self._observer, message)
        return message

    def cancel(self) -> bool:
        self._observer.close("cancelled")
        cancelled: bool = self._call.cancel()
        return cancelled

    def __getattr__(self, name: str) -> Any:
        return getattr(self._call, name)


@contextmanager
def _closed_if_raised(observer: StreamObserver) -> Iterator[None]:
    """Starting the call failed: the stream ends there, as an error of that type."""
    try:
        yield
    except BaseException as exc:
        observer.close("error", type(exc).__name__)
        raise


class StreamClientInterceptor(_Records, grpc.UnaryStreamClientInterceptor):
    """Records each unary-stream call of a channel: ``grpc.intercept_channel(channel, StreamClientInterceptor(f))``."""

    def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if not self._records(details.method):
            return continuation(details, request)
        observer = self._observer("client", details.method)
        with _closed_if_raised(observer):
            call = continuation(_with_trace(details, observer.recorder), request)
        return _RecordedCall(call, observer)


class AsyncStreamClientInterceptor(_Records, grpc.aio.UnaryStreamClientInterceptor):
    """The same for ``grpc.aio`` channels: ``grpc.aio.insecure_channel(target, interceptors=[...])``."""

    async def intercept_unary_stream(self, continuation: Callable[..., Any], details: Any, request: Any) -> Any:
        if not self._records(details.method):
            return await continuation(details, request)
        observer = self._observer("client", details.method)
        with _closed_if_raised(observer):
            call = await continuation(_with_trace(details, observer.recorder), request)
        call.add_done_callback(lambda done: observer.close("cancelled") if done.cancelled() else None)
        return _read_async(call, observer)  # grpc.aio serves it as the call's messages; the call stays the call


async def _read_async(call: Any, observer: StreamObserver) -> AsyncIterator[Any]:
    try:
        async for message in call:
            _record(observer, message)
            yield message
    except grpc.aio.AioRpcError as exc:
        _ended(observer, exc.code())
        raise
    except BaseException:  # cancelled, or the application stopped reading (GeneratorExit)
        observer.close("cancelled")
        raise
    observer.close("completed")


class StreamServerInterceptor(_ServerRecords, grpc.ServerInterceptor):
    """Records each unary-stream method a ``grpc.server`` serves, as the servicer yields its messages, continuing
    the caller's trace: ``grpc.server(pool, interceptors=[StreamServerInterceptor(f)])``."""

    def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = continuation(details)
        if not self._recorded(handler, details.method):
            return handler
        behavior, method = handler.unary_stream, details.method

        def recorded(request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
            parent = propagate.extract(dict(context.invocation_metadata()))
            observer = self._observer("server", method, parent=parent)
            context.add_callback(lambda: observer.close("disconnected"))  # after a close: no-op
            try:
                for message in behavior(request, context):
                    _record(observer, message)
                    yield message
            except GeneratorExit:
                observer.close("disconnected")  # the client went away (or cancelled)
                raise
            except Exception as exc:
                observer.close("error", type(exc).__name__)
                raise
            observer.close("completed")

        return _replaced(handler, recorded)


class AsyncStreamServerInterceptor(_ServerRecords, grpc.aio.ServerInterceptor):
    """``StreamServerInterceptor`` for a ``grpc.aio.server``: ``grpc.aio.server(interceptors=[...])``."""

    async def intercept_service(self, continuation: Callable[..., Any], details: Any) -> Any:
        handler = await continuation(details)
        if not self._recorded(handler, details.method):
            return handler
        behavior, method = handler.unary_stream, details.method

        async def recorded(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            parent = propagate.extract(dict(context.invocation_metadata() or ()))
            observer = self._observer("server", method, parent=parent)
            try:
                async for message in behavior(request, context):
                    _record(observer, message)
                    yield message
            except Exception as exc:
                observer.close("error", type(exc).__name__)
                raise
            except BaseException:  # the call was cancelled: the client went away
                observer.close("disconnected")
                raise
            observer.close("completed")

        return _replaced(handler, recorded)


def _replaced(handler: Any, behavior: Callable[..., Any]) -> Any:
    """``handler`` with ``behavior`` serving its unary-stream method."""
    return grpc.unary_stream_rpc_method_handler(
        behavior, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )
