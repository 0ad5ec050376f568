"""Record streams made with Ollama's Python client (``ollama.Client`` and ``ollama.AsyncClient``).

``instrument_ollama(client)`` wraps that client instance's ``chat`` and ``generate``; calls with ``stream=True``
return the usual iterator of responses, observed. The client parses the lines itself, so wire bytes are not
known (recorded as 0), and it takes no headers per call, so the stream's trace does not reach the server: for
exact wire bytes and a server side joined to the client's, use ``stream_ndjson`` with httpx.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple

from streamscope import semconv as sc
from streamscope._internal.observed_stream import observing
from streamscope._internal.observer import StreamObserver
from streamscope._internal.recorder import Encoding, StreamRecorder
from streamscope.formats import make_format

_WRAPPED = "__streamscope_wrapped__"
OPERATIONS = {"chat": "chat", "generate": "text_completion"}


def instrument_ollama(client: Any, *, encoding: Encoding | None = None, tracer_provider: Any = None) -> Any:
    """Observe ``client``'s streaming ``chat`` and ``generate`` calls (recorded through ``tracer_provider``, the
    global one by default); returns the same client."""
    options = _Options(encoding, tracer_provider)
    for name, operation in OPERATIONS.items():
        original = getattr(client, name)
        if getattr(original, _WRAPPED, False):
            continue
        wrapped = observing(original, partial(_start, operation, client, options))
        setattr(wrapped, _WRAPPED, True)
        setattr(client, name, wrapped)
    return client


class _Options(NamedTuple):
    encoding: Encoding | None
    tracer_provider: Any


def _start(
    operation: str, client: Any, options: _Options, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> StreamObserver:
    base = getattr(getattr(client, "_client", None), "base_url", None)
    attributes: dict[str, Any] = {}
    if base is not None and getattr(base, "host", None):
        attributes[sc.SERVER_ADDRESS] = base.host
        if getattr(base, "port", None):
            attributes[sc.SERVER_PORT] = base.port
    model = kwargs.get("model", args[0] if args else None)
    recorder = StreamRecorder(
        side="client",
        transport="chunked",
        provider="ollama",
        request_model=model or None,
        operation=operation,
        encoding=options.encoding,
        attributes=attributes,
        tracer_provider=options.tracer_provider,
    ).start()
    return StreamObserver(recorder, make_format("ollama"), framing="ndjson")
