"""Incremental newline-delimited JSON decoder that counts each line's bytes on the wire.

Ollama's ``/api/chat`` and ``/api/generate`` stream one JSON document a line over chunked HTTP. Each line becomes
an event of the same shape the SSE decoder gives (``SSEEvent``, of type ``message``), so one observer records
both; a blank line's bytes count toward the next line, as a keep-alive's do in SSE.
"""

from __future__ import annotations

from collections.abc import Iterator

from streamscope.sse import SSEEvent


class NDJSONDecoder:
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._pending_bytes = 0

    def feed(self, data: bytes) -> Iterator[SSEEvent]:
        """Lines completed by ``data``, in order."""
        self._buffer += data
        while (end := self._buffer.find(b"\n")) >= 0:
            raw = bytes(self._buffer[: end + 1])
            del self._buffer[: end + 1]
            event = self._line(raw)
            if event is not None:
                yield event

    def flush(self) -> Iterator[SSEEvent]:
        """At end of stream: a last line without its newline is still delivered."""
        if self._buffer:
            raw = bytes(self._buffer)
            self._buffer.clear()
            event = self._line(raw)
            if event is not None:
                yield event

    def _line(self, raw: bytes) -> SSEEvent | None:
        self._pending_bytes += len(raw)
        text = raw.decode("utf-8", errors="replace").strip()
        if not text:
            return None
        wire, self._pending_bytes = self._pending_bytes, 0
        return SSEEvent("message", text, None, wire)
