"""`streamscope sql`: one read-only query, on the store or through the collector that owns it."""

from __future__ import annotations

import sys

import click

from streamscope import env
from streamscope_cli.options import collector_url_option, fail_plainly, storage_option


@click.command()
@click.argument("query")
@storage_option
@collector_url_option
@click.option(
    "--format",
    "output",
    type=click.Choice(["table", "json", "tsv"]),
    help="Output format. [default: table on a terminal, tsv when piped]",
)
@fail_plainly
def sql(query: str, storage_dsn: str | None, collector_url: str | None, output: str | None) -> None:
    """Run a read-only SQL query on the store.

    While a collector owns the embedded store, the query goes through its HTTP API. Piped, the output is TSV
    unless --format says otherwise, and no format cuts a value to fit a width.

    \b
    Example:
      streamscope sql "SELECT service, quantileExact(0.99)(gap_p99_us) FROM streams GROUP BY service"
    """
    from streamscope_cli.query import opened_store, print_result

    with opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as run:
        print_result(run(query), output or ("table" if sys.stdout.isatty() else "tsv"))
