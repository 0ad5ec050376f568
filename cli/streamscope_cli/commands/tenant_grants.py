"""`streamscope tenant-grants`: the ClickHouse users through which tenants query a server, one per tenant."""

from __future__ import annotations

from pathlib import Path

import click

from streamscope import env
from streamscope_cli.options import auth_file_option, fail_plainly, storage_option


@click.command("tenant-grants")
@auth_file_option("The collector's tokens file: one user for each tenant it names.", required=True)
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="Where to write the users.d XML for the ClickHouse server.",
)
@storage_option
@fail_plainly
def tenant_grants(auth_file: Path, output: Path, storage_dsn: str | None) -> None:
    """Write the ClickHouse users that let each tenant query its own rows, and nothing else.

    Reads the tables of the store (run it after `streamscope migrate`, and again after an upgrade adds
    tables). Prints each tenant's user and new password once, for you to hand over; the file holds only
    their hashes. Put the file into the server's users.d. The collector's SQL route does not serve tenants.

    \b
    Example:
      streamscope tenant-grants --auth-file tokens.yaml --output /etc/clickhouse-server/users.d/tenants.xml \\
          --storage clickhouse://streamscope_admin:secret@clickhouse:8123/streamscope
    """
    from streamscope_collector.auth import load_tokens
    from streamscope_ingest import store
    from streamscope_ingest.store import tenant_access

    tokens, browser_tokens = load_tokens(auth_file)
    target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
    client = store.connect(target, create_database=False)
    try:
        readables = store.call(lambda: tenant_access.tenant_readables(client))
    finally:
        client.close()
    if not readables:
        raise click.ClickException(f"no table with a tenant column in {target.database}: run streamscope migrate")
    users = tenant_access.new_users([*tokens.values(), *browser_tokens.values()])
    output.write_text(tenant_access.users_config(target.database, readables, users))
    output.chmod(0o640)
    click.echo(f"wrote {len(users)} user(s) to {output}; their passwords, shown once:")
    for user in users:
        click.echo(f"  {user.tenant}\t{user.user}\t{user.password}")
