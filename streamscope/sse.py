"""Incremental Server-Sent Events decoder that also counts each event's bytes on the wire.

Written here rather than taken from httpx-sse because streamscope needs what that library hides: how many
bytes each event took (framing and comment lines included) and the read that completed it. Follows the
WHATWG event-stream rules: CR, LF or CRLF line ends; ``field: value``; one space after the colon dropped;
``data`` lines joined with LF; lines starting with a colon are comments; a blank line ends the event.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SSEEvent:
    event: str
    """The ``event`` field, or "message" when absent; "" for a comment-only block (a keep-alive)."""
    data: str
    id: str | None
    wire_bytes: int
    """Bytes from the end of the previous event through this one's blank line."""


class SSEDecoder:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._event_bytes = 0
        self._data: list[str] = []
        self._event = ""
        self._id: str | None = None
        self._has_fields = False
        self._has_comment = False

    def feed(self, data: bytes) -> Iterator[SSEEvent]:
        """Events completed by ``data``, in order."""
        self._buffer += data
        while True:
            line, consumed = self._next_line()
            if line is None:
                return
            self._event_bytes += consumed
            event = self._take_line(line)
            if event is not None:
                yield event

    def flush(self) -> Iterator[SSEEvent]:
        """At end of stream: a final event that lacked its blank line is still delivered."""
        if self._buffer:
            self._event_bytes += len(self._buffer)
            line = bytes(self._buffer.rstrip(b"\r"))
            self._buffer.clear()
            self._take_line(line)
        if self._has_fields or self._has_comment:
            yield self._dispatch()

    def _next_line(self) -> tuple[bytes | None, int]:
        buffer = self._buffer
        lf = buffer.find(b"\n")
        cr = buffer.find(b"\r")
        if cr == -1 and lf == -1:
            return None, 0
        if cr != -1 and (lf == -1 or cr < lf):
            if cr + 1 == len(buffer):
                return None, 0  # a CR at the end may be the first half of CRLF: wait for more
            end, width = cr, 2 if buffer[cr + 1 : cr + 2] == b"\n" else 1
        else:
            end, width = lf, 1
        line = bytes(buffer[:end])
        del buffer[: end + width]
        return line, end + width

    def _take_line(self, raw: bytes) -> SSEEvent | None:
        if not raw:
            # a blank line with nothing before it ends no event; its bytes count toward the next one
            return self._dispatch() if (self._has_fields or self._has_comment) else None
        line = raw.decode("utf-8", errors="replace")
        if line.startswith(":"):
            self._has_comment = True
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
            self._has_fields = True
        elif name == "event":
            self._event = value
            self._has_fields = True
        elif name == "id" and "\0" not in value:
            self._id = value
            self._has_fields = True
        return None

    def _dispatch(self) -> SSEEvent:
        if self._has_fields:
            event = SSEEvent(self._event or "message", "\n".join(self._data), self._id, self._event_bytes)
        else:
            event = SSEEvent("", "", self._id, self._event_bytes)
        self._data = []
        self._event = ""
        self._event_bytes = 0
        self._has_fields = self._has_comment = False
        return event
