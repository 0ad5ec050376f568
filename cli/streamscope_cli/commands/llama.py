"""`streamscope llama`: llama.cpp's real ``llama-server``, built here from source, serving generated tiny models."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from streamscope_cli.options import fail_plainly


@click.group()
def llama() -> None:
    """A real engine to observe: llama.cpp's llama-server on tiny random-weight models (nothing downloaded)."""


def _announce_every() -> float:
    """Progress every 2 s on a terminal; a log (CI) gets a line every 15 s."""
    return 2.0 if sys.stdout.isatty() else 15.0


@llama.command("build")
@fail_plainly
def build() -> None:
    """Build llama-server (minutes, once per version, at normal priority) and write the models; print where they
    are.

    \b
    Example:
      streamscope llama build
    """
    from streamscope_cli.llama.build import ensure_server
    from streamscope_cli.llama.models import SPECS, ensure_model

    started = time.monotonic()
    click.echo(f"llama-server: {ensure_server(click.echo, _announce_every(), niceness=0)}")
    for name, spec in SPECS.items():
        click.echo(f"model {name}: {ensure_model(spec, click.echo)}")
    click.echo(f"ready in {time.monotonic() - started:.1f} s")


@llama.command("serve")
@click.option("--model", type=click.Choice(["tiny", "larger"]), default="larger", show_default=True)
@click.option("--draft", is_flag=True, help="Speculative decoding with the draft model (with --model larger).")
@click.option("--parallel", default=1, show_default=True, type=click.IntRange(1, 64), help="Server slots.")
@click.option("--context", default=4096, show_default=True, type=click.IntRange(64), help="Context, all slots.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free one.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), default=None, help="The server's output.")
@fail_plainly
def serve(model: str, draft: bool, parallel: int, context: int, host: str, port: int, log: Path | None) -> None:
    """Serve llama-server in the foreground (OpenAI API, /metrics, /slots) until Ctrl-C.

    \b
    Example:
      streamscope llama serve --parallel 4 --draft --port 8080
    """
    from streamscope_cli.llama.build import ensure_server
    from streamscope_cli.llama.models import DRAFT, SPECS, ensure_model
    from streamscope_cli.llama.server import LlamaServer, ServerOptions

    if draft and model != "larger":
        raise click.UsageError("the draft model drafts for --model larger")
    binary = ensure_server(click.echo, _announce_every())
    options = ServerOptions(
        model=ensure_model(SPECS[model], click.echo),
        draft=ensure_model(DRAFT, click.echo) if draft else None,
        parallel=parallel,
        context=context,
        host=host,
        port=port,
    )
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a TERM stops the server too, as Ctrl-C does
    with LlamaServer(binary, options, log=log) as server:
        click.echo(f"llama-server ({model}{' with draft' if draft else ''}) on {server.url}/v1, log {server.log}")
        try:
            server.wait()
        except KeyboardInterrupt:
            click.echo("stopping")
