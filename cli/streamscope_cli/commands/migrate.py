"""`streamscope migrate`: create or update the tables apart from the collector, as an account that may."""

from __future__ import annotations

import click

from streamscope import env
from streamscope_cli.options import fail_plainly, storage_option


@click.command()
@storage_option
@fail_plainly
def migrate(storage_dsn: str | None) -> None:
    """Create or update the tables (the collector also does this when it starts).

    \b
    Example:
      streamscope migrate --storage chdb:///var/lib/streamscope
    """
    from streamscope_ingest import store
    from streamscope_ingest.store import migrations

    target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
    client = store.connect(target)
    try:
        applied = migrations.migrate(client)
    finally:
        client.close()
    if applied:
        for migration in applied:
            click.echo(f"applied {migration.path.name}")
    else:
        click.echo("schema is up to date")
