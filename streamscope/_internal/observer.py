"""Connects a provider stream to a StreamRecorder: each event becomes one recorded chunk.

Shared by every wrapper: raw SSE bytes go through ``on_bytes``; already-parsed events (the OpenAI SDK's
objects) through ``on_payload``. At the end ``close`` copies the stream-level facts onto the span.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from typing import Any

from streamscope import semconv as sc
from streamscope._internal.recorder import Outcome, StreamRecorder
from streamscope.formats import EventFacts, StreamFormat, estimate_tokens
from streamscope.ndjson import NDJSONDecoder
from streamscope.sse import SSEDecoder

log = logging.getLogger("streamscope")
_CLOSING = threading.Lock()
"""Makes an observer's first ``close`` one step: the check and the mark, never two threads between them."""


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One server-sent event as the application sees it."""

    event: str
    data: str
    payload: Any
    """``data`` parsed as JSON; None for ``[DONE]``, keep-alives and non-JSON data."""


class StreamObserver:
    def __init__(
        self, recorder: StreamRecorder, stream_format: StreamFormat, *, json_answer: bool = False, framing: str = "sse"
    ) -> None:
        """``json_answer``: the request asked for the answer as JSON, so the answer is the document followed;
        otherwise the first tool call's arguments are, if the stream calls a tool. ``framing``: how the body's
        bytes are cut into events, ``sse`` or ``ndjson`` (a JSON document a line)."""
        self.recorder = recorder
        self.format = stream_format
        self._json_answer = json_answer
        self._json_call: int | None = None
        self.done = False
        self.closed = False
        self._failed = False
        self._decoder = NDJSONDecoder() if framing == "ndjson" else SSEDecoder()

    def on_bytes(self, data: bytes) -> list[StreamEvent]:
        """Feed raw body bytes; returns the events they completed, each recorded as a chunk."""
        self.recorder.first_byte()
        return [self._on_sse(event) for event in self._decoder.feed(data)]

    def on_end_of_body(self) -> list[StreamEvent]:
        return [self._on_sse(event) for event in self._decoder.flush()]

    def _on_sse(self, sse: Any) -> StreamEvent:
        payload = None
        if sse.data and sse.data != "[DONE]":
            try:
                payload = json.loads(sse.data)
            except ValueError:
                payload = None
        if sse.event == "" or (payload is None and sse.data != "[DONE]"):
            self.recorder.chunk(0, 0, sse.wire_bytes)  # keep-alive or unparseable: bytes, no content
        else:
            self.on_payload(sse.event, payload, sse.wire_bytes)
        return StreamEvent(sse.event, sse.data, payload)

    def on_payload(self, event_type: str, payload: Any, wire_bytes: int = 0) -> None:
        """Record one parsed event. A payload the format reader cannot make sense of never reaches the
        application as an exception: the chunk is kept without content and the problem logged once."""
        try:
            facts = self.format.read(event_type, payload)
        except Exception:
            if not self._failed:
                self._failed = True
                log.warning(
                    "streamscope: unexpected %s event payload; its content is not counted",
                    event_type or "stream",
                    exc_info=True,
                )
            facts = EventFacts()
        text = facts.text
        if facts.exact_tokens is not None:
            tokens = facts.exact_tokens
        else:
            tokens = estimate_tokens(text)
            if text:
                self.recorder.mark_tokens_estimated()
        self.recorder.chunk(tokens, len(text.encode()) if text else 0, wire_bytes, text, tool_call=facts.tool_call)
        if facts.retracted_bytes:
            self.recorder.retract(facts.retracted_bytes, facts.retracted_tokens)
        if self._json_answer:
            if facts.answer:
                self.recorder.json_text(facts.answer, "content")
        elif facts.arguments:
            if self._json_call is None:
                self._json_call = facts.call_index
            if facts.call_index == self._json_call:
                self.recorder.json_text(facts.arguments, "tool_call")
        if facts.done:
            self.done = True

    def close(self, outcome: Outcome, error_type: str | None = None) -> None:
        """Finish the recorder with the stream's facts; an error the provider reported makes it an error.

        Only the first call counts, so every exit path of a wrapper, on any thread, may call it.
        """
        with _CLOSING:
            if self.closed:
                return
            self.closed = True
        facts = self.format.facts
        recorder = self.recorder
        if facts.response_id:
            recorder.set_attribute(sc.GEN_AI_RESPONSE_ID, str(facts.response_id))
        if facts.response_model:
            recorder.set_attribute(sc.GEN_AI_RESPONSE_MODEL, str(facts.response_model))
        if facts.finish_reasons:
            recorder.set_attribute(sc.GEN_AI_RESPONSE_FINISH_REASONS, facts.finish_reasons)
        if isinstance(facts.input_tokens, int):
            recorder.set_attribute(sc.GEN_AI_USAGE_INPUT_TOKENS, facts.input_tokens)
        if isinstance(facts.output_tokens, int):
            recorder.set_attribute(sc.GEN_AI_USAGE_OUTPUT_TOKENS, facts.output_tokens)
        if isinstance(facts.reasoning_tokens, int):
            recorder.set_attribute(sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, facts.reasoning_tokens)
        if facts.error_type and outcome == "completed":
            outcome, error_type = "error", facts.error_type
        if outcome in ("cancelled", "disconnected"):
            recorder.cancel()
        recorder.finish(outcome, error_type=error_type)
