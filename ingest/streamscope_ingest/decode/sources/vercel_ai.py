"""The Vercel AI SDK's telemetry (``experimental_telemetry: { isEnabled: true }``; tracer ``ai``): a span
``ai.streamText`` per call and, inside it, one ``ai.streamText.doStream`` per request to the model (a call with tool
steps makes several).

Each doStream span is a stream. The SDK stamps ``ai.response.msToFirstChunk`` on it, timed from just before it
sent the request, so the first token is known, and the duration; no chunk is (``first_token``). The attribute is
read, not the ``ai.stream.firstChunk`` event: later releases add that event when the step ends. The call's own
span wraps its steps and is not a stream; a call refused before it streamed has no doStream span, so it is not
counted. The SDK names providers ``openai.chat``: the provider is the part before the dot. Prompts, answers and
request headers it records are not kept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_FIRST_TOKEN, Foreign, kept

SOURCE = "vercel-ai"
SCOPES = ("ai",)
"""The SDK's tracer (a prefix for the collector's first look; ``read`` wants it exactly)."""
SPAN_NAMES = frozenset({"ai.streamText.doStream", "ai.streamObject.doStream"})
TO_FIRST_CHUNK_MS = "ai.response.msToFirstChunk"


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if scope != "ai" or span.name not in SPAN_NAMES:
        return None
    values = kept(attributes)
    provider = str(attributes.get("gen_ai.system", attributes.get("ai.model.provider", "")))
    if provider and sc.GEN_AI_PROVIDER_NAME not in values:
        values[sc.GEN_AI_PROVIDER_NAME] = provider.split(".", 1)[0]
    to_first = attributes.get(TO_FIRST_CHUNK_MS)
    ttft_us = None
    if isinstance(to_first, (int, float)) and math.isfinite(to_first) and to_first >= 0:
        ttft_us = round(to_first * 1000)
    return Foreign(SOURCE, COVERAGE_FIRST_TOKEN, ttft_us=ttft_us, attributes=values)
