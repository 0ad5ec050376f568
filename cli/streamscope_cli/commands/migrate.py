"""`streamscope migrate`: create or update the tables apart from the collector, as an account that may."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import click

from streamscope import env
from streamscope.errors import RetryableWriteError
from streamscope_cli.options import fail_plainly, storage_option

T = TypeVar("T")


@click.command()
@storage_option
@click.option(
    "--wait-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="Keep trying this long to reach a store that does not answer yet (a server still starting).",
)
@fail_plainly
def migrate(storage_dsn: str | None, wait_s: float) -> None:
    """Create or update the tables (the collector also does this when it starts).

    \b
    Example:
      streamscope migrate --storage chdb:///var/lib/streamscope
      streamscope migrate --storage clickhouse://admin:secret@clickhouse:8123/streamscope --wait-s 120
    """
    from streamscope_ingest import store
    from streamscope_ingest.store import migrations

    target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
    client = within(wait_s, lambda: store.connect(target))
    try:
        applied = migrations.migrate(client)
    finally:
        client.close()
    if applied:
        for migration in applied:
            click.echo(f"applied {migration.path.name}")
    else:
        click.echo("schema is up to date")


def within(
    wait_s: float,
    attempt: Callable[[], T],
    *,
    every_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``attempt()``, tried again every ``every_s`` while the store is unavailable, for up to ``wait_s``; then its
    error, saying how long it was given."""
    deadline = clock() + wait_s
    while True:
        try:
            return attempt()
        except RetryableWriteError as exc:
            if clock() >= deadline:
                raise RetryableWriteError(f"{exc} (tried for {wait_s:g} s)") from None
            click.echo(f"waiting for the store: {exc}", err=True)
            sleep(every_s)
