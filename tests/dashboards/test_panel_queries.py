"""Panel queries as the data source runs them (variables applied, macros expanded) on the embedded store."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest

from streamscope_dashboards.grafana import OUTPUT_DIR as DASHBOARDS_DIR
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import Panel
from streamscope_dashboards.panels.cost import OTLP_BYTES_PER_CHUNK
from streamscope_dashboards.panels.nodes import KV_USAGE

# a range that starts part way through its first one-minute bucket
START = datetime(2026, 1, 1, 0, 0, 45, tzinfo=UTC)
CTX = QueryContext(START, START + timedelta(minutes=10), timedelta(minutes=1))
INSIDE = datetime(2026, 1, 1, 0, 0, 50, tzinfo=UTC)
"""In the range, in a bucket that began before it."""


def provisioned_queries() -> list[tuple[str, str]]:
    """(dashboard/panel title, rawSql) of every target of every provisioned dashboard."""
    queries = []
    for path in sorted(DASHBOARDS_DIR.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                queries.append((f"{path.stem}/{panel['title']}", target["rawSql"]))
    return queries


@pytest.mark.parametrize(("panel", "where"), [(OTLP_BYTES_PER_CHUNK, "ingest_requests"), (KV_USAGE, "engine_samples")])
def test_a_bucketed_panel_keeps_rows_of_its_first_bucket_that_fall_in_the_range(store_client, panel: Panel, where: str):
    """``$__timeInterval(time) AS time`` names the bucket ``time``; the range must still filter the row's time (a
    WHERE that reads the alias drops the rows before the first bucket's end)."""
    if where == "ingest_requests":
        store_client.insert(
            "ingest_requests",
            [["", INSIDE, "traces", "http", "application/x-protobuf", "", 900, 900, 0, 0, {"chunks": 3}]],
            column_names=[
                "tenant", "time", "signal", "transport", "content_type", "content_encoding", "received_bytes",
                "message_bytes", "rejected", "ignored", "rows",
            ],
        )  # fmt: skip
    else:
        store_client.insert(
            "engine_samples",
            [["", INSIDE, "node-0", "h", "http://e/metrics", "engine", "kv_usage", "vllm", "", -1, 0.5]],
            column_names=[
                "tenant", "time", "node_name", "host", "engine_url", "source", "metric", "engine", "gpu_uuid",
                "gpu_index", "value",
            ],
        )  # fmt: skip
    rows = store_client.query(resolve(panel.sql, CTX)).result_rows
    assert [row[0] for row in rows] == [datetime(2026, 1, 1, 0, 0)], rows
    assert rows[0][-1] == pytest.approx(300.0 if where == "ingest_requests" else 0.5)


def test_no_provisioned_query_filters_its_range_on_an_alias():
    """In ClickHouse a SELECT alias wins over a column of the same name in WHERE: ``$__timeFilter(x)`` beside
    ``... AS x`` filters the expression, not the column."""
    shadowed = []
    for where, sql in provisioned_queries():
        aliases = set(re.findall(r"\bAS\s+(\w+)", sql, flags=re.IGNORECASE))
        filtered = set(re.findall(r"\$__time(?:Filter|Filter_ms)\((\w+)\)", sql))
        shadowed += [f"{where}: {column}" for column in aliases & filtered]
    assert not shadowed
    assert len(provisioned_queries()) > 20  # the check read the dashboards
