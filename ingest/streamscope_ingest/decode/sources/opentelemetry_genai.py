"""The OpenTelemetry project's GenAI instrumentation (``opentelemetry-instrumentation-openai-v2`` and the others
built on ``opentelemetry-util-genai``): one span per call, ``{operation} {model}``, with the GenAI attributes.

Its streamed calls carry no chunk events and no time to the first token: what is known is the call's duration
(``duration``), which ends when the stream is read to its end or closed. From 1.3b0 a streamed call's span has
``gen_ai.response.time_to_first_chunk``, timed to the first chunk of any kind (a role-only chunk, which
OpenAI-compatible servers send before the prompt is processed, counts): it is that stream's first byte, not its first
token, which stays unknown. Older releases (scope ``opentelemetry.instrumentation.openai_v2``) name the provider
``gen_ai.system``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import (
    COVERAGE_DURATION,
    GENERATING_OPERATIONS,
    Foreign,
    kept,
    measured_us,
)

SOURCE = "opentelemetry-genai"
SCOPES = ("opentelemetry.util.genai", "opentelemetry.instrumentation.openai_v2")
_RENAMES = {"gen_ai.system": sc.GEN_AI_PROVIDER_NAME}
FIRST_CHUNK_NOTE = (
    f"{sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK} is timed by this source to the first chunk of any kind (a role-only "
    "one too): stored as the first byte; the time to the first token is unknown"
)


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or attributes.get(sc.GEN_AI_OPERATION_NAME) not in GENERATING_OPERATIONS:
        return None
    first_chunk_us = measured_us(attributes.get(sc.GEN_AI_RESPONSE_TIME_TO_FIRST_CHUNK), 1e6)
    return Foreign(
        SOURCE,
        COVERAGE_DURATION,
        attributes=kept(attributes, _RENAMES),
        first_byte_us=first_chunk_us,
        notes=() if first_chunk_us is None else (FIRST_CHUNK_NOTE,),
    )
