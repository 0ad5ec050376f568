"""A requests session for the OTLP/HTTP exporter that gzips each request body at a fast level.

The exporter's own gzip (``Compression.Gzip``) compresses at level 9. Span batches are mostly packed
timelines, runs of small little-endian integers, on which level 9 searches long chains of matches for next to
no gain: zlib's default level 6 gives nearly the same bytes for a small part of the export thread's CPU
(docs/benchmarks.md). The session is the exporter's public hook for the HTTP request, so the body is
compressed here and the exporter's own compression is left off.
"""

from __future__ import annotations

import gzip
from typing import Any, Final

import requests

LEVEL: Final = 6


class GzipSession(requests.Session):
    """Sends every request's ``data`` gzipped, with ``Content-Encoding: gzip``."""

    def request(self, method: str, url: str, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        body = kwargs.get("data")
        if isinstance(body, bytes) and body:
            kwargs["data"] = gzip.compress(body, compresslevel=LEVEL, mtime=0)
            kwargs["headers"] = {**(kwargs.get("headers") or {}), "Content-Encoding": "gzip"}
        return super().request(method, url, **kwargs)
