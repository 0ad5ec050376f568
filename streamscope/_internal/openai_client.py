"""Record streams made with the OpenAI Python client (Chat Completions and the Responses API).

``instrument_openai(client)`` wraps that client instance's ``chat.completions.create`` and
``responses.create``; calls with ``stream=True`` return the usual stream object, observed. The client parses
the wire itself, so wire bytes are not known (recorded as 0) and the first byte is taken as the moment the
response headers arrived. For exact wire bytes, use ``stream_sse`` with httpx.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, StreamRecorder
from streamscope.formats import json_answer_requested, make_format

_WRAPPED = "__streamscope_wrapped__"


def instrument_openai(client: Any, *, encoding: Encoding | None = None) -> Any:
    """Observe ``client``'s streaming calls (``OpenAI`` or ``AsyncOpenAI``); returns the same client."""
    for resource, format_name in ((client.chat.completions, "openai-chat"), (client.responses, "openai-responses")):
        original = resource.create
        if getattr(original, _WRAPPED, False):
            continue
        wrapped = _wrap(original, format_name, client, encoding)
        setattr(wrapped, _WRAPPED, True)
        resource.create = wrapped
    return client


def _start(kwargs: dict[str, Any], format_name: str, client: Any, encoding: Encoding | None) -> StreamObserver:
    base = getattr(client, "base_url", None)
    attributes: dict[str, Any] = {}
    if base is not None and getattr(base, "host", None):
        attributes[sc.SERVER_ADDRESS] = base.host
        if getattr(base, "port", None):
            attributes[sc.SERVER_PORT] = base.port
    recorder = StreamRecorder(
        side="client", provider="openai", request_model=kwargs.get("model"), encoding=encoding, attributes=attributes
    ).start()
    kwargs["extra_headers"] = recorder.inject(dict(kwargs.get("extra_headers") or {}))
    return StreamObserver(recorder, make_format(format_name), json_answer=json_answer_requested(kwargs))


def _wrap(original: Callable[..., Any], format_name: str, client: Any, encoding: Encoding | None) -> Callable[..., Any]:
    # the SDK wraps some methods (required_args) in plain functions: look at the function underneath
    if inspect.iscoroutinefunction(inspect.unwrap(original)):

        async def create_async(*args: Any, **kwargs: Any) -> Any:
            if not kwargs.get("stream"):
                return await original(*args, **kwargs)
            observer = _start(kwargs, format_name, client, encoding)
            try:
                stream = await original(*args, **kwargs)
            except BaseException as exc:
                observer.close("error", type(exc).__qualname__)
                raise
            return ObservedAsyncStream(stream, observer)

        return create_async

    def create(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("stream"):
            return original(*args, **kwargs)
        observer = _start(kwargs, format_name, client, encoding)
        try:
            stream = original(*args, **kwargs)
        except BaseException as exc:
            observer.close("error", type(exc).__qualname__)
            raise
        return ObservedStream(stream, observer)

    return create


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
        if "Timeout" in name:  # APITimeoutError
            self._observer.close("timeout", name)
        elif "Connection" in name:  # APIConnectionError: the connection broke mid-stream
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
        await self._stream.close()

    async def __aenter__(self) -> ObservedAsyncStream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
