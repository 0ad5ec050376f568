"""OTLP/HTTP receiver (FastAPI) for traces and logs: bytes in, the pipeline, the OTLP answer out.

Status codes follow the OTLP specification: 200 (with partial_success when spans were rejected), 400 for a
body that does not decode, 413 past the size limit measured after decompression, 415 for other content
types or encodings, 503 with Retry-After when the store is unavailable. Error bodies are google.rpc.Status
in the request's encoding.

``POST /api/v1/alerts`` is the webhook Grafana's provisioned contact point calls: each alert of a notification
becomes a row of ``alerts``, written through the same group-commit writer, with the same status codes and
``{"error": ...}`` JSON bodies.

Web pages get the browser snippet at ``/sdk/streamscope.js`` and send their spans to ``/v1/browser/traces``
(see ``streamscope_collector.browser``); origins named in ``cors_origins`` may call both from their pages.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from google.protobuf.message import Message
from google.rpc.status_pb2 import Status
from isal import isal_zlib

from streamscope.errors import (
    DecodeError,
    LimitExceeded,
    Overloaded,
    RetryableWriteError,
    StreamscopeError,
    WriteError,
)
from streamscope_collector import browser
from streamscope_collector.admission import Admission, Reservation
from streamscope_collector.auth import Credentials, Unauthorized
from streamscope_collector.config import CollectorConfig
from streamscope_collector.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from streamscope_collector.metrics import CountRefusals, SelfMetrics
from streamscope_collector.pipeline import SIGNALS, TRACES, ExportPipeline, ExportResult, Signal
from streamscope_ingest.decode.alerts import TABLE as ALERTS_TABLE
from streamscope_ingest.decode.alerts import decode_alerts
from streamscope_ingest.decode.batch import DecodedBatch
from streamscope_ingest.decode.otlp_body import to_json
from streamscope_ingest.decode.request_log import Received
from streamscope_ingest.durability.group_commit import Ticket
from streamscope_ingest.store.sql import QueryRefused

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TEXT = "text/plain"
RETRY_AFTER_S = "5"
KEEP_ALIVE_S = 65
"""How long an idle connection stays open: past Retry-After, so that a sender that waits as told and sends again
on its connection does not meet the server closing it (uvicorn's default, 5 s, is Retry-After to the second, and
such a sender got a reset connection); and past a load balancer's usual idle timeout (60 s), for the same race
between a balancer and the collectors behind it."""
ALERTS_PATH = "/api/v1/alerts"
log = logging.getLogger(__name__)


class Expanded(NamedTuple):
    """A request body turned into rows."""

    batch: DecodedBatch
    refused_browser_spans: int
    """Spans the browser route does not take (see ``streamscope_collector.browser``)."""


class _Refused(Exception):
    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def create_app(
    pipeline: ExportPipeline,
    config: CollectorConfig,
    *,
    admission: Admission,
    metrics: SelfMetrics,
    readiness: Callable[[], tuple[bool, dict]],
    sql: SqlRunner | None,
) -> FastAPI:
    """The OTLP/HTTP app; ``sql`` (read-only queries) is served only when given, i.e. for an embedded store."""
    app = FastAPI(title="streamscope collector", docs_url=None, redoc_url=None, openapi_url=None)

    for signal in SIGNALS:
        app.add_api_route(signal.path, _export_route(signal, pipeline, config, admission), methods=["POST"])
    browser_route = _export_route(TRACES, pipeline, config, admission, from_browsers=True)
    app.add_api_route(browser.ROUTE, browser_route, methods=["POST"])

    @app.get(browser.SNIPPET_PATH)
    async def snippet(request: Request) -> Response:
        source, etag = browser.snippet()
        headers = {"ETag": etag, "Cache-Control": "public, max-age=300"}
        if request.headers.get("if-none-match") == etag:
            return Response(status_code=304, headers=headers)
        return Response(source, media_type="text/javascript; charset=utf-8", headers=headers)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """200 while requests can be accepted (the spool has room), with the store's and the spool's state."""
        ok, state = await run_in_threadpool(readiness)
        return JSONResponse(state, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def self_metrics() -> Response:
        return Response(metrics.exposition(), media_type=METRICS_CONTENT_TYPE)

    _add_alerts_route(app, pipeline, config, admission)
    if sql is not None:
        _add_sql_route(app, sql, admission.credentials)
    app.add_middleware(CountRefusals, metrics=metrics)
    if config.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["content-type", "content-encoding", "authorization"],
            max_age=7200,  # one preflight per page and two hours
        )
    return app


def _add_alerts_route(app: FastAPI, pipeline: ExportPipeline, config: CollectorConfig, admission: Admission) -> None:
    @app.post(ALERTS_PATH)
    async def record_alerts(request: Request) -> JSONResponse:
        """Grafana's webhook contact point: the notification's alerts are stored, then acknowledged."""
        try:
            media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
            if media_type != JSON:
                raise _Refused(415, f"unsupported content type {media_type or '(none)'!r}: use {JSON}")
            tenant = admission.credentials.tenant(request.headers.get("authorization"))
            with admission.budget.reserve() as reservation:
                body = await _read_body(request, config.max_request_bytes, reservation)
                batch = await run_in_threadpool(decode_alerts, body, tenant=tenant)
                ticket = await run_in_threadpool(pipeline.spool, batch, "alerts", reservation)
            await run_in_threadpool(pipeline.wait_for_store, ticket)
        except Exception as exc:
            status, message, headers = _failure(exc, "a Grafana alert notification")
            return JSONResponse({"error": message}, status_code=status, headers=headers)
        return JSONResponse({"recorded": batch.rows(ALERTS_TABLE)})


def _add_sql_route(app: FastAPI, sql: SqlRunner, credentials: Credentials) -> None:
    @app.post("/api/v1/sql")
    async def run_sql(request: Request) -> Response:
        """Read-only SQL on the store, for `streamscope sql` while this process owns the embedded engine; with
        authentication on, a token's query sees its tenant's rows only."""
        try:
            tenant = credentials.tenant(request.headers.get("authorization")) if credentials.enabled else None
        except Unauthorized as exc:
            return JSONResponse({"error": str(exc)}, status_code=401, headers=_CHALLENGE)
        try:
            payload = await request.json()
        except (ValueError, RecursionError):
            return JSONResponse({"error": 'body must be JSON: {"query": "SELECT …"}'}, status_code=400)
        query = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(query, str) or not query.strip():
            return JSONResponse({"error": 'body must be JSON: {"query": "SELECT …"}'}, status_code=400)
        try:
            return Response(await run_in_threadpool(sql, query, tenant), media_type=JSON)
        except RetryableWriteError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        except QueryRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except StreamscopeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)


def _export_route(
    signal: Signal,
    pipeline: ExportPipeline,
    config: CollectorConfig,
    admission: Admission,
    *,
    from_browsers: bool = False,
) -> Callable[[Request], Awaitable[Response]]:
    """An OTLP/HTTP export route; ``from_browsers``: the public browser route (``streamscope_collector.browser``)."""
    media_types = (JSON, TEXT) if from_browsers else (PROTOBUF, JSON)
    limit = config.browser_max_request_bytes if from_browsers else config.max_request_bytes

    def expand(body: bytes, encoding: str, answer_type: str, tenant: str, reservation: Reservation) -> Expanded:
        """Inflate, parse and decode ``body``. The parsed request, many times the body's size, lives only in here,
        and only ``admission.expansion`` of them at once."""
        with admission.expansion:  # text/plain from a beacon is JSON, like the answer
            message, size = _decode(body, encoding, answer_type, limit, signal, reservation)
            admission.rate.admit(tenant, size)
            refused = browser.keep_browser_spans(message) if from_browsers else 0
            content_type = answer_type.rsplit("/", 1)[1].removeprefix("x-")
            message_bytes = size if answer_type == PROTOBUF else message.ByteSize()
            received = Received("http", content_type, encoding, len(body), message_bytes)
            return Expanded(pipeline.decode(signal, message, tenant, received), refused)

    async def accept(request: Request, tenant: str, encoding: str, answer_type: str) -> tuple[ExportResult, Ticket]:
        """Read, decode and spool the request within the in-flight budget; returns once it is durable, having let
        go of the body and the rows."""
        with admission.budget.reserve() as reservation:
            body = await _read_body(request, limit, reservation)
            # inflating and parsing take CPU time proportional to the body: off the event loop
            expanded = await run_in_threadpool(expand, body, encoding, answer_type, tenant, reservation)
            ticket = await run_in_threadpool(pipeline.spool, expanded.batch, signal.name, reservation)
        result, refused = ExportResult.of(expanded.batch, signal), expanded.refused_browser_spans
        if refused:
            message_parts = [browser.refusal_message(refused), result.error_message]
            result = ExportResult(result.rejected + refused, "; ".join(filter(None, message_parts)))
        return result, ticket

    async def export(request: Request) -> Response:
        media_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        answer_type = PROTOBUF if media_type == PROTOBUF and not from_browsers else JSON
        try:
            if media_type not in media_types:
                accepted = " or ".join(media_types)
                raise _Refused(415, f"unsupported content type {media_type or '(none)'!r}: use {accepted}")
            authorization = request.headers.get("authorization")
            if from_browsers:
                tenant = admission.credentials.browser_tenant(request.query_params.get("token"), authorization)
            else:
                tenant = admission.credentials.tenant(authorization)
            result, ticket = await accept(request, tenant, _content_encoding(request), answer_type)
            await run_in_threadpool(pipeline.wait_for_store, ticket)
        except Exception as exc:
            return _status(answer_type, *_failure(exc, f"an OTLP/HTTP {signal.name} export"))
        response = signal.response(result)
        if answer_type == PROTOBUF:
            return Response(response.SerializeToString(), media_type=PROTOBUF)
        return Response(to_json(response), media_type=JSON)

    return export


def _failure(exc: Exception, handling: str) -> tuple[int, str, dict[str, str]]:
    """Status, message and headers answering a request that raised ``exc``; the process keeps serving."""
    if isinstance(exc, _Refused):
        return exc.status, str(exc), exc.headers
    if isinstance(exc, Unauthorized):
        return 401, str(exc), _CHALLENGE
    if isinstance(exc, LimitExceeded):
        return 413, str(exc), {}
    if isinstance(exc, DecodeError):
        return 400, str(exc), {}
    if isinstance(exc, Overloaded):
        return 429, f"{exc}; retry later", {"Retry-After": RETRY_AFTER_S}
    if isinstance(exc, RetryableWriteError):
        return 503, f"{exc}; retry later", {"Retry-After": RETRY_AFTER_S}
    if isinstance(exc, WriteError):
        return 500, str(exc), {}
    log.error("unexpected error handling %s", handling, exc_info=exc)
    return 500, "internal error in the collector; the request was not stored", {}


def _content_encoding(request: Request) -> str:
    encoding = request.headers.get("content-encoding", "identity").strip().lower() or "identity"
    if encoding not in ("identity", "gzip"):
        raise _Refused(415, f"unsupported content encoding {encoding!r}: use gzip or none")
    return encoding


async def _read_body(request: Request, limit: int, reservation: Reservation) -> bytes:
    """The request body as sent, refusing past ``limit`` bytes, and held in the in-flight budget as it arrives."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _Refused(413, f"body of {declared} bytes exceeds the limit of {limit} bytes")
    received = bytearray()
    async for part in request.stream():
        reservation.take(len(part))
        received += part
        if len(received) > limit:
            raise _Refused(413, f"body exceeds the limit of {limit} bytes")
    return bytes(received)


