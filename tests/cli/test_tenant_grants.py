"""`streamscope tenant-grants` users, enforced by the ClickHouse engine itself: a tenant reads its rows only.

The engine starts with the users file the command wrote, the tenant's user as its ``default`` user
(tests.clickhouse_account), and the attacks that once read around the SQL route's filters run as that user
through `streamscope sql`'s own code path.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from streamscope_ingest.store.tenant_access import PROFILE, user_name
from tests.clickhouse_account import DATABASE, ROOT, SERVER_SETTINGS, run_as
from tests.support import run

TENANTS = {"secret-a": "team-a", "secret-b": "team-b"}
FULL_ACCESS = (
    "<clickhouse><profiles><default/></profiles><quotas><default/></quotas><users><default><password/>"
    "<networks><ip>::/0</ip></networks><profile>default</profile><quota>default</quota></default></users>"
    "</clickhouse>"
)


def as_default_user(users_config: str, name: str) -> str:
    """``users_config`` with its user ``name`` as the only user, renamed ``default`` (chDB runs as ``default``)."""
    root = ET.fromstring(users_config)
    users = root.find("users")
    assert users is not None
    account = users.find(name)
    assert account is not None, f"no user {name}"
    for other in list(users):
        users.remove(other)
    account.tag = "default"
    account.remove(account.find("password_sha256_hex"))
    ET.SubElement(account, "password")
    users.append(account)
    ET.SubElement(root.find("profiles"), "default")
    ET.SubElement(ET.SubElement(root, "quotas"), "default")
    return ET.tostring(root, encoding="unicode")


@pytest.fixture(scope="module")
def granted(tmp_path_factory) -> tuple[Path, str, str]:
    """An engine holding both tenants' rows; the users file; the command's output."""
    tmp = tmp_path_factory.mktemp("tenants")
    data = tmp / "engine"
    setup = run_as(
        data, FULL_ACCESS, "admin", "create database", "migrate", *(f"insert spans of {t}" for t in TENANTS.values())
    )
    assert set(setup.values()) == {"ok"}, setup
    auth_file, users_file = tmp / "tokens.yaml", tmp / "tenants.xml"
    auth_file.write_text(yaml.safe_dump({"tokens": TENANTS}))
    done = run(
        "tenant-grants",
        "--auth-file",
        str(auth_file),
        "--output",
        str(users_file),
        "--storage",
        f"chdb://{data}?database={DATABASE}",
    )
    assert done.returncode == 0, done.stderr
    return data, users_file.read_text(), done.stdout


def as_tenant(granted, tenant: str, *statements: str) -> dict[str, object]:
    data, users_config, _ = granted
    config = as_default_user(users_config, user_name(tenant))
    found = run_as(data, config, tenant, *(f"sql: {statement}" for statement in statements))
    return {statement: found[f"sql: {statement}"] for statement in statements}


def test_the_file_holds_one_user_per_tenant_with_hashed_passwords_only(granted):
    _, users_config, printed = granted
    root = ET.fromstring(users_config)
    users = {user.tag: user for user in root.find("users")}
    assert set(users) == {user_name(t) for t in TENANTS.values()}
    for tenant in TENANTS.values():
        user = users[user_name(tenant)]
        [line] = [line for line in printed.splitlines() if line.split() and line.split()[0] == tenant]
        password = line.split()[-1]
        assert password not in users_config and user.find("password_sha256_hex") is not None
        assert user.findtext("profile") == PROFILE
    assert root.find(f"profiles/{PROFILE}/readonly").text == "1"


def test_a_tenant_reads_its_own_rows_through_tables_and_views(granted):
    for tenant in TENANTS.values():
        read = as_tenant(
            granted,
            tenant,
            "SELECT DISTINCT tenant FROM streams",
            "SELECT DISTINCT tenant FROM chunk_timeline",
            "SELECT DISTINCT tenant FROM gap_histograms",  # counted by the writer
        )
        assert all(json.loads(rows) == [[tenant]] for rows in read.values()), read


def test_the_engine_refuses_a_tenant_everything_beyond_its_rows(granted, tmp_path):
    dropped = tmp_path / "dropped.csv"
    leaks = as_tenant(
        granted,
        "team-a",
        "SELECT count() FROM streams WHERE tenant != 'team-a'",
        "SELECT (SELECT count() FROM streams WHERE tenant = 'team-b') FROM streams",
        "SELECT throwIf(count() > 0) FROM streams WHERE tenant = 'team-b'",
        "SELECT count() FROM merge(currentDatabase(), '^streams$') WHERE tenant != 'team-a'",
        "SELECT count() FROM system.tables WHERE database != currentDatabase()",
    )
    assert all(json.loads(rows) in ([[0]], [[0], [0]]) for rows in leaks.values()), leaks
    refused = as_tenant(
        granted,
        "team-a",
        "SELECT * FROM file('/etc/passwd', 'LineAsString')",
        "SELECT * FROM url('http://127.0.0.1:9/', 'LineAsString')",
        "SELECT * FROM remote('127.0.0.1', system.one)",
        "SELECT * FROM schema_migrations",
        "SELECT * FROM default.streams",
    )
    assert "\n".join(f"{s} -> {o[:150]}" for s, o in refused.items() if o != "denied") == ""
    assert not dropped.exists()


def test_what_only_a_server_enforces_is_set_up_for_it(granted):
    """The embedded engine, run locally, lets any user read system tables and any file through the scalar
    ``file()``; a server requires a grant for system tables (the stack's config.d states it) and confines
    ``file()`` to its ``user_files_path``. So here: no grant of the tenant's reaches beyond its tables, and the
    stack's server requires grants for system tables."""
    _, users_config, _ = granted
    for user in ET.fromstring(users_config).find("users"):
        for grant in user.iterfind("grants/query"):
            assert re.fullmatch(rf"GRANT SELECT ON {DATABASE}\.\w+", grant.text), grant.text
    settings = ET.parse(SERVER_SETTINGS).getroot().find("access_control_improvements")
    assert settings.findtext("select_from_system_db_requires_grant") == "true"
    assert settings.findtext("select_from_information_schema_requires_grant") == "true"
    assert (
        f"./{SERVER_SETTINGS.relative_to(ROOT)}:/etc/clickhouse-server/config.d/"
        in (ROOT / "docker-compose.yml").read_text()
    )
