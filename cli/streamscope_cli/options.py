"""Options several subcommands share, so each is spelled (help, envvar, metavar) the same everywhere, and the
decorator that keeps user mistakes to one line."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from pathlib import Path
from typing import Any

import click

from streamscope import env
from streamscope.errors import StreamscopeError

storage_option = click.option(
    "--storage",
    "storage_dsn",
    envvar=env.STREAMSCOPE_STORAGE,
    default=None,
    metavar="DSN",
    help="chdb:///abs/path (embedded, default under ~/.local/share/streamscope) or clickhouse://user:pass@host:8123/db.",
)

collector_url_option = click.option(
    "--collector-url",
    envvar=env.STREAMSCOPE_COLLECTOR_URL,
    default=None,
    metavar="URL",
    help="Query through the collector at this URL, the one that owns --storage's embedded store (found without "
    "it while that collector runs); one on another machine takes its operator token from "
    f"{env.STREAMSCOPE_OPERATOR_TOKEN}.",
)


def collector_option(help: str, default: str | None = "http://127.0.0.1:4318") -> Callable[[Any], Any]:
    """``--collector``: the OTLP/HTTP base URL a command sends to; each command says what it sends."""
    return click.option(
        "--collector", "collector_url", default=default, show_default=bool(default), metavar="URL", help=help
    )


def max_request_mib_option(help: str) -> Callable[[Any], Any]:
    """``--max-request-mib``: the largest request body a server of streamscope's reads (64 MiB by default)."""
    return click.option("--max-request-mib", default=64, show_default=True, type=click.IntRange(1, 1024), help=help)


def auth_file_option(help: str, required: bool = False) -> Callable[[Any], Any]:
    """``--auth-file``: the collector's YAML of bearer tokens and their tenants (docs/operations.md)."""
    return click.option(
        "--auth-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar=env.STREAMSCOPE_AUTH_FILE,
        required=required,
        default=None,
        help=help,
    )


def fail_plainly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn streamscope's own errors (and unreachable ports or stores) into a one-line message."""

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (StreamscopeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper
