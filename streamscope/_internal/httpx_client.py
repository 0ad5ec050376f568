"""Record streams read with httpx from OpenAI-compatible or Anthropic SSE endpoints, and Ollama's
newline-delimited JSON ones.

    with streamscope.stream_sse(client, "POST", url, json=body, format="anthropic") as events:
        for event in events:
            ...  # event.payload is the parsed JSON

    with streamscope.stream_ndjson(client, "POST", "http://localhost:11434/api/chat", json=body) as lines:
        ...  # one event a line; event.payload is the line's JSON

Wire bytes are each event's bytes in the response body, framing included (after transfer decoding: for a
gzip-encoded body, the inflated size); the time of each chunk is when the read that completed it returned.
Leaving the ``with`` block before the end records the stream as cancelled.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from streamscope import semconv as sc
from streamscope._internal.observer import StreamEvent, StreamObserver
from streamscope._internal.recorder import Encoding, Outcome, StreamRecorder
from streamscope.formats import FRAMINGS, json_answer_requested, make_format

if TYPE_CHECKING:  # imported where a stream is read: `import streamscope` stays free of httpx and what it loads
    import httpx


def _begin(
    client: httpx.Client | httpx.AsyncClient,
    method: str,
    url: str,
    *,
    format: str,
    provider: str | None,
    request_model: str | None,
    operation: str,
    encoding: Encoding | None,
    attributes: Mapping[str, Any] | None,
    tracer_provider: Any,
    request_kwargs: dict[str, Any],
) -> tuple[StreamObserver, httpx.Request]:
    stream_format = make_format(format)
    framing = FRAMINGS.get(format, "sse")
    body = request_kwargs.get("json")
    model = request_model or (body.get("model") if isinstance(body, dict) else None)
    recorder = StreamRecorder(
        side="client",
        transport="chunked" if framing == "ndjson" else "sse",
        provider=provider or stream_format.provider,
        request_model=model,
        operation=operation,
        encoding=encoding,
        attributes=attributes,
        tracer_provider=tracer_provider,
    )
    request = client.build_request(method, url, **_build_options(request_kwargs))
    recorder.set_attribute(sc.SERVER_ADDRESS, request.url.host)
    if request.url.port:
        recorder.set_attribute(sc.SERVER_PORT, request.url.port)
    recorder.start()
    recorder.inject(request.headers)
    observer = StreamObserver(recorder, stream_format, json_answer=json_answer_requested(body), framing=framing)
    return observer, request


_SEND_OPTIONS = ("auth", "follow_redirects")
"""Keyword arguments of ``client.stream()`` that belong to ``send()`` rather than ``build_request()``."""


def _build_options(request_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request_kwargs.items() if k not in _SEND_OPTIONS}


def _send_options(request_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in request_kwargs.items() if k in _SEND_OPTIONS}


def _outcome_of(exc: BaseException) -> tuple[Outcome, str | None]:
    import httpx

    if isinstance(exc, GeneratorExit):
        return "cancelled", None
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", type(exc).__qualname__
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError)):
        return "disconnected", type(exc).__qualname__
    return "error", type(exc).__qualname__


def _end_of_body_outcome(observer: StreamObserver) -> Outcome:
    """The body ended: completed if the provider said so, else the connection was cut."""
    return "completed" if observer.done else "disconnected"


@contextmanager
def stream_sse(
    client: httpx.Client,
    method: str,
    url: str,
    *,
    format: str = "openai-chat",
    provider: str | None = None,
    request_model: str | None = None,
    operation: str = "chat",
    encoding: Encoding | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: Any = None,
    **request_kwargs: Any,
) -> Iterator[Iterator[StreamEvent]]:
    """Send the request and yield an iterator over its events, recording the stream."""
    observer, request = _begin(
        client,
        method,
        url,
        format=format,
        provider=provider,
        request_model=request_model,
        operation=operation,
        encoding=encoding,
        attributes=attributes,
        tracer_provider=tracer_provider,
        request_kwargs=request_kwargs,
    )
    try:
        response = client.send(request, stream=True, **_send_options(request_kwargs))
    except BaseException as exc:
        observer.close(*_outcome_of(exc))
        raise
    outcome: list[Outcome] = ["cancelled"]

    def events() -> Iterator[StreamEvent]:
        for data in response.iter_bytes():
            yield from observer.on_bytes(data)
        yield from observer.on_end_of_body()
        outcome[0] = _end_of_body_outcome(observer)

    try:
        if response.is_error:
            response.read()
            observer.close("error", f"http_{response.status_code}")
            response.raise_for_status()
        yield events()
    except BaseException as exc:
        observer.close(*_outcome_of(exc))
        raise
    finally:
        response.close()
        observer.close(outcome[0])


@asynccontextmanager
async def astream_sse(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    format: str = "openai-chat",
    provider: str | None = None,
    request_model: str | None = None,
    operation: str = "chat",
    encoding: Encoding | None = None,
    attributes: Mapping[str, Any] | None = None,
    tracer_provider: Any = None,
    **request_kwargs: Any,
) -> AsyncIterator[AsyncIterator[StreamEvent]]:
    """The asyncio twin of ``stream_sse``."""
    observer, request = _begin(
        client,
        method,
        url,
        format=format,
        provider=provider,
        request_model=request_model,
        operation=operation,
        encoding=encoding,
        attributes=attributes,
        tracer_provider=tracer_provider,
        request_kwargs=request_kwargs,
    )
    try:
        response = await client.send(request, stream=True, **_send_options(request_kwargs))
    except BaseException as exc:
        observer.close(*_outcome_of(exc))
        raise
    outcome: list[Outcome] = ["cancelled"]

    async def events() -> AsyncIterator[StreamEvent]:
        async for data in response.aiter_bytes():
            for event in observer.on_bytes(data):
                yield event
        for event in observer.on_end_of_body():
            yield event
        outcome[0] = _end_of_body_outcome(observer)

    try:
        if response.is_error:
            await response.aread()
            observer.close("error", f"http_{response.status_code}")
            response.raise_for_status()
        yield events()
    except BaseException as exc:
        observer.close(*_outcome_of(exc))
        raise
    finally:
        await response.aclose()
        observer.close(outcome[0])


def stream_ndjson(
    client: httpx.Client, method: str, url: str, *, format: str = "ollama", **options: Any
) -> contextlib.AbstractContextManager[Iterator[StreamEvent]]:
    """``stream_sse`` for a stream of one JSON document a line (Ollama's ``/api/chat`` and ``/api/generate``):
    each line is an event, recorded as a chunk of transport ``chunked``."""
    return stream_sse(client, method, url, format=format, **options)


def astream_ndjson(
    client: httpx.AsyncClient, method: str, url: str, *, format: str = "ollama", **options: Any
) -> contextlib.AbstractAsyncContextManager[AsyncIterator[StreamEvent]]:
    """The asyncio twin of ``stream_ndjson``."""
    return astream_sse(client, method, url, format=format, **options)
