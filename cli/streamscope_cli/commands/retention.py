"""`streamscope retention`: how long each table keeps its rows; show the TTLs, or set them."""

from __future__ import annotations

import click

from streamscope import env
from streamscope_cli.commands.migrate import echo_statements, within
from streamscope_cli.options import fail_plainly, storage_option


def _days(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, int]:
    days = {}
    for value in values:
        table, _, kept = value.partition("=")
        if not kept.isdigit():
            raise click.BadParameter(f"{value!r}: give TABLE=DAYS, like chunk_arrays=7 (0 keeps everything)")
        days[table] = int(kept)
    return days


@click.command()
@storage_option
@click.option(
    "--set",
    "days",
    metavar="TABLE=DAYS",
    multiple=True,
    callback=_days,
    help="Keep TABLE's rows this many days (0: keep everything). Repeat for more tables.",
)
@click.option("--defaults", is_flag=True, help="Give every table that has no TTL yet its default.")
@click.option("--cluster", metavar="NAME", help="The tables were made with `migrate --cluster NAME`.")
@click.option("--print", "print_only", is_flag=True, help="Print the statements instead of running them.")
@click.option("--wait-s", type=click.FloatRange(min=0), default=0.0, help="Wait this long for the store.")
@fail_plainly
def retention(
    storage_dsn: str | None,
    days: dict[str, int],
    defaults: bool,
    cluster: str | None,
    print_only: bool,
    wait_s: float,
) -> None:
    """Show how long each table keeps its rows, or set it (a TTL in days on the table's time column).

    Without --set or --defaults, lists each table's TTL and its default. Expired days are dropped as whole
    partitions in the background.

    \b
    Example:
      streamscope retention --storage clickhouse://admin:secret@clickhouse:8123/streamscope
      streamscope retention --defaults --set chunk_arrays=7
      streamscope retention --set alerts=0
    """
    from streamscope_ingest import store
    from streamscope_ingest.store import retention as tables

    if print_only and not defaults:  # nothing to read from the store first
        echo_statements(tables.planned_statements(days, cluster))
        return
    target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
    client = within(wait_s, lambda: store.connect(target, create_database=False))
    try:
        kept = tables.current(client, cluster=cluster is not None)
        wanted = {**(tables.missing_defaults(kept) if defaults else {}), **days}
        if print_only:
            echo_statements(tables.planned_statements(wanted, cluster))
            return
        if wanted:
            tables.apply(client, wanted, cluster=cluster)
            kept = tables.current(client, cluster=cluster is not None)
    finally:
        client.close()
    for retained in tables.RETAINED:
        if retained.table in kept:
            click.echo(f"{retained.table:<18} {_kept(kept[retained.table]):<22} default {retained.default_days} days")


def _kept(days: int | None) -> str:
    if days is None:
        return "a TTL set elsewhere"
    return "everything" if days == 0 else f"{days} days"
