"""Read-only SQL on the store, answered as ClickHouse's own JSONCompact document.

One function serves every way a command reads the store: directly, and through a running collector's
/api/v1/sql (the only way while the collector owns the embedded engine's directory).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clickhouse_connect.driver.client import Client

from streamscope.errors import StreamscopeError
from streamscope_ingest import store
from streamscope_ingest.decode import columns

READ_ONLY = {
    "max_execution_time": 60,
    "output_format_json_quote_64bit_integers": 0,  # numbers stay numbers for every reader
    "readonly": 1,  # last: readonly=1 then freezes the settings above
}

_TABLE_NAME = re.compile(r"\btable_name: ([^,\s]+)")


def query_json(client: Client, sql: str) -> bytes:
    """Run ``sql`` with the session read-only; raises WriteError with ClickHouse's message on a bad query."""
    settings = READ_ONLY if not _profile_read_only(client) else {k: v for k, v in READ_ONLY.items() if k != "readonly"}
    with store.translated_errors():
        return client.raw_query(sql, fmt="JSONCompact", settings=settings)


def _profile_read_only(client: Client) -> bool:
    """Whether the account's profile already keeps it read-only; ClickHouse then refuses any change of ``readonly``."""
    setting = client.server_settings.get("readonly")
    return setting is not None and setting.value != "0"


def tenant_query_json(client: Client, sql: str, tenant: str) -> bytes:
    """``query_json`` seeing only ``tenant``'s rows; ``client`` must be one no session setting was made on.

    Every table of ours is read through a filter on its ``tenant`` column (ClickHouse's
    ``additional_table_filters``, which views and subqueries go through), set with read-only in the query's own
    SETTINGS, so the query cannot change it. A query naming a table function or another database's table is
    refused (QueryRefused): those would read around the filter. ``tenant`` is a checked name (the collector's
    auth).
    """
    if _profile_read_only(client):
        raise QueryRefused("tenant queries need an account whose settings the collector may freeze (readonly=0)")
    statement = sql.strip().rstrip(";")
    with store.translated_errors():
        plan = client.raw_query(f"EXPLAIN QUERY TREE {statement}", fmt="TSVRaw").decode()
        _check_tenant_scoped(plan, client.database or "default")
        only = f"tenant = ''{tenant}''"  # quoted inside a quoted map value
        filters = ", ".join(f"'{table}': '{only}'" for table in columns.TABLES)
        settings = ", ".join(f"{name} = {value}" for name, value in READ_ONLY.items())
        scoped = f"SELECT * FROM ({statement}) SETTINGS additional_table_filters = {{{filters}}}, {settings}"
        return client.raw_query(scoped, fmt="JSONCompact")


class QueryRefused(StreamscopeError):
    """A tenant's query would read beyond the tenant's rows."""


def _check_tenant_scoped(plan: str, database: str) -> None:
    if "TABLE_FUNCTION" in plan:
        raise QueryRefused("a tenant's query may not use table functions: read the tables by name")
    for table in _TABLE_NAME.findall(plan):
        if not table.startswith(f"{database}."):
            raise QueryRefused(f"a tenant's query may read only the {database} database, not {table}")


@dataclass(frozen=True)
class QueryResult:
    names: list[str]
    types: list[str]
    """ClickHouse type of each column, e.g. ``Nullable(Float64)``."""
    rows: list[list[Any]]

    def column(self, name: str) -> list[Any]:
        index = self.names.index(name)
        return [row[index] for row in self.rows]

    def typed_rows(self) -> list[list[Any]]:
        """Rows with DateTime columns as aware datetimes (JSON carries them as UTC text)."""
        times = [i for i, t in enumerate(self.types) if _base_type(t).startswith("DateTime")]
        if not times:
            return self.rows
        out = []
        for row in self.rows:
            row = list(row)
            for i in times:
                if row[i] is not None:
                    row[i] = datetime.fromisoformat(row[i]).replace(tzinfo=UTC)
            out.append(row)
        return out


def _base_type(clickhouse_type: str) -> str:
    for wrapper in ("Nullable(", "LowCardinality("):
        while clickhouse_type.startswith(wrapper):
            clickhouse_type = clickhouse_type[len(wrapper) : -1]
    return clickhouse_type


def parse_result(document: bytes) -> QueryResult:
    """Column names, types and rows of a JSONCompact answer."""
    parsed = json.loads(document)
    meta = parsed["meta"]
    return QueryResult([c["name"] for c in meta], [c["type"] for c in meta], parsed["data"])
