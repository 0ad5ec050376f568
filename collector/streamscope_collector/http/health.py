"""``/healthz`` (the process answers), ``/readyz`` (it can take requests now) and ``/metrics`` (its own counters)."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from streamscope_collector.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from streamscope_collector.metrics import SelfMetrics

Readiness = Callable[[], tuple[bool, dict]]
"""Whether requests can be accepted now, and the state that says why."""


def add_health_routes(app: FastAPI, readiness: Readiness, metrics: SelfMetrics) -> None:
    """Serve the probes and the self-metrics on ``app``."""

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        """Liveness: answering at all is the answer."""
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz() -> JSONResponse:
        """200 while requests can be accepted (the spool has room), with the store's and the spool's state."""
        ok, state = await run_in_threadpool(readiness)
        return JSONResponse(state, status_code=200 if ok else 503)

    @app.get("/metrics")
    async def self_metrics() -> Response:
        """The collector's counters in the Prometheus text format."""
        return Response(metrics.exposition(), media_type=METRICS_CONTENT_TYPE)
