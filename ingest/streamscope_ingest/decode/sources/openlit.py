"""OpenLIT (``openlit.init()``): one span per call, ``{operation} {model}``, scope ``openlit.instrumentation.*``, with
the GenAI attributes and ``gen_ai.request.stream``.

A streamed call is a stream known by its duration (``duration``): the span starts before the request and ends when
the stream is read to its end. OpenLIT's ``gen_ai.server.time_to_first_token`` is not taken for the time to the
first token: it is timed from when the client had the response headers, so it leaves out the wait for them (on a
server that sends its headers with the first token, it is near zero). It stays among the span's attributes under
its own name. A stream closed before its end never ends its span, so it is not seen.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_DURATION, GENERATING_OPERATIONS, Foreign, kept

SOURCE = "openlit"
SCOPES = ("openlit.instrumentation.",)


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or attributes.get(sc.GEN_AI_OPERATION_NAME) not in GENERATING_OPERATIONS:
        return None
    if attributes.get("gen_ai.request.stream") is not True:
        return None  # an answer sent whole is not a stream
    return Foreign(SOURCE, COVERAGE_DURATION, attributes=kept(attributes))
