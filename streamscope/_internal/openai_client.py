"""Record streams made with the OpenAI Python client (Chat Completions and the Responses API).

``instrument_openai(client)`` wraps that client instance's ``chat.completions.create`` and
``responses.create``; calls with ``stream=True`` return the usual stream object, observed. The client parses
the wire itself, so wire bytes are not known (recorded as 0) and the first byte is taken as the moment the
response headers arrived. For exact wire bytes, use ``stream_sse`` with httpx.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from streamscope import semconv as sc
from streamscope._internal.observed_stream import observing
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
        wrapped = observing(original, partial(_start, format_name, client, encoding))
        setattr(wrapped, _WRAPPED, True)
        resource.create = wrapped
    return client


def _start(
    format_name: str, client: Any, encoding: Encoding | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> StreamObserver:
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
