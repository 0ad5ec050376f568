"""Read-only queries for the commands (`streamscope sql`, `streamscope report`): straight on the store, or
through the collector that owns it."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from streamscope import env
from streamscope.errors import StreamscopeError

if TYPE_CHECKING:  # the server extra may not be installed where the SDK is
    from streamscope_ingest.store.sql import QueryResult

Query = Callable[[str], "QueryResult"]


@contextmanager
def opened_store(storage_dsn: str, collector_url: str | None) -> Iterator[Query]:
    """A function running read-only SQL, through a running collector when it owns the embedded store (as its
    operator, by the token in the collector's discovery file)."""
    from streamscope_collector.service import running_collector
    from streamscope_ingest import store
    from streamscope_ingest.store import sql

    target = store.parse_dsn(storage_dsn)
    running = running_collector(target)
    url = (collector_url or (running.http_url if running else "")).rstrip("/")
    if url:
        if running is not None and running.http_url.rstrip("/") == url:  # its token goes to its own collector alone
            headers = running.operator_headers
        elif given := os.environ.get(env.STREAMSCOPE_OPERATOR_TOKEN):
            headers = {"authorization": f"Bearer {given}"}
        else:
            raise StreamscopeError(
                f"no operator token for the collector at {url}: its SQL API answers the operator of the store it "
                f"owns, whose token that collector writes beside the store (collector.json); name the store with "
                f"--storage chdb://PATH, or give that token in {env.STREAMSCOPE_OPERATOR_TOKEN}"
                f"{'' if running is None else f' (the one at {target.path} is owned by {running.http_url})'}"
            )
        with httpx.Client(base_url=url, timeout=60.0, headers=headers) as http:
            yield lambda query: sql.parse_result(_through_collector(http, query))
        return
    if target.embedded:
        assert target.path is not None
        _check_embedded_store(target.path)
    client = store.connect(target, create_database=target.embedded)  # on a server, a reading account cannot
    try:
        if target.embedded and not client.command("EXISTS TABLE streams"):
            raise StreamscopeError(f"the store at {target.path} has no streamscope tables: it was never migrated")
        yield lambda query: sql.parse_result(sql.query_json(client, query))
    finally:
        client.close()


def _is_store(path: Path) -> bool:
    return (path / "metadata").is_dir()


def _check_embedded_store(path: Path) -> None:
    """Fail, saying where it looked, rather than create an empty store at a path that holds none."""
    if _is_store(path):
        return
    if _is_store(path / "chdb"):
        raise StreamscopeError(
            f"no store at {path}, but {path / 'chdb'} is one: a data directory (STREAMSCOPE_DATA_DIR) keeps its "
            f"store in chdb/, while --storage chdb://PATH names the store itself (--storage chdb://{path / 'chdb'})"
        )
    raise StreamscopeError(
        f"no store at {path}: nothing was collected there (the collector and `streamscope demo` create one; "
        "STREAMSCOPE_DATA_DIR=DIR keeps it in DIR/chdb, --storage chdb://PATH names it)"
    )


def _through_collector(http: httpx.Client, query: str) -> bytes:
    try:
        response = http.post("/api/v1/sql", json={"query": query})
    except httpx.HTTPError as exc:
        raise StreamscopeError(f"collector at {http.base_url} did not answer: {exc}") from None
    if response.status_code != 200:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        raise StreamscopeError(f"query failed: {message}")
    return response.content


def print_result(result: QueryResult, output: str) -> None:
    if output == "json":
        print(json.dumps([dict(zip(result.names, row)) for row in result.rows], default=str))
    elif output == "tsv":
        print("\t".join(result.names))
        for row in result.rows:
            print("\t".join("" if v is None else str(v) for v in row))
    else:
        from rich.table import Table

        from streamscope_cli.terminal import stdout_console

        table = Table(*result.names)
        for row in result.rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        stdout_console().print(table)
