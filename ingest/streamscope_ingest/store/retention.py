"""How long each table keeps its rows: a TTL on its time column, in whole days, with a default per table.

Raw chunks are the bulk of what is stored and are read for one trace's drilldown and for re-computation, so they
go first; the per-stream rows, verdicts and engine events that the dashboards read over weeks stay longer, and
fired alerts longest. Every table is partitioned by day of the same column, so with ``ttl_only_drop_parts`` an
expired day is dropped as whole parts, never rewritten row by row.

A table without a TTL keeps everything. ``apply`` gives tables the TTLs asked for (0: keep everything again);
``missing_defaults`` is what a new deployment gets: the default of every table that has no TTL yet, never
shortening one an operator chose. The bookkeeping tables (migrations, the attribution watermark and lease) are
not managed here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from streamscope.errors import ConfigError
from streamscope_ingest import store
from streamscope_ingest.store import migrations
from streamscope_ingest.store.cluster import LOCAL_SUFFIX, Statement


@dataclass(frozen=True)
class Retained:
    table: str
    column: str
    """The time the TTL counts from."""
    default_days: int


RETAINED: tuple[Retained, ...] = (
    Retained("chunk_arrays", "start_time", 14),
    Retained("streams", "start_time", 30),
    Retained("gap_histograms", "interval_start", 30),
    Retained("stream_histograms", "interval_start", 30),
    Retained("stream_totals", "interval_start", 30),
    Retained("smoothing_histograms", "interval_start", 30),
    Retained("stalls", "start_time", 30),
    Retained("slow_starts", "start_time", 30),
    Retained("stream_quality", "start_time", 30),
    Retained("stream_smoothing", "start_time", 30),
    Retained("engine_samples", "time", 14),
    Retained("engine_events", "start_time", 30),
    Retained("genai_metrics", "time", 30),
    Retained("ingest_requests", "time", 30),
    Retained("ground_truth", "start_time", 14),
    Retained("alerts", "starts_at", 365),
)
BY_TABLE = {retained.table: retained for retained in RETAINED}
MAX_DAYS = 36_500
TABLES_SQL = """
SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() AND name IN {names:Array(String)}
"""

_TTL_DAYS = re.compile(r"\bTTL\s+toDateTime\(\w+\)\s*\+\s*toIntervalDay\((\d+)\)")
_HAS_TTL = re.compile(r"\bTTL\b")


class RetentionError(ConfigError):
    """A table this does not manage, or a number of days out of range."""


def statements(days: Mapping[str, int]) -> list[str]:
    """The statements that give each table in ``days`` a TTL of that many days (0: none)."""
    sql = []
    for table, kept in days.items():
        retained = _managed(table)
        if not 0 <= kept <= MAX_DAYS:
            raise RetentionError(f"{table}: days must be 0 (keep everything) to {MAX_DAYS}, not {kept}")
        if kept == 0:
            sql.append(f"ALTER TABLE {table} REMOVE TTL")
            continue
        sql.append(f"ALTER TABLE {table} MODIFY SETTING ttl_only_drop_parts = 1")
        sql.append(f"ALTER TABLE {table} MODIFY TTL toDateTime({retained.column}) + INTERVAL {kept} DAY")
    return sql


def current(client: Client, *, cluster: bool = False) -> dict[str, int | None]:
    """Each managed table that exists: the days its TTL keeps, 0 when it has none, None for a TTL not set here."""
    suffix = LOCAL_SUFFIX if cluster else ""
    names = [retained.table + suffix for retained in RETAINED]
    with store.translated_errors():
        rows = client.query(TABLES_SQL, parameters={"names": names}).result_rows
    kept: dict[str, int | None] = {}
    for name, engine in rows:
        table = name.removesuffix(suffix)
        match = _TTL_DAYS.search(engine)
        kept[table] = int(match.group(1)) if match else (None if _HAS_TTL.search(engine) else 0)
    return {retained.table: kept[retained.table] for retained in RETAINED if retained.table in kept}


def missing_defaults(kept: Mapping[str, int | None]) -> dict[str, int]:
    """The default days of every table in ``kept`` that has no TTL."""
    return {table: BY_TABLE[table].default_days for table, days in kept.items() if days == 0}


def apply(client: Client, days: Mapping[str, int], *, cluster: str | None = None) -> list[Statement]:
    """Run ``statements(days)`` (rewritten for ``cluster``: on its local tables, on every node) and return them."""
    planned = planned_statements(days, cluster)
    with store.translated_errors(writing=True):
        for statement in planned:
            client.command(statement.sql, settings=statement.settings or None)
    return planned


def planned_statements(days: Mapping[str, int], cluster: str | None) -> list[Statement]:
    sql = statements(days)
    if cluster is None:
        return [Statement(s) for s in sql]
    schema = migrations.cluster_schema(cluster)
    return [rewritten for s in sql for rewritten in schema.rewrite(s)]


def _managed(table: str) -> Retained:
    if table not in BY_TABLE:
        raise RetentionError(f"no retention for {table!r}: the tables with one are {', '.join(BY_TABLE)}")
    return BY_TABLE[table]
