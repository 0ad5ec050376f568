"""``POST /api/v1/sql``: the operator's read-only SQL on the embedded store, which this process alone may open.

Only the operator is served, by the token this process writes, readable by its owner only, into the discovery
file it leaves in the store's directory (``streamscope sql`` reads it there): whoever may read that directory may
read the store anyway. A tenant's token is refused: the embedded engine has no access control to confine a
query to the tenant's rows or away from files and URLs, so tenants query a ClickHouse server directly, as
users it confines (``streamscope tenant-grants``).

A query is one SELECT, checked before anything of it runs (``streamscope_ingest.store.sql``).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from dataclasses import dataclass

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from streamscope.errors import RetryableWriteError, StreamscopeError
from streamscope_collector.auth import Credentials, Unauthorized, bearer
from streamscope_collector.http.body import JSON, json_error
from streamscope_collector.status import answer

SQL_PATH = "/api/v1/sql"


@dataclass(frozen=True)
class OperatorSql:
    run: Callable[[str], bytes]
    """Runs one read-only query, answering ClickHouse's JSONCompact document."""
    token: str
    """The operator's bearer token."""


_NOT_A_QUERY = 'body must be JSON: {"query": "SELECT …"}'
TENANT_REFUSED = (
    "tenant SQL is not served by the embedded store, which cannot confine a query to one tenant's rows: "
    "query a ClickHouse server as the user `streamscope tenant-grants` sets up for the tenant"
)


def add_sql_route(app: FastAPI, sql: OperatorSql, credentials: Credentials) -> None:
    """Serve ``sql`` on ``app`` to requests bearing its operator token."""

    @app.post(SQL_PATH)
    async def run_sql(request: Request) -> Response:
        """The query's result as ClickHouse's JSONCompact document, or ``{"error": ...}``."""
        offered = bearer(request.headers.get("authorization")) or ""
        if not hmac.compare_digest(offered.encode(), sql.token.encode()):
            if credentials.enabled and credentials.knows(offered):
                return JSONResponse({"error": TENANT_REFUSED}, status_code=403)
            refused = Unauthorized("the SQL API takes the operator's token, from the collector's discovery file")
            return json_error(answer(refused, "a SQL query"))
        try:
            payload = await request.json()
        except (ValueError, RecursionError):
            return JSONResponse({"error": _NOT_A_QUERY}, status_code=400)
        query = payload.get("query") if isinstance(payload, dict) else None
        if not isinstance(query, str) or not query.strip():
            return JSONResponse({"error": _NOT_A_QUERY}, status_code=400)
        try:
            return Response(await run_in_threadpool(sql.run, query), media_type=JSON)
        except RetryableWriteError as exc:
            return json_error(answer(exc, "a SQL query"))
        except StreamscopeError as exc:  # the query's own fault: refused before it ran, or by ClickHouse
            return JSONResponse({"error": str(exc)}, status_code=400)
