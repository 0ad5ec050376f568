"""`streamscope demo`: the whole pipeline on one machine, for a first look without any setup."""

from __future__ import annotations

import click

from streamscope import env
from streamscope_cli.options import fail_plainly, storage_option


@click.command()
@storage_option
@click.option("--scenario", default="mixed", show_default=True, help="A shipped scenario name or a YAML file.")
@click.option("--streams", type=click.IntRange(1, 100_000), default=None, help="Override the scenario's count.")
@click.option(
    "--encoding",
    type=click.Choice(["packed", "events"]),
    default="packed",
    show_default=True,
    help="How the chunk timeline travels on the span.",
)
@click.option("--chat", is_flag=True, help="Then serve the demo chat page until Ctrl-C (browser spans too).")
@click.option("--chat-port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@fail_plainly
def demo(
    storage_dsn: str | None, scenario: str, streams: int | None, encoding: str, chat: bool, chat_port: int
) -> None:
    """Run a scenario against an embedded collector and print the stream-timing distributions.

    \b
    Example:
      streamscope demo --scenario kv-pressure
      streamscope demo --chat     # then open http://127.0.0.1:8080/
    """
    from streamscope_cli.demo.runner import DemoConfig, run_demo
    from streamscope_cli.terminal import stdout_console

    run_demo(
        DemoConfig(
            scenario=scenario,
            streams=streams,
            storage_dsn=storage_dsn or env.default_storage_dsn(),
            encoding=encoding,  # type: ignore[arg-type]
            chat_port=chat_port if chat else None,
        ),
        stdout_console(),
    )
