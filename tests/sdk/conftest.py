"""An OTLP/HTTP endpoint that records what the SDK sends, and the environment it gzips in."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from streamscope._internal.setup import COMPRESSION_VARIABLES


@pytest.fixture
def gzip_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """No compression variable set: setup() gzips."""
    for variable in COMPRESSION_VARIABLES:
        monkeypatch.delenv(variable, raising=False)


class _Recording(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that keeps each request's Content-Encoding and body (a raw socket, no collector)."""

    received: list[tuple[str | None, bytes]]

    def do_POST(self) -> None:
        self.received.append(
            (self.headers.get("Content-Encoding"), self.rfile.read(int(self.headers["Content-Length"])))
        )
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recording_endpoint() -> Iterator[tuple[str, list[tuple[str | None, bytes]]]]:
    received: list[tuple[str | None, bytes]] = []
    handler = type("Handler", (_Recording,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", received
    server.shutdown()
