"""`streamscope migrate`: create or update the tables apart from the collector, as an account that may."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, TypeVar

import click

from streamscope import env
from streamscope.errors import RetryableWriteError
from streamscope_cli.options import fail_plainly, storage_option

if TYPE_CHECKING:
    from streamscope_ingest.store.cluster import Statement

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
@click.option(
    "--cluster",
    metavar="NAME",
    help="Make the tables on this ClickHouse cluster (remote_servers): replicated, behind distributed tables.",
)
@click.option(
    "--retention-defaults",
    is_flag=True,
    help="Then give every table without a TTL its default retention (see `streamscope retention`).",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the statements every migration runs (on --cluster, rewritten for it) instead of running them.",
)
@fail_plainly
def migrate(
    storage_dsn: str | None, wait_s: float, cluster: str | None, retention_defaults: bool, print_only: bool
) -> None:
    """Create or update the tables (the collector also does this when it starts).

    \b
    Example:
      streamscope migrate --storage chdb:///var/lib/streamscope
      streamscope migrate --storage clickhouse://admin:secret@clickhouse:8123/streamscope --wait-s 120
      streamscope migrate --storage clickhouse://admin:secret@clickhouse:8123/streamscope --retention-defaults
      streamscope migrate --storage clickhouse://admin:secret@clickhouse-1:8123/streamscope --cluster streamscope
      streamscope migrate --cluster streamscope --print
    """
    from streamscope_ingest import store
    from streamscope_ingest.store import migrations, retention

    if print_only:
        every = migrations.available()
        for migration, statements in migrations.planned(every, every, cluster):
            click.echo(f"-- {migration.path.name}")
            echo_statements(statements)
        return
    target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
    if cluster and target.engine != "server":
        raise click.ClickException("--cluster needs a ClickHouse server (clickhouse://...), not the embedded engine")
    client = within(wait_s, lambda: store.connect(target))
    try:
        applied = migrations.migrate(client, cluster=cluster)
        if applied:
            for migration in applied:
                click.echo(f"applied {migration.path.name}")
        else:
            click.echo("schema is up to date")
        if retention_defaults:
            given = retention.missing_defaults(retention.current(client, cluster=cluster is not None))
            retention.apply(client, given, cluster=cluster)
            for table, days in given.items():
                click.echo(f"{table} keeps {days} days")
    finally:
        client.close()


def echo_statements(statements: Iterable[Statement]) -> None:
    """Print statements for review, each with the settings it runs with."""
    for statement in statements:
        settings = " ".join(f"{name}={value}" for name, value in statement.settings.items())
        click.echo(f"{statement.sql};" + (f"  -- with {settings}" if settings else ""))


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
