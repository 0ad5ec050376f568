"""`streamscope chat`: the demo chat page alone, against a collector that is already running."""

from __future__ import annotations

import click

from streamscope import env
from streamscope_cli.options import collector_option, fail_plainly


@click.command()
@collector_option("Collector that receives the engine's server spans.")
@click.option(
    "--page-collector",
    "page_collector_url",
    default=None,
    metavar="URL",
    help="The collector as browsers reach it, for the page's spans [default: --collector].",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
@click.option(
    "--browser-token", envvar=env.STREAMSCOPE_BROWSER_TOKEN, default=None, help="The collector's public token."
)
@fail_plainly
def chat(collector_url: str, page_collector_url: str | None, host: str, port: int, browser_token: str | None) -> None:
    """Serve the demo chat page: a simulated engine's answers, timed to the screen by the browser snippet.

    The collector must let the page's origin in (streamscope collector --cors-origin http://127.0.0.1:8080).
    Add ?render_ms=700&render_every=25 to the page's URL to make it a slow renderer, or ?block_ms=500&block_at=20
    to keep its main thread busy with other work for 500 ms after the 20th chunk.

    \b
    Example:
      streamscope chat --collector http://127.0.0.1:4318 --port 8080
    """
    from streamscope_cli.demo.chat import serve_chat, start_chat

    chat = start_chat(
        collector_url, page_collector_url=page_collector_url, browser_token=browser_token, host=host, port=port
    )
    serve_chat(chat, announce=click.echo)
