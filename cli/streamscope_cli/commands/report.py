"""`streamscope report`: the dashboards' panels without Grafana, in the terminal and as one HTML file."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from streamscope import env
from streamscope.semconv import STREAMSCOPE_TRANSPORT_VALUES
from streamscope_cli.options import collector_url_option, fail_plainly, storage_option
from streamscope_dashboards.panels.common import SIDES  # light: no query engine behind it

if TYPE_CHECKING:
    from streamscope_ingest.analysis.smoothing import Buffer


@click.command()
@storage_option
@collector_url_option
@click.option("--since", default="1h", show_default=True, help="How far back: 30s, 15m, 2h, 7d.")
@click.option("--from", "start", type=click.DateTime(), default=None, help="Range start (UTC); overrides --since.")
@click.option("--to", "end", type=click.DateTime(), default=None, help="Range end (UTC); default now.")
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also write the report, with its charts, as one self-contained HTML file here.",
)
@click.option("--tenant", multiple=True, help="Only these tenants (repeatable), as the dashboards' variables.")
@click.option("--service", multiple=True, help="Only these services (repeatable).")
@click.option("--provider", multiple=True, help="Only these providers (repeatable).")
@click.option("--model", multiple=True, help="Only these models (repeatable).")
@click.option("--route", multiple=True, help="Only streams their server served on these routes (repeatable).")
@click.option(
    "--transport",
    multiple=True,
    type=click.Choice(STREAMSCOPE_TRANSPORT_VALUES),
    help="Only streams carried so (repeatable): sse, chunked (NDJSON over HTTP), websocket, grpc.",
)
@click.option(
    "--side",
    type=click.Choice(SIDES),
    default=SIDES[0],
    show_default=True,
    help="Whose view of the streams: what the client received, what the server sent, what the browser drew.",
)
@click.option(
    "--smoothing",
    metavar="DEPTH_MS[,RATE_MS]",
    default=None,
    help="Also replay the range's streams behind a smoothing buffer: nothing shown until DEPTH_MS after the "
    "first chunk, then one chunk per RATE_MS (default: each stream's own median gap).",
)
@fail_plainly
def report(
    storage_dsn: str | None,
    collector_url: str | None,
    since: str,
    start: datetime | None,
    end: datetime | None,
    html_path: Path | None,
    side: str,
    smoothing: str | None,
    **variables: tuple[str, ...],
) -> None:
    """Print stream health for a time range and write an HTML report with charts.

    The same panels as the Grafana dashboards: ITL heatmap, per-stream p99 histogram, stalls by cause,
    tokens per chunk, attribution, stream shape, model texture, quality indices, chunk economics,
    chunking changes, cancellation tax, and one stalled stream drawn client against server.

    \b
    Examples:
      streamscope report --since 15m --model gpt-4o --html /tmp/report.html
      streamscope report --since 1h --smoothing 300,33
    """
    from rich.console import Console

    from streamscope_cli.query import opened_store
    from streamscope_dashboards.report import build_report, parse_duration
    from streamscope_dashboards.report_html import write_html
    from streamscope_dashboards.report_terminal import print_report
    from streamscope_ingest.blocks.stalls import StallRule

    end = end.replace(tzinfo=UTC) if end else datetime.now(UTC)
    if start is None:
        try:
            start = end - parse_duration(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
    start = start.replace(tzinfo=UTC)
    if start >= end:
        raise click.BadParameter("the range must start before it ends", param_hint="--from/--to")
    buffer = _buffer(smoothing)
    chosen = {**variables, "side": (side,)}
    console = Console(stderr=True)
    with (
        console.status("opening the store") as status,
        opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as run,
    ):
        built = build_report(
            run,
            start,
            end,
            StallRule.configured().threshold_us,
            chosen,
            lambda title: status.update(f"reading {title}"),
        )
        if buffer is not None:
            from streamscope_cli.smoothing_report import smoothing_panel

            status.update("replaying the streams through the smoothing buffer")
            built = built.with_panel(smoothing_panel(run, built.ctx, chosen, buffer), after="smoothing_trade")
    print_report(built, Console())
    if html_path is None:
        click.echo("The charts (ITL heatmap, per-stream p99, stalls by cause, one stalled stream): add --html PATH.")
        return
    write_html(built, html_path)
    click.echo(f"HTML report: {html_path.resolve()}")


def _buffer(text: str | None) -> Buffer | None:
    if text is None:
        return None
    from streamscope_ingest.analysis.smoothing import Buffer

    try:
        return Buffer.parse(text)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--smoothing") from None
