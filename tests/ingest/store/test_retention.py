"""Retention: a TTL in days per table, that drops expired days and keeps the rest, on one node or a cluster."""

from __future__ import annotations

import pytest

from streamscope.errors import ConfigError
from streamscope_ingest.store import migrations, retention
from tests.support import store_spans, stream_span

DAY_NS = 86_400 * 10**9


def test_every_managed_table_exists_with_the_time_column_named(store_client):
    rows = store_client.query(
        "SELECT table, name FROM system.columns WHERE database = currentDatabase() AND type LIKE 'DateTime%'"
    ).result_rows
    time_columns = {(table, column) for table, column in rows}
    for retained in retention.RETAINED:
        assert (retained.table, retained.column) in time_columns, retained


def test_expired_days_are_dropped_and_the_rest_kept(store_client):
    now_ns = store_client.query("SELECT toUnixTimestamp64Nano(now64(9))").result_rows[0][0]
    ages = {1: 40, 2: 20, 3: 1}  # trace -> days old
    for trace, days in ages.items():  # one request each: a request may span 7 days
        start_ns = now_ns - days * DAY_NS
        span = stream_span(trace, 1, side="client", offsets_ms=[10, 20], tokens=[1, 1], start_ns=start_ns)
        store_spans(store_client, [span])
    assert retention.current(store_client)["streams"] == 0  # no TTL: everything is kept
    retention.apply(store_client, {"streams": 30, "chunk_arrays": 14})
    assert retention.current(store_client) | {"streams": 30, "chunk_arrays": 14} == retention.current(store_client)
    for table in ("streams", "chunk_arrays"):
        store_client.command(f"OPTIMIZE TABLE {table} FINAL")
    kept = store_client.query("SELECT trace_id FROM streams ORDER BY trace_id").result_rows
    assert kept == [(f"{2:032x}",), (f"{3:032x}",)]
    chunks = store_client.query("SELECT DISTINCT trace_id FROM chunks ORDER BY trace_id").result_rows
    assert chunks == [(f"{3:032x}",)]


def test_defaults_fill_in_tables_without_a_ttl_and_never_shorten_a_chosen_one(store_client):
    retention.apply(store_client, {"chunk_arrays": 60})
    given = retention.missing_defaults(retention.current(store_client))
    assert "chunk_arrays" not in given and given["streams"] == 30 and given["alerts"] == 365
    retention.apply(store_client, given)
    kept = retention.current(store_client)
    assert kept["chunk_arrays"] == 60
    assert kept == {r.table: (60 if r.table == "chunk_arrays" else r.default_days) for r in retention.RETAINED}
    retention.apply(store_client, {"chunk_arrays": 0})  # 0: keep everything again
    assert retention.current(store_client)["chunk_arrays"] == 0
    assert retention.missing_defaults(retention.current(store_client)) == {"chunk_arrays": 14}


@pytest.mark.parametrize(
    ("days", "message"),
    [
        ({"chunks": 3}, "no retention for 'chunks'"),
        ({"streams": -1}, "days must be 0"),
        ({"streams": 10**6}, "to 36500"),
    ],
)
def test_a_table_not_managed_or_days_out_of_range_are_refused(days, message):
    with pytest.raises(ConfigError, match=message):
        retention.statements(days)


def test_on_a_cluster_the_local_tables_expire_on_every_node(store_client):
    statements = retention.planned_statements({"streams": 30, "alerts": 0}, "fleet")
    assert [s.sql for s in statements] == [
        "ALTER TABLE streams_local ON CLUSTER fleet MODIFY SETTING ttl_only_drop_parts = 1",
        "ALTER TABLE streams_local ON CLUSTER fleet MODIFY TTL toDateTime(start_time) + INTERVAL 30 DAY",
        "ALTER TABLE alerts_local ON CLUSTER fleet REMOVE TTL",
    ]
    for statement in statements:
        store_client.query("SELECT formatQuery({q:String})", parameters={"q": statement.sql})  # a syntax error raises
    every = retention.planned_statements({r.table: r.default_days for r in retention.RETAINED}, "fleet")
    schema = migrations.cluster_schema("fleet")
    assert all(s.sql.split()[2].removesuffix("_local") in schema.tables for s in every)
