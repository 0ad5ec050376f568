"""`streamscope sql`: run a read-only query on the store, or through the collector that owns it."""

from __future__ import annotations

import json
import sys
from typing import Any

import httpx

from streamscope.errors import StreamscopeError


def run_query(query: str, storage_dsn: str, collector_url: str | None) -> tuple[list[str], list[list[Any]]]:
    from collector.service import running_collector_url
    from ingest import sql, store

    target = store.parse_dsn(storage_dsn)
    url = collector_url or running_collector_url(target)
    if url:
        return _through_collector(url, query)
    client = store.connect(target)
    try:
        return sql.parse_result(sql.query_json(client, query))
    finally:
        client.close()


def _through_collector(url: str, query: str) -> tuple[list[str], list[list[Any]]]:
    from ingest import sql

    try:
        response = httpx.post(f"{url.rstrip('/')}/api/v1/sql", json={"query": query}, timeout=60.0)
    except httpx.HTTPError as exc:
        raise StreamscopeError(f"collector at {url} did not answer: {exc}") from None
    if response.status_code != 200:
        try:
            message = response.json().get("error", response.text)
        except ValueError:
            message = response.text
        raise StreamscopeError(f"query failed: {message}")
    return sql.parse_result(response.content)


def print_result(result: tuple[list[str], list[list[Any]]], output: str) -> None:
    names, rows = result
    if output == "json":
        print(json.dumps([dict(zip(names, row)) for row in rows], default=str))
    elif output == "tsv":
        print("\t".join(names))
        for row in rows:
            print("\t".join("" if v is None else str(v) for v in row))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(*names)
        for row in rows:
            table.add_row(*("NULL" if v is None else str(v) for v in row))
        Console(file=sys.stdout).print(table)
