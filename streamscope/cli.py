"""The ``streamscope`` command: thin subcommands that build a config and call one function each.

User mistakes and unavailable services end with a one-line message and exit status 1, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

try:
    import click
except ImportError:  # the base install is the SDK only
    click = None  # type: ignore[assignment]

SERVER_EXTRA_HINT = "the streamscope command needs the server extra: pip install 'streamscope[server]'"


def main() -> None:
    if click is None:
        print(SERVER_EXTRA_HINT, file=sys.stderr)
        sys.exit(1)
    _cli()(prog_name="streamscope")


def _fail_plainly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn streamscope's own errors (and unreachable ports or stores) into a one-line message."""
    from functools import wraps

    from streamscope.errors import StreamscopeError

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (StreamscopeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _cli() -> click.Group:
    from streamscope import __version__, env

    storage_option = click.option(
        "--storage",
        "storage_dsn",
        envvar=env.STREAMSCOPE_STORAGE,
        default=None,
        metavar="DSN",
        help="chdb:///abs/path (embedded, default under ~/.local/share/streamscope) or clickhouse://user:pass@host:8123/db.",
    )

    @click.group(
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
        epilog='Example: streamscope demo, then streamscope sql "SELECT side, count() FROM streams GROUP BY side"',
    )
    @click.version_option(__version__, prog_name="streamscope")
    def cli() -> None:
        """Observability for LLM token streams: record every chunk, see every stall."""

    @cli.command()
    @storage_option
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
    @click.option("--http-port", default=4318, show_default=True, type=click.IntRange(0, 65535), help="OTLP/HTTP port.")
    @click.option("--grpc-port", default=4317, show_default=True, type=click.IntRange(0, 65535), help="OTLP/gRPC port.")
    @click.option("--no-grpc", is_flag=True, help="Serve OTLP over HTTP only.")
    @click.option(
        "--max-request-mib",
        default=64,
        show_default=True,
        type=click.IntRange(1, 1024),
        help="Largest request body, after decompression.",
    )
    @_fail_plainly
    def collector(
        storage_dsn: str | None, host: str, http_port: int, grpc_port: int, no_grpc: bool, max_request_mib: int
    ) -> None:
        """Receive OTLP traces and store stream spans in ClickHouse.

        \b
        Example:
          streamscope collector --storage clickhouse://default:@localhost:8123/streamscope --host 0.0.0.0
        """
        import logging

        from collector.config import CollectorConfig
        from collector.service import Collector

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        config = CollectorConfig(
            storage_dsn=storage_dsn or env.default_storage_dsn(),
            host=host,
            http_port=http_port,
            grpc_port=None if no_grpc else grpc_port,
            max_request_bytes=max_request_mib * 1024 * 1024,
        )
        Collector(config).serve_forever()

    @cli.command()
    @storage_option
    @_fail_plainly
    def migrate(storage_dsn: str | None) -> None:
        """Create or update the tables (the collector also does this when it starts).

        \b
        Example:
          streamscope migrate --storage chdb:///var/lib/streamscope
        """
        from ingest import migrations, store

        target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
        client = store.connect(target)
        try:
            applied = migrations.migrate(client)
        finally:
            client.close()
        if applied:
            for migration in applied:
                click.echo(f"applied {migration.path.name}")
        else:
            click.echo("schema is up to date")

    @cli.command()
    @click.argument("query")
    @storage_option
    @click.option(
        "--collector-url",
        envvar=env.STREAMSCOPE_COLLECTOR_URL,
        default=None,
        metavar="URL",
        help="Query through this collector instead of opening the store.",
    )
    @click.option("--format", "output", type=click.Choice(["table", "json", "tsv"]), default="table", show_default=True)
    @_fail_plainly
    def sql(query: str, storage_dsn: str | None, collector_url: str | None, output: str) -> None:
        """Run a read-only SQL query on the store.

        While a collector owns the embedded store, the query goes through its HTTP API.

        \b
        Example:
          streamscope sql "SELECT service, quantileExact(0.99)(gap_p99_us) FROM streams GROUP BY service"
        """
        from streamscope._internal.sql_command import print_result, run_query

        print_result(run_query(query, storage_dsn or env.default_storage_dsn(), collector_url), output)

    @cli.command()
    @storage_option
    @click.option("--streams", default=200, show_default=True, type=click.IntRange(1, 100_000))
    @click.option("--concurrency", default=32, show_default=True, type=click.IntRange(1, 1024))
    @click.option(
        "--encoding",
        type=click.Choice(["packed", "events"]),
        default="packed",
        show_default=True,
        help="How the chunk timeline travels on the span.",
    )
    @click.option("--seed", type=int, default=None, help="Seed the demo engine's randomness.")
    @_fail_plainly
    def demo(storage_dsn: str | None, streams: int, concurrency: int, encoding: str, seed: int | None) -> None:
        """Stream from a local jittery engine, record both sides, and print the distributions.

        \b
        Example:
          streamscope demo --streams 500 --concurrency 64
        """
        from streamscope.demo.runner import DemoConfig, run_demo

        run_demo(
            DemoConfig(
                streams=streams,
                concurrency=concurrency,
                storage_dsn=storage_dsn or env.default_storage_dsn(),
                encoding=encoding,  # type: ignore[arg-type]
                seed=seed,
            )
        )

    return cli


if __name__ == "__main__":
    main()
