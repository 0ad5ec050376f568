"""`streamscope spool replay`: write the batches a collector's spool keeps in quarantine to the store again."""

from __future__ import annotations

from pathlib import Path

import click

from streamscope import env
from streamscope_cli.options import fail_plainly, storage_option


@click.group()
def spool() -> None:
    """The collector's spool: what it accepted and has not stored."""


@spool.command("replay")
@storage_option
@click.option(
    "--spool-dir",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="The collector's spool [default: the one `streamscope collector` uses for --storage].",
)
@fail_plainly
def replay(storage_dsn: str | None, spool_dir: Path | None) -> None:
    """Write the quarantined batches to the store, once what refused them is fixed.

    Every batch is tried, in turn: one stored leaves the quarantine; one refused again, or that cannot be read,
    stays, and the reason is printed. Each goes in under its own token, so running this twice stores nothing
    twice. While a collector owns an embedded store, stop it first.

    \b
    Example:
      streamscope spool replay --storage clickhouse://streamscope_writer:…@localhost:8123/streamscope
    """
    from streamscope_collector.config import CollectorConfig
    from streamscope_collector.service import Collector, running_collector
    from streamscope_ingest import store
    from streamscope_ingest.durability.replay import replay_quarantined
    from streamscope_ingest.store.writer import ClickHouseWriter

    dsn = storage_dsn or env.default_storage_dsn()
    target = store.parse_dsn(dsn)
    if running_collector(target) is not None:
        raise click.ClickException("a collector owns this embedded store: stop it, then replay")
    directory = spool_dir or Collector(CollectorConfig(storage_dsn=dsn)).spool_dir
    client = store.connect(target, create_database=False)
    replayed = []
    try:
        for batch in replay_quarantined(directory, ClickHouseWriter(client)):
            outcome = f"refused again: {batch.error}" if batch.error else "stored"
            click.echo(f"{batch.name}: {outcome} (quarantined because {batch.kept_for})")
            replayed.append(batch)
    finally:
        client.close()
    refused = sum(1 for batch in replayed if batch.error)
    if refused:
        raise click.ClickException(f"{refused} of {len(replayed)} quarantined batch(es) refused again; kept")
    click.echo(f"{len(replayed)} quarantined batch(es) stored")
