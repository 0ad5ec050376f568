"""What one ClickHouse account may do, tried with streamscope's own code on the embedded engine.

Run as ``python -m tests.clickhouse_account DATA USERS_XML ACTION...``: the engine at DATA starts with
USERS_XML as its users config, whose ``default`` user carries the account's grants and profile (chDB runs every
query as ``default``, and allows one engine per process, hence a process per account). Prints one JSON object:
action -> ``ok``, ``denied`` (ClickHouse refused it for the account's rights) or the error's text.
"""

from __future__ import annotations

import json
import sys
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
DENIED = ("(ACCESS_DENIED)", "(READONLY)")


def spans():
    return decode_traces(
        trace_request([stream_span(7, 7, side="client", offsets_ms=[0, 20], tokens=[1, 1])]),
        tenant="t",
        stall_threshold_us=400_000,
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


def outcome(action: Callable[[Client], object], client: Client) -> str:
    try:
        with store.translated_errors():
            action(client)
    except WriteError as exc:
        return "denied" if any(code in str(exc) for code in DENIED) else str(exc)
    return "ok"


def main(data: str, users_xml: str, *actions: str) -> None:
    config = Path(users_xml).with_name("config.xml")
    config.write_text(f"<clickhouse><users_config>{users_xml}</users_config></clickhouse>")
    client = clickhouse_connect.get_client(interface="chdb", path=data, chdb_options={"config-file": str(config)})
    results = {}
    for action in actions:
        if action != "create database":
            client.database = DATABASE  # the account's own first action may be to create it
        results[action] = outcome(ACTIONS[action], client)
    print(json.dumps(results))


if __name__ == "__main__":
    main(*sys.argv[1:])
