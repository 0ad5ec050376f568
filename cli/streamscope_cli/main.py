"""The ``streamscope`` command: thin subcommands that build a config and call one function each.

User mistakes and unavailable services end with a one-line message and exit status 1, never a traceback.
Each subcommand lives in its own module under ``streamscope_cli.commands``; this only gathers them.
"""

from __future__ import annotations

import click

from streamscope import __version__
from streamscope_cli.commands.bench import bench
from streamscope_cli.commands.chat import chat
from streamscope_cli.commands.collector import collector
from streamscope_cli.commands.compare import compare
from streamscope_cli.commands.dashboards import dashboards
from streamscope_cli.commands.demo import demo
from streamscope_cli.commands.engine import engine
from streamscope_cli.commands.eval import eval_command
from streamscope_cli.commands.gateway import gateway
from streamscope_cli.commands.gpu_agent import gpu_agent
from streamscope_cli.commands.llama import llama
from streamscope_cli.commands.load import load
from streamscope_cli.commands.migrate import migrate
from streamscope_cli.commands.proxy import proxy
from streamscope_cli.commands.replay import replay
from streamscope_cli.commands.report import report
from streamscope_cli.commands.retention import retention
from streamscope_cli.commands.spool import spool
from streamscope_cli.commands.sql import sql
from streamscope_cli.commands.tenant_grants import tenant_grants


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
    epilog='Example: streamscope demo, then streamscope sql "SELECT side, count() FROM streams GROUP BY side"',
)
@click.version_option(__version__, prog_name="streamscope")
def cli() -> None:
    """Observability for LLM token streams: record every chunk, see every stall."""


for _command in (
    collector,
    migrate,
    retention,
    sql,
    tenant_grants,
    spool,
    demo,
    chat,
    load,
    engine,
    llama,
    proxy,
    gateway,
    eval_command,
    bench,
    compare,
    report,
    replay,
    gpu_agent,
    dashboards,
):
    cli.add_command(_command)


def main() -> None:
    """The `streamscope.cli` entry point: the SDK's `streamscope` script hands over to this."""
    cli(prog_name="streamscope")


if __name__ == "__main__":
    main()
