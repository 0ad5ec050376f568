"""Spans of other projects' GenAI instrumentation, read as streams: what each source says about a stream's timing.

A span in streamscope's own convention carries ``streamscope.side``; every other span is offered to the readers
here, one module per source, each of which recognises its source's spans (by instrumentation scope, span name
and attributes) and says what they tell: the side, how much of the timeline is known (``Foreign.coverage``: each
chunk's arrival, the time to the first token, or the duration only) and the GenAI attributes, renamed to the
current semantic conventions where the source uses older names. Message content (prompts, completions) is never
kept. A span no reader recognises is not a stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope_ingest.decode.sources import (
    langchain,
    litellm,
    openlit,
    openllmetry,
    opentelemetry_genai,
    vercel_ai,
    vllm,
)
from streamscope_ingest.decode.sources.foreign import Foreign

_SOURCES = (openllmetry, opentelemetry_genai, openlit, vercel_ai, vllm, litellm, langchain)
NAMES = tuple(source.SOURCE for source in _SOURCES)
"""Each source's name, as ``streams.source`` stores it."""
READERS = tuple(source.read for source in _SOURCES)
SCOPES = tuple(scope for source in _SOURCES for scope in source.SCOPES)
"""Instrumentation scope names (prefixes) whose spans a reader may recognise: other spans are not looked at."""


def read_foreign(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    """What a span of another instrumentation says about a stream, or None when no reader knows it."""
    for reader in READERS:
        if (foreign := reader(scope, span, attributes)) is not None:
            return foreign
    return None