def _decode(
    body: bytes, encoding: str, media_type: str, limit: int, signal: Signal, reservation: Reservation
) -> tuple[Message, int]:
    """The message, and the body's size once inflated."""
    if encoding == "gzip":
        inflated = _gunzip(body, limit)
        reservation.take(len(inflated))
        body = inflated
    return signal.parse(body, protobuf=media_type == PROTOBUF), len(body)


def _gunzip(data: bytes, limit: int) -> bytes:
    """``data`` inflated, through ISA-L: zlib's API, in under half zlib's time (a gzipped packed request's inflate
    was a fifth of its decode)."""
    inflater = isal_zlib.decompressobj(wbits=16 + isal_zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
        if len(out) > limit or inflater.unconsumed_tail:
            raise _Refused(413, f"body exceeds the limit of {limit} bytes after decompression")
        if not inflater.eof:
            raise _Refused(400, "gzip body is truncated")
        if inflater.unused_data:
            raise _Refused(400, "gzip body has trailing data")
    except isal_zlib.error as exc:
        raise _Refused(400, f"gzip body does not inflate: {exc}") from None
    return out


def _status(media_type: str, code: int, message: str, headers: dict[str, str] | None = None) -> Response:
    status = Status(code=_GRPC_CODE.get(code, 2), message=message)
    body = status.SerializeToString() if media_type == PROTOBUF else to_json(status)
    return Response(body, status_code=code, media_type=media_type, headers=headers)


_CHALLENGE = {"WWW-Authenticate": "Bearer"}
SqlRunner = Callable[[str, str | None], bytes]
"""Runs a read-only query, for a tenant (its rows only) or for the operator (None)."""

# google.rpc.Code for each HTTP answer (the OTLP spec leaves Status.code unused; we fill it for humans).
_GRPC_CODE = {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 500: 13, 503: 14}
