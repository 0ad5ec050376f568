"""The migrations rewritten for a ClickHouse cluster (``store/cluster.py``): every statement parses in ClickHouse's
own parser; every table is a replicated local table behind a distributed one, sharded so that one trace's rows
meet on one shard; and the rewrite, run on the embedded engine with its cluster parts stood in for (no Keeper, no
second node here), makes the same tables and views, column for column, as the single-node migrations."""

from __future__ import annotations

import re
import uuid

import pytest

from streamscope_ingest import store
from streamscope_ingest.store import migrations
from streamscope_ingest.store.cluster import LOCAL_SUFFIX, TRACE_KEYS, ClusterFormMissing, ClusterSchema, Statement
from streamscope_ingest.store.lease import claims_table_ddl

CLUSTER = "streamscope"


def rewritten() -> tuple[ClusterSchema, list[Statement]]:
    schema = ClusterSchema(CLUSTER)
    statements = [s for m in migrations.available() for s in schema.rewrite_all(m.statements())]
    return schema, statements


def test_every_statement_parses_in_clickhouses_parser(store_client):
    _, statements = rewritten()
    assert len(statements) > 100
    for statement in statements:
        formatted = store_client.query("SELECT formatQuery({q:String})", parameters={"q": statement.sql})
        assert formatted.result_rows[0][0], statement.sql  # a syntax error raises


def test_every_statement_runs_on_every_node_but_the_inserts():
    _, statements = rewritten()
    for statement in statements:
        if statement.sql.startswith("INSERT"):
            assert statement.settings["distributed_foreground_insert"] == 1  # acknowledged once on every shard
        else:
            assert f" ON CLUSTER {CLUSTER}" in statement.sql, statement.sql


def test_each_table_is_replicated_behind_a_distributed_table_sharded_by_its_trace():
    schema, statements = rewritten()
    assert "streams" in schema.tables and "chunk_arrays" in schema.tables and "chunks" not in schema.tables
    for name, table in schema.tables.items():
        made = [
            s.sql
            for s in statements
            if re.match(rf"CREATE (OR REPLACE )?TABLE (IF NOT EXISTS )?{name}({LOCAL_SUFFIX})? ", s.sql)
        ]
        local = [sql for sql in made if re.search(rf"\b{name}{LOCAL_SUFFIX} ON CLUSTER", sql)]
        assert local and "ENGINE = Replicated" in local[-1] and "'/clickhouse/tables/{uuid}/{shard}'" in local[-1]
        over = f"Distributed({CLUSTER}, currentDatabase(), {name}{LOCAL_SUFFIX}, {table.shard_key})"
        assert [sql for sql in made if sql not in local][-1].endswith(over)
    by_trace = {name for name, table in schema.tables.items() if table.shard_key in TRACE_KEYS.values()}
    assert by_trace == {
        "streams",
        "chunk_arrays",
        "stalls",
        "slow_starts",
        "stream_quality",
        "stream_smoothing",
        "ground_truth",
    }
    assert schema.tables["engine_events"].shard_key == "cityHash64((tenant, node_name, kind, start_time))"


def test_one_traces_rows_meet_on_one_shard_whether_its_id_is_kept_as_hex_or_as_bytes(store_client):
    trace = uuid.uuid4().hex
    keys = {
        column: store_client.query(
            f"SELECT {key.replace(column, value)}",
            parameters={"t": trace},
        ).result_rows[0][0]
        for column, key, value in [
            ("trace_id", TRACE_KEYS["trace_id"], "{t:String}"),
            ("trace_id_bytes", TRACE_KEYS["trace_id_bytes"], "toFixedString(unhex({t:String}), 16)"),
        ]
    }
    assert keys["trace_id"] == keys["trace_id_bytes"]


def test_a_statement_without_a_cluster_form_is_refused():
    schema = ClusterSchema(CLUSTER)
    with pytest.raises(ClusterFormMissing):
        schema.rewrite("OPTIMIZE TABLE streams FINAL")
    with pytest.raises(ClusterFormMissing, match="not made by an earlier migration"):
        schema.rewrite("ALTER TABLE nowhere ADD COLUMN x UInt8")


# --- the rewrite, run -------------------------------------------------------------------------------------------


def declustered(statement: Statement, client) -> str:
    """``statement`` as one embedded node can run it: no ``ON CLUSTER``; a replicated engine as its plain one; a
    distributed table as a ``Merge`` table over its local one (the same columns, read through), and an insert into
    it as one into the local table (what a distributed table does with a single shard)."""
    sql = statement.sql.replace(f" ON CLUSTER {CLUSTER}", "")
    if match := re.match(r"INSERT INTO (\w+)", sql):
        local = match.group(1) + LOCAL_SUFFIX
        if client.command("EXISTS TABLE {t:Identifier}", parameters={"t": local}):
            sql = f"INSERT INTO {local}" + sql[match.end() :]
    sql = re.sub(r"Replicated(\w*MergeTree)\('[^']*', '[^']*'(?:, )?", r"\1(", sql)
    return re.sub(
        rf"ENGINE = Distributed\({CLUSTER}, currentDatabase\(\), (\w+), .*\)$",
        r"ENGINE = Merge(currentDatabase(), '^\1$')",
        sql,
    )


def columns(client) -> dict[str, list[tuple[str, str]]]:
    rows = client.query(
        "SELECT table, name, type FROM system.columns WHERE database = currentDatabase() "
        "AND table NOT LIKE '%\\\\_local' AND table NOT LIKE 'schema\\\\_migrations%' ORDER BY table, position"
    ).result_rows
    tables: dict[str, list[tuple[str, str]]] = {}
    for table, name, kind in rows:
        tables.setdefault(table, []).append((name, kind))
    return tables


def sorting_keys(client) -> dict[str, str]:
    """Each MergeTree table's sorting key, by its name on one node (a cluster's local tables named as their own)."""
    rows = client.query(
        "SELECT table, sorting_key FROM system.tables WHERE database = currentDatabase() "
        "AND engine LIKE '%MergeTree' AND table NOT LIKE 'schema\\_migrations%'"
    ).result_rows
    return {table.removesuffix(LOCAL_SUFFIX): key for table, key in rows}


def test_the_rewrite_makes_the_single_node_tables_and_views_column_for_column(store_client, chdb_dir):
    _, statements = rewritten()
    cluster_like = store.connect(store.parse_dsn(f"chdb://{chdb_dir}?database=c_{uuid.uuid4().hex[:12]}"))
    for statement in statements:
        cluster_like.command(declustered(statement, cluster_like), settings=statement.settings)
    single = columns(store_client)
    assert columns(cluster_like) == single
    assert sorting_keys(cluster_like) == sorting_keys(store_client)  # a key a migration changed, changed on both
    assert {"streams", "chunks", "chunk_arrays", "chunk_timeline", "stream_metrics"} <= set(single)


def test_the_attribution_leases_keeper_table_parses_on_the_cluster(store_client):
    sql = claims_table_ddl("streamscope", CLUSTER)
    formatted = store_client.query("SELECT formatQuery({q:String})", parameters={"q": sql}).result_rows[0][0]
    assert f"ON CLUSTER {CLUSTER}" in formatted and "KeeperMap('/streamscope/streamscope/" in formatted
