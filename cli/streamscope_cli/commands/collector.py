"""`streamscope collector`: the long-running receiver; every knob of its config is an option here."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from streamscope import env
from streamscope_cli.options import auth_file_option, fail_plainly, max_request_mib_option, storage_option

if TYPE_CHECKING:  # the command module stays light until it runs
    from streamscope_ingest.durability.spool import FsyncPolicy


@click.command()
@storage_option
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--http-port", default=4318, show_default=True, type=click.IntRange(0, 65535), help="OTLP/HTTP port.")
@click.option("--grpc-port", default=4317, show_default=True, type=click.IntRange(0, 65535), help="OTLP/gRPC port.")
@click.option("--no-grpc", is_flag=True, help="Serve OTLP over HTTP only.")
@click.option(
    "--query-storage",
    "query_storage_dsn",
    envvar=env.STREAMSCOPE_QUERY_STORAGE,
    default=None,
    help="The same store as an account that may read, for lookups and attribution [default: --storage].",
)
@click.option(
    "--no-migrate",
    is_flag=True,
    help="Do not create or update the tables (run `streamscope migrate` as an account that may).",
)
@click.option(
    "--no-attribution",
    is_flag=True,
    help="Do not run the attribution job here. Collectors over one store share it by a lease (on a cluster, its "
    "claims are keys in Keeper), so every collector may run it.",
)
@click.option(
    "--attribution-interval-s",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    help="Attribute settled streams' stalls this often.",
)
@click.option(
    "--attribution-settle-s",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    help="Attribute a stream this long after it was stored: its other sides (server, gateway, browser) and the "
    "node's events arrive in other requests, seconds apart.",
)
@max_request_mib_option("Largest request body, after decompression.")
@click.option(
    "--max-inflight-mib",
    default=256,
    show_default=True,
    type=click.IntRange(1, 65536),
    help="Memory for request bodies and rows on their way to the spool; as much again bounds their parsing.",
)
@click.option(
    "--max-memory-mib",
    type=click.IntRange(1, 1 << 30),
    default=None,
    envvar=env.STREAMSCOPE_MAX_MEMORY_MIB,
    help="The collector's resident memory at most; requests are refused (429) rather than let it pass "
    "(default: its memory once started, plus twice --max-inflight-mib, the store's working set and an attribution "
    "pass; docs/operations.md).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    envvar=env.STREAMSCOPE_CORS_ORIGINS,
    help="An origin whose pages may send browser spans (repeatable; * for any; env: comma-separated).",
)
@click.option(
    "--browser-token",
    envvar=env.STREAMSCOPE_BROWSER_TOKEN,
    default=None,
    help="Public token pages must send with browser spans (default: the browser route is open).",
)
@auth_file_option("YAML of bearer tokens → tenants; turns authentication on (see docs/operations.md).")
@click.option(
    "--alert-webhook-token",
    envvar=env.STREAMSCOPE_ALERT_WEBHOOK_TOKEN,
    default=None,
    help="The token Grafana's contact point sends to /api/v1/alerts, the only one it takes (default: the webhook "
    "is open while authentication is off, closed while it is on).",
)
@click.option(
    "--spool-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where accepted batches wait for the store [default: beside an embedded store].",
)
@click.option(
    "--spool-max-mib",
    default=2048,
    show_default=True,
    type=click.IntRange(1),
    help="Spool size past which requests are answered 503.",
)
@click.option(
    "--spool-fsync",
    type=click.Choice(["always", "never"]),
    default="always",
    show_default=True,
    help="always: survives a machine crash; never: a process crash.",
)
@click.option(
    "--store-wait-s",
    type=click.FloatRange(min=0),
    default=0.0,
    show_default=True,
    help="After a request is in the spool, also wait up to this long for the store before answering, for "
    "senders that read their own writes from the store directly (0: answer once spooled).",
)
@click.option(
    "--insert-interval-s",
    type=click.FloatRange(min=0),
    default=1.0,
    show_default=True,
    help="Start inserts into the store at most this often; what arrives meanwhile joins the next one (fewer, larger "
    "inserts cost the store less). A query through the collector, or a request waiting for the store, does not wait.",
)
@click.option(
    "--tenant-rate-mib",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="MiB per second each tenant may send, sustained (default: no limit).",
)
@fail_plainly
def collector(
    storage_dsn: str | None,
    host: str,
    http_port: int,
    grpc_port: int,
    no_grpc: bool,
    query_storage_dsn: str | None,
    no_migrate: bool,
    no_attribution: bool,
    attribution_interval_s: float,
    attribution_settle_s: float,
    max_request_mib: int,
    max_inflight_mib: int,
    max_memory_mib: int | None,
    cors_origins: tuple[str, ...],
    browser_token: str | None,
    auth_file: Path | None,
    alert_webhook_token: str | None,
    spool_dir: Path | None,
    spool_max_mib: int,
    spool_fsync: FsyncPolicy,
    store_wait_s: float,
    insert_interval_s: float,
    tenant_rate_mib: float | None,
) -> None:
    """Receive OTLP traces and store stream spans in ClickHouse.

    \b
    Example:
      streamscope collector --storage clickhouse://default:@localhost:8123/streamscope --host 0.0.0.0
    """
    import logging

    from streamscope_collector.auth import load_tokens
    from streamscope_collector.config import CollectorConfig
    from streamscope_collector.service import Collector

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    tokens, browser_tokens = load_tokens(auth_file) if auth_file else ({}, {})
    config = CollectorConfig(
        storage_dsn=storage_dsn or env.default_storage_dsn(),
        query_storage_dsn=query_storage_dsn,
        migrate=not no_migrate,
        attribution_interval_s=None if no_attribution else attribution_interval_s,
        attribution_settle_s=attribution_settle_s,
        host=host,
        http_port=http_port,
        grpc_port=None if no_grpc else grpc_port,
        max_request_bytes=max_request_mib * 1024 * 1024,
        max_inflight_bytes=max_inflight_mib * 1024 * 1024,
        max_memory_bytes=max_memory_mib * 1024 * 1024 if max_memory_mib else None,
        cors_origins=tuple(o.strip() for value in cors_origins for o in value.split(",") if o.strip()),
        browser_token=browser_token,
        tokens=tokens,
        browser_tokens=browser_tokens,
        alert_webhook_token=alert_webhook_token,
        spool_dir=spool_dir,
        spool_max_bytes=spool_max_mib * 1024 * 1024,
        spool_fsync=spool_fsync,
        store_wait_s=store_wait_s,
        insert_interval_s=insert_interval_s,
        tenant_bytes_per_s=tenant_rate_mib * 1024 * 1024 if tenant_rate_mib else None,
    )
    Collector(config).serve_forever()
