"""Request bodies as the POST routes take them: by content type, within a size limit and the in-flight budget,
inflated when gzipped; and the ``{"error": ...}`` body the JSON routes answer a refusal with."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from isal import isal_zlib

from streamscope.errors import DecodeError, LimitExceeded
from streamscope_collector.admission import Reservation
from streamscope_collector.status import Answer, UnsupportedMediaType

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TEXT = "text/plain"


def media_type(request: Request) -> str:
    """The request's content type without its parameters, lower case; empty when there is none."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


def require_media_type(media_type: str, accepted: tuple[str, ...]) -> None:
    """Raise UnsupportedMediaType unless ``media_type`` is one the route reads (named by the header, never by what
    it held)."""
    if media_type not in accepted:
        sent = "in the Content-Type header" if media_type else "(no Content-Type header)"
        raise UnsupportedMediaType(f"unsupported content type {sent}: use {' or '.join(accepted)}")


def content_encoding(request: Request) -> str:
    """``identity`` or ``gzip``; raises UnsupportedMediaType for any other encoding."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower() or "identity"
    if encoding not in ("identity", "gzip"):
        raise UnsupportedMediaType("unsupported content encoding in the Content-Encoding header: use gzip or none")
    return encoding


async def read_body(request: Request, limit: int, reservation: Reservation) -> bytes:
    """The request body as sent, refusing past ``limit`` bytes, and held in the in-flight budget as it arrives."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise LimitExceeded(f"body (its Content-Length) exceeds the limit of {limit} bytes")
    parts, size = [], 0
    async for part in request.stream():
        reservation.take(len(part))
        parts.append(part)
        size += len(part)
        if size > limit:
            raise LimitExceeded(f"body exceeds the limit of {limit} bytes")
    with reservation.held_for(size):  # the parts and their join, until the parts go
        body = b"".join(parts)
        parts.clear()
    return body


def gunzip(data: bytes, limit: int) -> bytes:
    """``data`` inflated, through ISA-L (zlib's API, faster), refusing past ``limit`` bytes once inflated.

    The size the gzip trailer declares bounds the first pass: the output's room, doubled as it fills, stops at that
    size rather than at the next power of two, cut back after (docs/benchmarks.md has what it saves). A trailer
    proves nothing, so what it left out is inflated after, up to the limit."""
    inflater = isal_zlib.decompressobj(wbits=16 + isal_zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, min(_declared_size(data), limit) + 1)
        if inflater.unconsumed_tail and len(out) <= limit:
            out += inflater.decompress(inflater.unconsumed_tail, limit + 1 - len(out))
        if len(out) > limit or inflater.unconsumed_tail:
            raise LimitExceeded(f"body exceeds the limit of {limit} bytes after decompression")
        if not inflater.eof:
            raise DecodeError("gzip body is truncated")
        if inflater.unused_data:
            raise DecodeError("gzip body has trailing data")
    except isal_zlib.error as exc:  # type: ignore[misc]  # the stub declares error an instance, not its class
        raise DecodeError(f"gzip body does not inflate: {exc}") from None
    return out


def _declared_size(data: bytes) -> int:
    """The inflated size a gzip member's trailer declares (its last four bytes: the size modulo 2**32)."""
    return int.from_bytes(data[-4:], "little") if len(data) >= 4 else 0


def json_error(answer: Answer) -> JSONResponse:
    """A JSON route's refusal: the status and headers of ``answer``, its message as ``{"error": ...}``."""
    return JSONResponse({"error": answer.message}, status_code=answer.http, headers=answer.headers)
