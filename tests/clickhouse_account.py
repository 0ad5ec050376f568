"""What one ClickHouse account may do, tried with streamscope's own code on the embedded engine.

Run as ``python -m tests.clickhouse_account DATA CONFIG_XML ACTION...`` (``run_as`` writes the config): the
engine at DATA starts with the compose stack's server settings and a users config whose ``default`` user carries
the account's grants and profile (chDB runs every query as ``default``, and allows one engine per process, hence
a process per account). Prints one JSON object:
action -> ``ok``, ``denied`` (ClickHouse refused it for the account's rights) or the error's text.
"""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

import clickhouse_connect
from clickhouse_connect.driver.client import Client

from streamscope.errors import WriteError
from streamscope_ingest import store
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store import dedup, migrations, sql
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import stream_span, trace_request

DATABASE = "streamscope"
ROOT = Path(__file__).resolve().parents[1]
SERVER_SETTINGS = ROOT / "schema" / "clickhouse" / "config.d" / "streamscope.xml"
DENIED = ("(ACCESS_DENIED)", "(READONLY)", "(DATABASE_ACCESS_DENIED)")


def spans(tenant: str = "t"):
    return decode_traces(
        trace_request([stream_span(7, 7, side="client", offsets_ms=[0, 20], tokens=[1, 1])]),
        tenant=tenant,
    )


ACTIONS: dict[str, Callable[[Client], object]] = {
    "create database": lambda client: client.command(f"CREATE DATABASE IF NOT EXISTS {DATABASE}"),
    "migrate": lambda client: migrations.migrate(client),
    "insert spans": lambda client: ClickHouseWriter(client).insert(spans()),
    "look up repeated spans": lambda client: dedup.drop_repeated_spans(client, [spans()]),
    "streamscope sql": lambda client: sql.query_json(client, "SELECT count() FROM streams"),
    "dashboard query": lambda client: client.query("SELECT count() FROM streams SETTINGS max_execution_time = 60"),
    "alter delete": lambda client: client.command("ALTER TABLE streams DELETE WHERE 1"),
    "truncate": lambda client: client.command("TRUNCATE TABLE streams"),
    "drop table": lambda client: client.command("DROP TABLE streams"),
}


class Rows(str):
    """What a query read, as JSON."""


QUERY = "sql: "
"""An action ``sql: <statement>`` runs the statement as ``streamscope sql`` does, and gives its rows."""
INSERT_AS = "insert spans of "
"""An action ``insert spans of <tenant>`` stores a stream for that tenant."""


def outcome(action: Callable[[Client], object], client: Client) -> str:
    """``ok``, or the rows (as JSON) a query read; ``denied`` if ClickHouse refused the account, or the error."""
    try:
        with store.translated_errors():
            done = action(client)
    except WriteError as exc:
        return "denied" if any(code in str(exc) for code in DENIED) else str(exc)
    return done if isinstance(done, Rows) else "ok"


def action_named(name: str) -> Callable[[Client], object]:
    if name.startswith(QUERY):
        return lambda client: Rows(json.dumps(sql.parse_result(sql.query_json(client, name.removeprefix(QUERY))).rows))
    if name.startswith(INSERT_AS):
        return lambda client: ClickHouseWriter(client).insert(spans(name.removeprefix(INSERT_AS)))
    return ACTIONS[name]


def main(data: str, config: str, *actions: str) -> None:
    client = clickhouse_connect.get_client(interface="chdb", path=data, chdb_options={"config-file": config})
    results = {}
    for action in actions:
        if action != "create database":
            client.database = DATABASE  # the account's own first action may be to create it
        results[action] = outcome(action_named(action), client)
    print(json.dumps(results))


def server_config(users_xml: Path) -> str:
    """The engine's config: the compose stack's server settings, ``users_xml``, and the files a server's
    functions may read in a folder of their own (a server's ``user_files_path``; the embedded engine's is
    the whole disk)."""
    shipped = ET.parse(SERVER_SETTINGS).getroot()
    user_files = users_xml.parent / "user_files"
    user_files.mkdir(exist_ok=True)
    ET.SubElement(shipped, "users_config").text = str(users_xml)
    ET.SubElement(shipped, "user_files_path").text = f"{user_files}/"
    return ET.tostring(shipped, encoding="unicode")


def run_as(data: Path, users_config: str, name: str, *actions: str) -> dict[str, str]:
    """Try ``actions`` on the engine at ``data`` as the ``default`` user of ``users_config`` (saved as ``name``)."""
    users_xml = data.parent / f"{name}-users.xml"
    users_xml.write_text(users_config)
    config = data.parent / f"{name}-config.xml"
    config.write_text(server_config(users_xml))
    command = [sys.executable, "-m", "tests.clickhouse_account", str(data), str(config), *actions]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


if __name__ == "__main__":
    main(*sys.argv[1:])
