"""LiteLLM's ``otel`` callback (``litellm.callbacks = ["otel"]``, the SDK or the proxy): a ``litellm_request`` span
per call, scope ``litellm``, with the GenAI attributes under the older ``gen_ai.system`` and ``llm.is_streaming``
(the text ``"True"``), and the finish reasons as one JSON text (``'["stop"]'``).

A streamed call is a stream known by its duration (``duration``): the span starts before the request and ends
when the stream is read to its end. LiteLLM knows when its first chunk came but does not put it on the span. Its
``raw_gen_ai_request`` child repeats the call; the proxy's own request span is the request, not the stream: neither
is read. The user and key attributes the proxy records (``metadata.*``, ``hidden_params``) and stack traces are not
kept.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_DURATION, GENERATING_OPERATIONS, Foreign, kept

SOURCE = "litellm"
SCOPES = ("litellm",)
REQUEST_SPAN = "litellm_request"
_RENAMES = {"gen_ai.system": sc.GEN_AI_PROVIDER_NAME}
_NOT_KEPT = ("metadata.", "hidden_params", "error.stack_trace")


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if scope not in SCOPES or span.name != REQUEST_SPAN:
        return None
    if attributes.get(sc.GEN_AI_OPERATION_NAME) not in GENERATING_OPERATIONS:
        return None
    if str(attributes.get("llm.is_streaming")) != "True":
        return None  # an answer sent whole is not a stream
    values = kept(attributes, _RENAMES, dropped=_NOT_KEPT)
    reasons = values.get(sc.GEN_AI_RESPONSE_FINISH_REASONS)
    if isinstance(reasons, str):
        values[sc.GEN_AI_RESPONSE_FINISH_REASONS] = _listed(reasons)
    return Foreign(SOURCE, COVERAGE_DURATION, attributes=values)


def _listed(text: str) -> list[str] | str:
    """The finish reasons LiteLLM writes as JSON text, as a list; text that is not such a list, as it came."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return [str(v) for v in value] if isinstance(value, list) else text
