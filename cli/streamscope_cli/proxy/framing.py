"""Cut an SSE byte stream into whole events, byte for byte, so impairments never split or corrupt one.

Reuses the product's SSE decoder for the framing rules (CR, LF, CRLF, comments, stray blank lines): each
decoded event reports how many wire bytes it took, and exactly those bytes are sliced off the raw input.
"""

from __future__ import annotations

from streamscope.sse import SSEDecoder


class EventFramer:
    def __init__(self) -> None:
        self._decoder = SSEDecoder()
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
