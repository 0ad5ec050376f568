"""The Vercel AI SDK's telemetry, in both of its shapes. Each names the request to the model apart from the call that
wraps it (a call with tool steps makes several requests); the request is the stream, known by its time to the first
chunk and its duration (``first_token``), no chunk's.

- SDK 6 (``experimental_telemetry: { isEnabled: true }``; tracer ``ai``), and SDK 7's ``LegacyOpenTelemetry``: a span
  ``ai.streamText`` per call and, inside it, one ``ai.streamText.doStream`` per request. The SDK stamps
  ``ai.response.msToFirstChunk`` on it, timed from just before it sent the request. The attribute is read, not the
  ``ai.stream.firstChunk`` event: later releases add that event when the step ends. The SDK names providers
  ``openai.chat``: the provider is the part before the dot.
- SDK 7 with ``@ai-sdk/otel`` registered (tracer ``gen_ai``): ``invoke_agent {model}`` per call, ``step N`` per step
  and a ``chat {model}`` span per request, in the GenAI convention, with
  ``gen_ai.client.operation.time_to_first_chunk`` in seconds, timed from just before the request. A ``chat`` span
  without it is a request answered whole (``generateText``), not a stream.

A call refused before it streamed has no request span, so it is not counted. Prompts, answers and request headers
the SDK records are not kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_FIRST_TOKEN, Foreign, kept, measured_us

SOURCE = "vercel-ai"
LEGACY_SCOPE, GENAI_SCOPE = "ai", "gen_ai"
SCOPES = (LEGACY_SCOPE, GENAI_SCOPE)
"""The SDK's tracers (prefixes for the collector's first look; ``read`` wants them exactly)."""
LEGACY_SPAN_NAMES = frozenset({"ai.streamText.doStream", "ai.streamObject.doStream"})
TO_FIRST_CHUNK_MS = "ai.response.msToFirstChunk"
TO_FIRST_CHUNK_S = "gen_ai.client.operation.time_to_first_chunk"


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if scope == LEGACY_SCOPE and span.name in LEGACY_SPAN_NAMES:
        return _legacy(attributes)
    if scope == GENAI_SCOPE and attributes.get(sc.GEN_AI_OPERATION_NAME) == "chat" and TO_FIRST_CHUNK_S in attributes:
        ttft_us = measured_us(attributes[TO_FIRST_CHUNK_S], 1e6)
        return Foreign(SOURCE, COVERAGE_FIRST_TOKEN, ttft_us=ttft_us, attributes=kept(attributes))
    return None


def _legacy(attributes: Mapping[str, Any]) -> Foreign:
    values = kept(attributes)
    provider = str(attributes.get("gen_ai.system", attributes.get("ai.model.provider", "")))
    if provider and sc.GEN_AI_PROVIDER_NAME not in values:
        values[sc.GEN_AI_PROVIDER_NAME] = provider.split(".", 1)[0]
    ttft_us = measured_us(attributes.get(TO_FIRST_CHUNK_MS), 1e3)
    return Foreign(SOURCE, COVERAGE_FIRST_TOKEN, ttft_us=ttft_us, attributes=values)
