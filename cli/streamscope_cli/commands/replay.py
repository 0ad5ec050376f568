"""`streamscope replay`: serve one recorded stream's timing again as SSE."""

from __future__ import annotations

import click

from streamscope import env
from streamscope_cli.options import collector_url_option, fail_plainly, storage_option
from streamscope_dashboards.panels.common import SIDES  # light: no query engine behind it


@click.command()
@click.argument("trace_id")
@storage_option
@collector_url_option
@click.option(
    "--side", type=click.Choice(SIDES), default="client", show_default=True, help="Whose recording of the stream."
)
@click.option("--span-id", default=None, help="Which stream, where the trace holds several on that side.")
@click.option(
    "--pause",
    "pause_texts",
    metavar="INDEX:MS",
    multiple=True,
    help="Hold the stream MS milliseconds before chunk INDEX (0 is the first chunk); repeatable.",
)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8300, show_default=True, type=click.IntRange(0, 65535))
@fail_plainly
def replay(
    trace_id: str,
    storage_dsn: str | None,
    collector_url: str | None,
    side: str,
    span_id: str | None,
    pause_texts: tuple[str, ...],
    host: str,
    port: int,
) -> None:
    """Replay one recorded stream, at its recorded timing, as SSE from a local endpoint.

    Every request gets the whole stream from the start: POST /v1/chat/completions for OpenAI-compatible clients,
    GET /v1/replay for a page's EventSource. The text is placeholder ASCII of each chunk's recorded length.

    \b
    Examples:
      streamscope replay 4bf92f3577b34da6a3ce929d0e0e4736
      streamscope replay 4bf92f3577b34da6a3ce929d0e0e4736 --pause 20:2000 --port 8301
    """
    from streamscope_cli.query import opened_store
    from streamscope_cli.replay import Pause, load_recording, serve_replay

    try:
        pauses = [Pause.parse(text) for text in pause_texts]
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--pause") from None
    with opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as run:
        recording = load_recording(run, trace_id.lower(), side, span_id.lower() if span_id else None)
    serve_replay(recording, pauses, host, port, announce=click.echo)
