"""The OpenTelemetry project's GenAI instrumentation (``opentelemetry-instrumentation-openai-v2`` and the others
built on ``opentelemetry-util-genai``): one span per call, ``{operation} {model}``, with the GenAI attributes.

Its streamed calls carry no chunk events and no time to the first token, and look like unstreamed ones: what is
known is the call's duration (``duration``), which ends when the stream is read to its end or closed. Older
releases (scope ``opentelemetry.instrumentation.openai_v2``) name the provider ``gen_ai.system``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_DURATION, GENERATING_OPERATIONS, Foreign, kept

SOURCE = "opentelemetry-genai"
SCOPES = ("opentelemetry.util.genai", "opentelemetry.instrumentation.openai_v2")
_RENAMES = {"gen_ai.system": sc.GEN_AI_PROVIDER_NAME}


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or attributes.get(sc.GEN_AI_OPERATION_NAME) not in GENERATING_OPERATIONS:
        return None
    return Foreign(SOURCE, COVERAGE_DURATION, attributes=kept(attributes, _RENAMES))
