"""``POST /api/v1/alerts``, the webhook Grafana's provisioned contact point calls: each alert of a notification
becomes a row of ``alerts``, written through the same group-commit writer as the OTLP routes, with the same status
codes and ``{"error": ...}`` JSON bodies. It takes the webhook's own token, never a tenant's
(``streamscope_collector.auth``): the alert history is the operator's."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse

from streamscope_collector.admission import Admission
from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.body import JSON, json_error, media_type, read_body, require_media_type
from streamscope_collector.pipeline import ExportPipeline
from streamscope_collector.status import answer
from streamscope_ingest.decode.alerts import TABLE as ALERTS_TABLE
from streamscope_ingest.decode.alerts import decode_alerts

ALERTS_PATH = "/api/v1/alerts"


def add_alerts_route(app: FastAPI, pipeline: ExportPipeline, config: CollectorConfig, admission: Admission) -> None:
    """Serve the webhook on ``app``, within the OTLP routes' size limit and in-flight budget."""

    @app.post(ALERTS_PATH)
    async def record_alerts(request: Request) -> JSONResponse:
        """Grafana's webhook contact point: the notification's alerts are stored, then acknowledged."""
        try:
            require_media_type(media_type(request), (JSON,))
            tenant = admission.credentials.webhook_tenant(request.headers.get("authorization"))
            with admission.budget.reserve() as reservation:
                body = await read_body(request, config.max_request_bytes, reservation)
                batch = await run_in_threadpool(decode_alerts, body, tenant=tenant)
                ticket = await run_in_threadpool(pipeline.spool, batch, "alerts", reservation)
            await run_in_threadpool(pipeline.wait_for_store, ticket)
        except Exception as exc:
            return json_error(answer(exc, "a Grafana alert notification"))
        return JSONResponse({"recorded": batch.rows(ALERTS_TABLE)})
