"""Cut an event stream into whole events, byte for byte, so impairments never split or corrupt one.

Reuses the product's decoders for the framing rules: SSE (CR, LF, CRLF, comments, stray blank lines) and
newline-delimited JSON (a document a line, as Ollama streams): each decoded event reports how many wire bytes it
took, and exactly those bytes are sliced off the raw input.
"""

from __future__ import annotations

from streamscope.ndjson import NDJSONDecoder
from streamscope.sse import SSEDecoder

MEDIA_TYPES = {"text/event-stream": "sse", "application/x-ndjson": "ndjson"}
"""The streams the proxy can cut into events, by media type: their framing."""


class EventFramer:
    def __init__(self, framing: str = "sse") -> None:
        self._decoder: SSEDecoder | NDJSONDecoder = NDJSONDecoder() if framing == "ndjson" else SSEDecoder()
        self._raw = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        """The raw bytes of every event that ``data`` completed, in order (a comment-only block is an event)."""
        self._raw += data
        events = []
        for event in self._decoder.feed(data):
            events.append(bytes(self._raw[: event.wire_bytes]))
            del self._raw[: event.wire_bytes]
        return events

    def close(self) -> list[bytes]:
        """At end of stream: whatever is left (an event without its blank line, stray bytes) as one last event."""
        for _ in self._decoder.flush():
            pass
        rest = bytes(self._raw)
        self._raw.clear()
        return [rest] if rest else []
