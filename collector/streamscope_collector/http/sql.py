"""``POST /api/v1/sql``: read-only SQL on the store, for `streamscope sql` while this process owns the embedded
engine; with authentication on, a token's query sees its tenant's rows only.

A refused credential is answered as on every route (``streamscope_collector.status``). The query's own errors are
the asker's to fix, so they are answered apart: a store that is not reachable now 503, a query reading beyond
the tenant's rows 403, any other error of the query (ClickHouse's message) 400.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from streamscope.errors import RetryableWriteError, StreamscopeError
from streamscope_collector.auth import Credentials, Unauthorized
from streamscope_collector.http.body import JSON, json_error
from streamscope_collector.status import answer
from streamscope_ingest.store.sql import QueryRefused

SQL_PATH = "/api/v1/sql"
SqlRunner = Callable[[str, str | None], bytes]
"""Runs a read-only query, for a tenant (its rows only) or for the operator (None)."""
_NOT_A_QUERY = 'body must be JSON: {"query": "SELECT …"}'


def add_sql_route(app: FastAPI, sql: SqlRunner, credentials: Credentials) -> None:
    """Serve ``sql`` on ``app``, for the operator while authentication is off and for a token's tenant while on."""

    @app.post(SQL_PATH)
    async def run_sql(request: Request) -> Response:
        """The query's result as ClickHouse's JSONCompact document, or ``{"error": ...}``."""
        try:
            tenant = credentials.tenant(request.headers.get("authorization")) if credentials.enabled else None
        except Unauthorized as exc:
            return json_error(answer(exc, "a SQL query"))
        try:
            payload = await request.json()
        except (ValueError, RecursionError):
            return JSONResponse({"error": _NOT_A_QUERY}, status_code=400)
        query = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(query, str) or not query.strip():
            return JSONResponse({"error": _NOT_A_QUERY}, status_code=400)
        try:
            return Response(await run_in_threadpool(sql, query, tenant), media_type=JSON)
        except RetryableWriteError as exc:
            return JSONResponse({"error": str(exc)}, status_code=503)
        except QueryRefused as exc:
            return JSONResponse({"error": str(exc)}, status_code=403)
        except StreamscopeError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
