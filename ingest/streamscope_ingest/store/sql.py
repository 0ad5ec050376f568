"""Read-only SQL on the store, answered as ClickHouse's own JSONCompact document.

One function serves every way a command reads the store: directly, and through a running collector's
/api/v1/sql (the only way while the collector owns the embedded engine's directory). It serves an operator:
confining a query to one tenant's rows is the job of a ClickHouse server's access control (``access``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clickhouse_connect.driver.client import Client

from streamscope.errors import RetryableWriteError, StreamscopeError
from streamscope_ingest import store

READ_ONLY = {
    "max_execution_time": 60,
    "max_memory_usage": 4 * 1024**3,
    "max_result_bytes": 512 * 1024**2,  # the answer is one JSON document in memory, here and at the asker
    "output_format_json_quote_64bit_integers": 0,  # numbers stay numbers for every reader
    "readonly": 1,  # last: readonly=1 then freezes the settings above
}
"""What every query runs under: no writes, and bounds on its time, memory and answer."""

_SELECT_NODE = "SelectWithUnionQuery"
_SETTINGS_NODE = "Set"  # a SETTINGS clause in the parse tree


class QueryRefused(StreamscopeError):
    """The statement is not one SELECT; nothing of it ran."""


def string_literal(value: str) -> str:
    """``value`` as a ClickHouse string literal, for the few statements that cannot bind it as a parameter."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def query_json(client: Client, statement: str) -> bytes:
    """Run one SELECT read-only and bounded; raises QueryRefused, or WriteError with ClickHouse's message.

    Nothing of ``statement`` runs until ClickHouse's own parser has read it as exactly one query
    (``single_select``). What runs is that parse, as a subquery: a second statement, ``INTO OUTFILE`` or
    ``FORMAT`` cannot survive the round trip, and ``readonly`` refuses anything but reading.
    """
    select = single_select(client, statement)
    settings = READ_ONLY if not _profile_read_only(client) else {k: v for k, v in READ_ONLY.items() if k != "readonly"}
    with store.translated_errors():
        return client.raw_query(f"SELECT * FROM (\n{select}\n)", fmt="JSONCompact", settings=settings)


def single_select(client: Client, statement: str) -> str:
    """``statement`` as ClickHouse's parser reads it, if it is one SELECT with no SETTINGS of its own.

    The statement reaches the store only as a string literal, to functions that parse and run nothing: a
    multi-statement is a syntax error to ``formatQuerySingleLine``, and the parse tree of the one statement
    left (``EXPLAIN AST``) says what kind it is.
    """
    try:
        with store.translated_errors():
            parsed = client.query("SELECT formatQuerySingleLine(%(statement)s)", parameters={"statement": statement})
            canonical = str(parsed.result_rows[0][0])
            tree = client.raw_query(f"EXPLAIN AST {canonical}", fmt="TSVRaw").decode().splitlines()
    except RetryableWriteError:
        raise
    except StreamscopeError as exc:
        raise QueryRefused(f"not one statement ClickHouse can parse: {exc}") from None
    kind = tree[0].split(" ", 1)[0] if tree else "nothing"
    if kind != _SELECT_NODE:
        raise QueryRefused(f"only a single SELECT is served here, not {kind}")
    if any(node.strip() == _SETTINGS_NODE for node in tree):
        raise QueryRefused("a query here may not carry SETTINGS: it runs under the route's own limits")
    return canonical


def _profile_read_only(client: Client) -> bool:
    """Whether the account's profile already keeps it read-only; ClickHouse then refuses any change of ``readonly``."""
    setting = client.server_settings.get("readonly")
    return setting is not None and setting.value != "0"


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
