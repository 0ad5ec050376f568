"""The attribution lease on a cluster: claims are keys in ClickHouse Keeper (a ``KeeperMap`` table in strict mode),
so two collectors that each read a replica where the other's claim has not arrived still cannot both win.

Each scenario runs in a process of its own, on an embedded engine whose Keeper is ClickHouse's in-memory one
(``tests/fixtures/keeper/testkeeper.xml``): the engine's configuration is fixed by the first connection of a
process, and the test session's engine has none."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import clickhouse_connect

from streamscope_ingest.analysis.attribution_job import JOB
from streamscope_ingest.store import migrations
from streamscope_ingest.store.lease import CLAIMS_TABLE, Lease, claims_table_ddl
from tests.ingest.analysis.test_attribution_lease import (
    a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing,
    holder,
    one_attributes_each_stream_once_and_another_takes_over_when_it_stops,
)

TESTKEEPER = Path(__file__).parents[2] / "fixtures" / "keeper" / "testkeeper.xml"
DATABASE = "leases"


def in_a_store_with_keeper(tmp_path: Path, scenario: Callable[..., None]) -> None:
    """Run ``scenario(client)`` in a new process on a migrated store with a Keeper and the claims table."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        pool.submit(_run, str(tmp_path / "chdb"), scenario).result(timeout=240)


def _run(path: str, scenario: Callable[..., None]) -> None:
    options = {"config-file": str(TESTKEEPER)}
    clickhouse_connect.get_client(interface="chdb", path=path, chdb_options=options).command(
        f"CREATE DATABASE IF NOT EXISTS {DATABASE}"
    )
    client = clickhouse_connect.get_client(interface="chdb", path=path, database=DATABASE, chdb_options=options)
    migrations.migrate(client)
    client.command(claims_table_ddl(DATABASE, cluster=None))  # what `migrate --cluster` adds, ON CLUSTER
    scenario(client)


def test_the_store_says_whether_claims_go_to_keeper(store_client, tmp_path):
    assert not Lease(store_client, store_client, JOB).keeper
    in_a_store_with_keeper(tmp_path, _claims_go_to_keeper)


def _claims_go_to_keeper(client) -> None:
    assert Lease(client, client, JOB).keeper


def test_two_collectors_that_both_saw_the_lease_free_cannot_both_win(tmp_path):
    in_a_store_with_keeper(tmp_path, _one_of_two_racing_claims_wins)


def _one_of_two_racing_claims_wins(client) -> None:
    first, second = (Lease(client, client, JOB, holder=name, keeper=True) for name in ("first", "second"))
    seen = first.state()
    assert seen.free(first.lease_us) and second.state().epoch == seen.epoch == 0
    assert first._claim(seen, renewing=False)
    assert not second._claim(seen, renewing=False)  # its replica had not shown it the first claim yet
    assert holder(client) == "first" and first.still_held() and not second.still_held()
    assert client.query(f"SELECT claim, holder FROM {CLAIMS_TABLE}").result_rows == [(f"{JOB}/1", "first")]


def test_rows_that_order_the_claims_otherwise_do_not_make_a_second_holder(tmp_path):
    """On a cluster a replica can show a losing claim first (its node's clock ran behind): Keeper decides."""
    in_a_store_with_keeper(tmp_path, _rows_do_not_decide)


def _rows_do_not_decide(client) -> None:
    first, second = (Lease(client, client, JOB, holder=name, keeper=True) for name in ("first", "second"))
    assert first.held()
    client.command(
        "INSERT INTO attribution_leases SELECT {job:String}, 1, 'second', 'claim', now64(6) - INTERVAL 1 SECOND",
        parameters={"job": JOB},
    )
    assert not second.held() and first.held() and first.still_held()
    assert holder(client) == "first"


def test_of_several_jobs_one_attributes_each_stream_once_and_another_takes_over_when_it_stops(tmp_path):
    in_a_store_with_keeper(tmp_path, _several_jobs)


def _several_jobs(client) -> None:
    one_attributes_each_stream_once_and_another_takes_over_when_it_stops(client)
    assert [row[0] for row in client.query(f"SELECT epoch FROM {CLAIMS_TABLE} ORDER BY epoch").result_rows] == [1, 2]


def test_a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing(tmp_path):
    in_a_store_with_keeper(tmp_path, a_dead_holders_share_is_taken_over_and_a_holder_that_was_only_slow_writes_nothing)
