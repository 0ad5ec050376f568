"""The collector's HTTP app: every route of the ``streamscope_collector.http`` modules on one FastAPI app, behind
the refusal counter and, for the origins named in ``cors_origins``, CORS (web pages load the snippet and send
their spans from their own origin)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from streamscope_collector.admission import Admission
from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.alerts import add_alerts_route
from streamscope_collector.http.health import Readiness, add_health_routes
from streamscope_collector.http.otlp import add_export_routes
from streamscope_collector.http.snippet import add_snippet_route
from streamscope_collector.http.sql import OperatorSql, add_sql_route
from streamscope_collector.metrics import CountRefusals, SelfMetrics
from streamscope_collector.pipeline import ExportPipeline

__all__ = ["KEEP_ALIVE_S", "OperatorSql", "create_app"]

KEEP_ALIVE_S = 65
"""How long an idle connection stays open: past Retry-After, so that a sender that waits as told and sends again
on its connection does not meet the server closing it (uvicorn's default, 5 s, is Retry-After to the second, and
such a sender got a reset connection); and past a load balancer's usual idle timeout (60 s), for the same race
between a balancer and the collectors behind it."""


def create_app(
    pipeline: ExportPipeline,
    config: CollectorConfig,
    *,
    admission: Admission,
    metrics: SelfMetrics,
    readiness: Readiness,
    sql: OperatorSql | None,
) -> FastAPI:
    """The collector's HTTP app; ``sql`` (the operator's queries) is served only when given: for an embedded store."""
    app = FastAPI(title="streamscope collector", docs_url=None, redoc_url=None, openapi_url=None)
    add_export_routes(app, pipeline, config, admission, metrics)
    add_snippet_route(app)
    add_health_routes(app, readiness, metrics)
    add_alerts_route(app, pipeline, config, admission)
    if sql is not None:
        add_sql_route(app, sql, admission.credentials)
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
