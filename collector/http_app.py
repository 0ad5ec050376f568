"""OTLP/HTTP receiver (FastAPI): bytes in, the pipeline, the OTLP answer out.

Status codes follow the OTLP specification: 200 (with partial_success when spans were rejected), 400 for a
body that does not decode, 413 past the size limit measured after decompression, 415 for other content
types or encodings, 503 with Retry-After when the store is unavailable. Error bodies are google.rpc.Status
in the request's encoding.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response
from google.rpc.status_pb2 import Status
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collector.config import CollectorConfig
from collector.pipeline import TracePipeline
from ingest.otlp_body import parse_json, parse_protobuf, to_json
from streamscope.errors import DecodeError, RetryableWriteError, StreamscopeError, WriteError

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
RETRY_AFTER_S = "5"


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def create_app(
    pipeline: TracePipeline,
    config: CollectorConfig,
    *,
    ready: Callable[[], bool],
    sql: Callable[[str], bytes],
) -> FastAPI:
    app = FastAPI(title="streamscope collector", docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/v1/traces")
    async def export_traces(request: Request) -> Response:
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        answer_type = media_type if media_type in (PROTOBUF, JSON) else JSON
        try:
            if answer_type != media_type:
                raise _Refused(415, f"unsupported content type {media_type or '(none)'!r}: use {PROTOBUF} or {JSON}")
            body = await _read_body(request, config.max_request_bytes)
            if media_type == PROTOBUF:
                message = parse_protobuf(body, ExportTraceServiceRequest)
            else:
                message = parse_json(body, ExportTraceServiceRequest)
            result = await run_in_threadpool(pipeline.export, message, config.tenant)
        except _Refused as exc:
            return _status(answer_type, exc.status, str(exc), exc.headers)
        except DecodeError as exc:
            return _status(answer_type, 400, str(exc))
        except RetryableWriteError as exc:
            return _status(answer_type, 503, f"{exc}; retry later", {"Retry-After": RETRY_AFTER_S})
        except WriteError as exc:
            return _status(answer_type, 500, str(exc))
        response = result.response()
        if answer_type == PROTOBUF:
            return Response(response.SerializeToString(), media_type=PROTOBUF)
        return Response(to_json(response), media_type=JSON)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        ok = await run_in_threadpool(ready)
        return JSONResponse({"status": "ready" if ok else "store unavailable"}, status_code=200 if ok else 503)

    @app.post("/api/v1/sql")
    async def run_sql(request: Request) -> Response:
        """Read-only SQL on the store, for `streamscope sql` while this process owns the embedded engine."""
        try:
            payload = await request.json()
        except ValueError:
            return JSONResponse({"error": 'body must be JSON: {"query": "SELECT …"}'}, status_code=400)
        query = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(query, str) or not query.strip():
            return JSONResponse({"error": 'body must be JSON: {"query": "SELECT …"}'}, status_code=400)
        try:
            return Response(await run_in_threadpool(sql, query), media_type=JSON)
        except RetryableWriteError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        except StreamscopeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    return app


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, decompressed, refusing past ``limit`` bytes at either stage."""
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("identity", "gzip", ""):
        raise _Refused(415, f"unsupported content encoding {encoding!r}: use gzip or none")
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _Refused(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
    received = bytearray()
    async for part in request.stream():
        received += part
        if len(received) > limit:
            raise _Refused(413, f"body exceeds the limit of {limit} bytes")
    if encoding != "gzip":
        return bytes(received)
    return _gunzip(bytes(received), limit)


def _gunzip(data: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
        if len(out) > limit or inflater.unconsumed_tail:
            raise _Refused(413, f"body exceeds the limit of {limit} bytes after decompression")
        if not inflater.eof:
            raise _Refused(400, "gzip body is truncated")
        if inflater.unused_data:
            raise _Refused(400, "gzip body has trailing data")
    except zlib.error as exc:
        raise _Refused(400, f"gzip body does not inflate: {exc}") from None
    return out


def _status(media_type: str, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    status = Status(code=_GRPC_CODE.get(code, 2), message=message)
    body = status.SerializeToString() if media_type == PROTOBUF else to_json(status)
    return Response(body, status_code=code, media_type=media_type, headers=headers)


# google.rpc.Code for each HTTP answer (the OTLP spec leaves Status.code unused; we fill it for humans).
_GRPC_CODE = {400: 3, 413: 8, 415: 3, 500: 13, 503: 14}
