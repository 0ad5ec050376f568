"""OTLP/HTTP export routes for traces, logs and metrics, and the browser route: bytes in, the pipeline, the OTLP
answer out.

Status codes follow the OTLP specification (``streamscope_collector.status``): 200 (with partial_success when items
were rejected), 400 for a body that does not decode, 413 past the size limit measured after decompression, 415 for
other content types or encodings, 429 or 503 with Retry-After when the collector or the store cannot take the
request now. Error bodies are google.rpc.Status in the request's encoding.

Web pages send their spans to ``/v1/browser/traces`` (see ``streamscope_collector.browser``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import NamedTuple

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from google.rpc.status_pb2 import Status

from streamscope_collector import browser
from streamscope_collector.admission import Admission, Reservation
from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.body import (
    JSON,
    PROTOBUF,
    TEXT,
    content_encoding,
    gunzip,
    media_type,
    read_body,
    require_media_type,
)
from streamscope_collector.metrics import SelfMetrics
from streamscope_collector.pipeline import SIGNALS, TRACES, ExportPipeline, ExportResult, Signal
from streamscope_collector.status import Answer, answer
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.decode.otlp_body import to_json
from streamscope_ingest.decode.request_log import Received
from streamscope_ingest.durability.group_commit import Ticket


class Expanded(NamedTuple):
    """A request body turned into rows."""

    batch: DecodedBatch
    refused_browser_spans: int
    """Spans the browser route does not take (see ``streamscope_collector.browser``)."""


def add_export_routes(
    app: FastAPI, pipeline: ExportPipeline, config: CollectorConfig, admission: Admission, metrics: SelfMetrics
) -> None:
    """One route per OTLP signal, and the browser route for traces."""
    for signal in SIGNALS:
        app.add_api_route(signal.path, export_route(signal, pipeline, config, admission), methods=["POST"])
    browsers = browser.BrowserLimits(config, metrics)
    browser_route = export_route(TRACES, pipeline, config, admission, browsers=browsers)
    app.add_api_route(browser.ROUTE, browser_route, methods=["POST"])


def export_route(
    signal: Signal,
    pipeline: ExportPipeline,
    config: CollectorConfig,
    admission: Admission,
    *,
    browsers: browser.BrowserLimits | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    """An OTLP/HTTP export route; with ``browsers``, the public browser route (``streamscope_collector.browser``)."""
    from_browsers = browsers is not None
    media_types = (JSON, TEXT) if from_browsers else (PROTOBUF, JSON)
    limit = config.browser_max_request_bytes if from_browsers else config.max_request_bytes

    def expand(body: bytes, encoding: str, answer_type: str, tenant: str, reservation: Reservation) -> Expanded:
        """Inflate, parse and decode ``body``, in turn (``Admission.expansion``)."""
        inflated = _inflated(body, encoding, limit, reservation)
        admission.rate.admit(tenant, len(inflated))
        return admission.expansion.decode(
            len(inflated), lambda: rows(inflated, len(body), encoding, answer_type, tenant)
        )

    def rows(inflated: bytes, sent: int, encoding: str, answer_type: str, tenant: str) -> Expanded:
        """The rows of an inflated body; the parsed request lives only in here."""
        message = signal.parse(inflated, protobuf=answer_type == PROTOBUF)  # a beacon's text/plain is JSON
        screened = browsers.screen(message) if browsers is not None else browser.Screened()
        content_type = answer_type.rsplit("/", 1)[1].removeprefix("x-")
        message_bytes = len(inflated) if answer_type == PROTOBUF else message.ByteSize()
        received = Received("http", content_type, encoding, sent, message_bytes)
        batch = pipeline.decode(signal, message, tenant, received, rejected=screened.outside_window)
        return Expanded(batch, screened.not_browser)

    async def accept(request: Request, tenant: str, encoding: str, answer_type: str) -> tuple[ExportResult, Ticket]:
        """Read, decode and spool the request within the in-flight budget; returns once it is durable, having let
        go of the body and the rows."""
        with admission.budget.reserve() as reservation:
            body = await read_body(request, limit, reservation)
            # inflating and parsing take CPU time proportional to the body: off the event loop
            expanded = await run_in_threadpool(expand, body, encoding, answer_type, tenant, reservation)
            ticket = await run_in_threadpool(pipeline.spool, expanded.batch, signal.name, reservation)
        result, refused = ExportResult.of(expanded.batch, signal), expanded.refused_browser_spans
        if refused:
            message_parts = [browser.refusal_message(refused), result.error_message]
            result = ExportResult(result.rejected + refused, "; ".join(filter(None, message_parts)))
        return result, ticket

    async def export(request: Request) -> Response:
        """Accept one export request and answer once its rows are durable (and, while the store keeps up, stored)."""
        sent_type = media_type(request)
        answer_type = PROTOBUF if sent_type == PROTOBUF and not from_browsers else JSON
        try:
            require_media_type(sent_type, media_types)
            authorization = request.headers.get("authorization")
            if browsers is not None:
                tenant = admission.credentials.browser_tenant(request.query_params.get("token"), authorization)
                browsers.admit(request.headers.get("origin"))
            else:
                tenant = admission.credentials.tenant(authorization)
            result, ticket = await accept(request, tenant, content_encoding(request), answer_type)
            await run_in_threadpool(pipeline.wait_for_store, ticket)
        except Exception as exc:
            failure = answer(exc, f"an OTLP/HTTP {signal.name} export")
            if isinstance(exc, browser.OriginOverRate):  # when the origin's next request is due, not the default
                failure = replace(failure, headers={**failure.headers, "Retry-After": str(exc.retry_after_s)})
            return _error(answer_type, failure)
        response = signal.response(result)
        if answer_type == PROTOBUF:
            return Response(response.SerializeToString(), media_type=PROTOBUF)
        return Response(to_json(response), media_type=JSON)

    return export


def _inflated(body: bytes, encoding: str, limit: int, reservation: Reservation) -> bytes:
    """``body`` inflated when gzipped, and counted."""
    if encoding != "gzip":
        return body
    inflated = gunzip(body, limit)
    reservation.take(len(inflated))
    return inflated


def _error(answer_type: str, failure: Answer) -> Response:
    """A refusal as OTLP has it: google.rpc.Status in the request's encoding."""
    status = Status(code=failure.rpc_code, message=failure.message)
    body = status.SerializeToString() if answer_type == PROTOBUF else to_json(status)
    return Response(body, status_code=failure.http, media_type=answer_type, headers=failure.headers)
