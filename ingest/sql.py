"""Read-only SQL on the store, answered as ClickHouse's own JSONCompact document.

One function serves both ways `streamscope sql` reaches the store: directly, and through a running
collector's /api/v1/sql (the only way while the collector owns the embedded engine's directory).
"""

from __future__ import annotations

import json
from typing import Any

from clickhouse_connect.driver.client import Client

from ingest import store

READ_ONLY = {"max_execution_time": 60, "readonly": 1}  # the limit first: readonly=1 then freezes settings


def query_json(client: Client, sql: str) -> bytes:
    """Run ``sql`` with the session read-only; raises WriteError with ClickHouse's message on a bad query."""
    with store.translated_errors():
        return client.raw_query(sql, fmt="JSONCompact", settings=READ_ONLY)


def parse_result(document: bytes) -> tuple[list[str], list[list[Any]]]:
    """Column names and rows of a JSONCompact answer."""
    parsed = json.loads(document)
    return [column["name"] for column in parsed["meta"]], parsed["data"]
