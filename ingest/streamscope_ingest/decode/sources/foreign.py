"""What a span of another instrumentation says about a stream (``Foreign``), and helpers its readers share."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from google.protobuf.message import Message
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope_ingest.decode.limits import LATEST_OFFSET_US

COVERAGE_ARRIVALS, COVERAGE_FIRST_TOKEN, COVERAGE_DURATION = "arrivals", "first_token", "duration"
COVERAGE_ARRIVALS_PARTIAL = "arrivals_partial"
"""Arrivals whose oldest the sender dropped: neither every chunk's time nor any chunk's size is known."""
CONTENT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.prompt",
    "gen_ai.completion",
    "llm.prompts",
    "ai.prompt",
    "ai.response.text",
    "ai.response.reasoning",
    "ai.response.toolCalls",
    "ai.response.object",
    "ai.request.headers",
)
"""Attributes (and prefixes) that carry what was said, never stored: streamscope measures timing, not content (nor
the request headers one SDK records, which may hold credentials)."""
GENERATING_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
"""GenAI operations that generate text, and so may stream (not embeddings, tool calls or agent invocations)."""


@dataclass(frozen=True)
class Foreign:
    """What a recognised span says about its stream."""

    source: str
    """Which instrumentation sent it (``streams.source``)."""
    coverage: str
    side: str = "client"
    arrivals_ns: np.ndarray | None = None
    """With ``arrivals`` coverage: when each chunk arrived (ns, the span's clock), in order."""
    ttft_us: int | None = None
    """With ``first_token`` coverage: the time to the first token the source measured."""
    first_byte_us: int | None = None
    """When the first chunk of any kind came (µs from the span's start), where the source timed it."""
    notes: tuple[str, ...] = ()
    """What the sender is told of how its figures were read."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """The span's attributes (plain values) under the current GenAI names, content left out."""


Reader = Callable[[str, Message, Mapping[str, Any]], Foreign | None]
"""(instrumentation scope name, span, its attributes as plain values) -> what it says, or None if not its source."""


def kept(
    attributes: Mapping[str, Any], renames: Mapping[str, str] | None = None, dropped: tuple[str, ...] = ()
) -> dict[str, Any]:
    """``attributes`` without message content nor those ``dropped`` names begin (a source's own that carry content
    or who the user is), older names renamed."""
    renames = renames or {}
    return {
        renames.get(key, key): value
        for key, value in attributes.items()
        if not any(key == name or key.startswith(name + ".") for name in CONTENT_KEYS) and not key.startswith(dropped)
    }


def event_times(span: Message, name: str) -> np.ndarray:
    """The times (ns) of the span's events called ``name``, in order; ``span`` is one of a ``TraceRequestView``
    (its events still encoded)."""
    events = (Span.Event.FromString(encoded) for encoded in span.events)
    return np.sort(np.fromiter((e.time_unix_nano for e in events if e.name == name), dtype=np.uint64))


def measured_us(value: Any, per_unit: float) -> int | None:
    """A duration a source measured, in microseconds (``per_unit`` of them in its unit), or None when it is not a
    duration (or one longer than a stream may be)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0:
        micros = round(value * per_unit)
        return micros if micros <= LATEST_OFFSET_US else None
    return None
