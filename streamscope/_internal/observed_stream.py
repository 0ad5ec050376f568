"""A client library's stream, observed: each item the library yields is recorded as it reaches the application.

Shared by the wrappers of client libraries that parse the wire themselves (the OpenAI client, Ollama's): the
first byte is the first item's, wire bytes are unknown, and the stream's end, failure or abandonment closes the
recording.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from streamscope._internal.observer import StreamObserver

Start = Callable[[tuple[Any, ...], dict[str, Any]], StreamObserver]
"""(the call's arguments, its keyword arguments) -> the observer of the stream it opens (it may add headers)."""


def observing(original: Callable[..., Any], start: Start) -> Callable[..., Any]:
    """``original`` (a client library's call, sync or async), its ``stream=True`` calls returning the stream
    observed: recorded from the call, closed as an error if the call itself fails."""
    # some SDKs wrap their methods (OpenAI's required_args) in plain functions: look at the function underneath
    if inspect.iscoroutinefunction(inspect.unwrap(original)):

        async def call_async(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("stream"):
                return await original(*args, **kwargs)
            observer = start(args, kwargs)
            try:
                stream = await original(*args, **kwargs)
            except BaseException as exc:
                observer.close("error", type(exc).__qualname__)
                raise
            return ObservedAsyncStream(stream, observer)

        return call_async

    def call(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("stream"):
            return original(*args, **kwargs)
        observer = start(args, kwargs)
        try:
            stream = original(*args, **kwargs)
        except BaseException as exc:
            observer.close("error", type(exc).__qualname__)
            raise
        return ObservedStream(stream, observer)

    return call


_BROKEN_OFF = frozenset({"APIConnectionError", "RemoteProtocolError", "ReadError"})
"""Exceptions, by name, of a connection broken mid-stream: OpenAI's client wraps them, Ollama's passes httpx's."""


class _Observed:
    """Shared behaviour of the sync and async stream proxies: everything not overridden goes to the stream."""

    def __init__(self, stream: Any, observer: StreamObserver) -> None:
        self._stream = stream
        self._observer = observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def _item(self, item: Any) -> Any:
        # the first byte is the first event's, as stream_sse reads it: the SDK returns the stream at the headers
        self._observer.recorder.first_byte()
        self._observer.on_payload(str(getattr(item, "type", "") or ""), item)
        return item

    def _failed(self, exc: BaseException) -> None:
        name = type(exc).__qualname__
        if "Timeout" in name:  # OpenAI's APITimeoutError, httpx's timeouts under Ollama's client
            self._observer.close("timeout", name)
        elif name in _BROKEN_OFF:  # the connection broke mid-stream
            self._observer.close("disconnected", name)
        else:
            self._observer.close("error", name)

    def _ended(self) -> None:
        """The SDK's iterator ended: a stream without a finish reason or end event was cut short."""
        facts = self._observer.format.facts
        self._observer.close("completed" if facts.finish_reasons or self._observer.done else "disconnected")

    def __del__(self) -> None:
        # a stream dropped before its end was abandoned by the application
        observer = self.__dict__.get("_observer")
        if observer is not None:
            observer.close("cancelled")


class ObservedStream(_Observed):
    def __iter__(self) -> ObservedStream:
        return self

    def __next__(self) -> Any:
        try:
            item = next(self._stream)
        except StopIteration:
            self._ended()
            raise
        except BaseException as exc:
            self._failed(exc)
            raise
        return self._item(item)

    def close(self) -> None:
        self._observer.close("cancelled")
        self._stream.close()

    def __enter__(self) -> ObservedStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ObservedAsyncStream(_Observed):
    def __aiter__(self) -> ObservedAsyncStream:
        return self

    async def __anext__(self) -> Any:
        try:
            item = await self._stream.__anext__()
        except StopAsyncIteration:
            self._ended()
            raise
        except BaseException as exc:
            self._failed(exc)
            raise
        return self._item(item)

    async def close(self) -> None:
        self._observer.close("cancelled")
        close = getattr(self._stream, "close", None) or self._stream.aclose  # an async generator has only aclose
        await close()

    aclose = close

    async def __aenter__(self) -> ObservedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
