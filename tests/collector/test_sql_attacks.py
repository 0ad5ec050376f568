"""The SQL route under attack: a tenant's token, no token, and the operator's own statements.

Every attack here once worked against the route (it ran an EXPLAIN of the raw statement first, and the embedded
engine runs each ``;``-separated statement): dropped tables, forged rows in another tenant's data, files written
and read on the host, the collector's own endpoints fetched, other tenants' rows read out of error messages.
After each, the store must be as it was and no file may have been written.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import httpx
import pytest
import yaml

from streamscope_collector.config import CollectorConfig
from streamscope_collector.http.sql import TENANT_REFUSED
from streamscope_collector.service import DISCOVERY_FILE, Collector
from tests.support import post, sql_request, stream_span, trace_request

SECRETS = {"secret-a": "team-a", "secret-b": "team-b"}


def tenant_attacks(auth_file: Path, collector_url: str, dropped: Path) -> list[str]:
    """Statements a tenant sent to read or write beyond its rows."""
    return [
        "SELECT count() FROM streams; DROP TABLE streams",
        "SELECT (SELECT toUInt64(arrayStringConcat(groupArray(concat(tenant, ':', service)), ' | ')) "
        "FROM streams WHERE tenant != 'team-a') FROM streams",
        "SELECT throwIf(count() > 0) FROM streams WHERE tenant = 'team-b'",
        f"SELECT file('{auth_file}') FROM streams LIMIT 1",
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        f"SELECT * FROM url('{collector_url}/readyz', 'LineAsString')",
        "SELECT * FROM system.parts",
        "SELECT * FROM system.processes",
        "SELECT * FROM merge(currentDatabase(), '^streams$')",
        "SELECT count() FROM streams SETTINGS additional_table_filters = {'streams': '1'}",
        f"INSERT INTO FUNCTION file('{dropped}', 'CSV', 'x UInt8') VALUES (1)",
        "INSERT INTO streams (tenant, service) VALUES ('team-b', 'forged')",
        "DROP TABLE streams",
    ]


def operator_attacks(dropped: Path) -> list[str]:
    """Statements that are not one SELECT, or would escape the route's limits: refused before any of it runs."""
    return [
        "SELECT count() FROM streams; DROP TABLE streams",
        "SELECT 1; INSERT INTO streams (tenant, service) VALUES ('team-b', 'forged')",
        "SELECT 1) ; DROP TABLE streams; SELECT * FROM (SELECT 1",
        "DROP TABLE streams",
        "INSERT INTO streams (tenant, service) VALUES ('team-b', 'forged')",
        f"INSERT INTO FUNCTION file('{dropped}', 'CSV', 'x UInt8') VALUES (1)",
        f"SELECT 1 INTO OUTFILE '{dropped}'",
        "SELECT 1 FORMAT CSV",
        "SELECT sleep(1) SETTINGS max_execution_time = 100000",
        "SELECT * FROM (SELECT 1 SETTINGS readonly = 0)",
        "EXPLAIN QUERY TREE SELECT (SELECT count() FROM streams)",
        "SYSTEM SHUTDOWN",
        "CREATE TABLE evil (x UInt8) ENGINE = Memory",
    ]


@pytest.fixture
def auth_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens.yaml"
    path.write_text(yaml.safe_dump({"tokens": SECRETS}))
    return path


@pytest.fixture
def secured(storage_dsn: str, auth_file: Path):
    config = CollectorConfig(
        storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None, tokens=SECRETS
    )
    running = Collector(config).start()
    for trace, token in [(1, "secret-a"), (2, "secret-b")]:
        span = stream_span(trace, 1, side="client", offsets_ms=[0, 5], tokens=[1, 1])
        assert post(running, trace_request([span]).SerializeToString(), token=token).status_code == 200
    assert running.flush(60)
    yield running
    running.stop()


def store_state(collector: Collector) -> list[tuple]:
    """What an attack could change: our tables, and every row of streams."""
    client = collector.query_client
    tables = client.query("SELECT name FROM system.tables WHERE database = currentDatabase() ORDER BY name")
    rows = client.query("SELECT tenant, service, trace_id FROM streams ORDER BY trace_id")
    return [*tables.result_rows, *rows.result_rows]


def test_a_tenants_token_is_refused_every_statement_and_nothing_runs(secured, auth_file, tmp_path):
    before = store_state(secured)
    dropped = tmp_path / "dropped.csv"
    for statement in tenant_attacks(auth_file, secured.http_url, dropped):
        refused = sql_request(secured, statement, "secret-a")
        assert refused.status_code == 403, (statement, refused.text)
        assert refused.json() == {"error": TENANT_REFUSED}  # nothing of the store in the answer
    assert store_state(secured) == before
    assert not dropped.exists()


@pytest.mark.parametrize("token", [None, "wrong", "public-token"])
def test_without_the_operators_token_the_route_is_closed(collector, auth_file, tmp_path, token):
    """Authentication off is no open door: the route still wants the operator's token."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    before = store_state(collector)
    dropped = tmp_path / "dropped.csv"
    for statement in tenant_attacks(auth_file, collector.http_url, dropped):
        url = f"{collector.http_url}/api/v1/sql"
        refused = httpx.post(url, json={"query": statement}, headers=headers, timeout=30)
        assert refused.status_code == 401, (statement, refused.text)
        assert refused.headers["www-authenticate"] == "Bearer"
        assert str(auth_file) not in refused.text and "secret" not in refused.text
    assert store_state(collector) == before
    assert not dropped.exists()


def test_the_operators_statements_other_than_one_select_are_refused_before_they_run(secured, tmp_path):
    before = store_state(secured)
    dropped = tmp_path / "dropped.csv"
    for statement in operator_attacks(dropped):
        refused = sql_request(secured, statement)
        assert refused.status_code == 400, (statement, refused.text)
        assert refused.json()["error"]
    assert store_state(secured) == before
    assert not dropped.exists()


def test_the_operator_reads_every_tenants_rows(secured):
    answer = sql_request(secured, "SELECT tenant FROM streams ORDER BY tenant")
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"] == [["team-a"], ["team-b"]]


def test_the_operators_token_is_in_a_discovery_file_only_its_owner_reads(secured, chdb_dir):
    discovery = chdb_dir / DISCOVERY_FILE
    assert stat.S_IMODE(os.stat(discovery).st_mode) == 0o600
    assert secured.operator_token in discovery.read_text()
