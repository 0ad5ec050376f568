"""Environment variables streamscope reads, resolved once: explicit argument, then variable, then default.

The standard OpenTelemetry variables (``OTEL_SERVICE_NAME``, ``OTEL_EXPORTER_OTLP_ENDPOINT``,
``OTEL_EXPORTER_OTLP_PROTOCOL``, ``OTEL_EXPORTER_OTLP_HEADERS``, ...) keep their usual meaning in the SDK.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Final

STREAMSCOPE_STORAGE: Final = "STREAMSCOPE_STORAGE"
"""Storage DSN: ``chdb:///abs/path`` (embedded, the default) or ``clickhouse://user:pass@host:8123/db``."""

STREAMSCOPE_QUERY_STORAGE: Final = "STREAMSCOPE_QUERY_STORAGE"
"""The collector: the same store as another account, for what it reads (unset: the storage DSN's account)."""

STREAMSCOPE_DATA_DIR: Final = "STREAMSCOPE_DATA_DIR"
"""Directory for the embedded engine's data when no DSN is given (default ~/.local/share/streamscope)."""

STREAMSCOPE_ENCODING: Final = "STREAMSCOPE_ENCODING"
"""Chunk timeline encoding the SDK emits: ``packed`` (default) or ``events``."""

STREAMSCOPE_HOST_WATCH: Final = "STREAMSCOPE_HOST_WATCH"
"""Whether client streams watch their own host (event loop or process) to tell a late host from a late network
(streamscope.chunks.host_delay_us): on by default; ``off``, ``0``, ``false`` or ``no`` turn it off. Read when
the SDK is imported."""

STREAMSCOPE_STALL_THRESHOLD_MS: Final = "STREAMSCOPE_STALL_THRESHOLD_MS"
"""A gap longer than this many milliseconds counts as a stall in per-stream statistics (default 400)."""

STREAMSCOPE_COLLECTOR_URL: Final = "STREAMSCOPE_COLLECTOR_URL"
"""Base URL of a running collector for `streamscope sql` to query through (found automatically when it owns
the embedded store)."""

STREAMSCOPE_OPERATOR_TOKEN: Final = "STREAMSCOPE_OPERATOR_TOKEN"
"""The operator token of the collector ``--collector-url`` names, when it runs elsewhere (its ``collector.json``,
beside the store it owns, holds it): sent to that URL alone. Read from the environment only, so it stays out of
process lists and shell history."""

STREAMSCOPE_CORS_ORIGINS: Final = "STREAMSCOPE_CORS_ORIGINS"
"""The collector: origins (comma-separated, ``*`` for any) whose web pages may load the browser snippet and send
browser spans."""

STREAMSCOPE_BROWSER_TOKEN: Final = "STREAMSCOPE_BROWSER_TOKEN"
"""The collector: the public token web pages send with browser spans (unset: the browser route is open)."""

STREAMSCOPE_AUTH_FILE: Final = "STREAMSCOPE_AUTH_FILE"
"""The collector's tokens file (bearer tokens → tenants); set, it turns authentication on."""

STREAMSCOPE_ALERT_WEBHOOK_TOKEN: Final = "STREAMSCOPE_ALERT_WEBHOOK_TOKEN"
"""The collector: the token Grafana's contact point sends to the alert webhook, the only one the webhook takes
(the compose stack gives it to both)."""

STREAMSCOPE_MAX_MEMORY_MIB: Final = "STREAMSCOPE_MAX_MEMORY_MIB"
"""The collector: its resident memory at most, in MiB (``--max-memory-mib``), e.g. below its container's limit."""

GRAFANA_URL: Final = "GRAFANA_URL"
"""`streamscope dashboards push`: base URL of the Grafana to provision (the name grafana-client's from_env reads)."""

GRAFANA_TOKEN: Final = "GRAFANA_TOKEN"
"""`streamscope dashboards push`: a Grafana service account token with the Admin role."""

GRAFANA_CLICKHOUSE_PASSWORD: Final = "GRAFANA_CLICKHOUSE_PASSWORD"
"""Password of the read-only ClickHouse user `grafana`: the compose stack gives it to Grafana's provisioning, and
`streamscope dashboards push` puts it in the data source it creates."""

DEFAULT_STALL_THRESHOLD_MS: Final = 400.0
MAX_STALL_THRESHOLD_MS: Final = 4_294_967.0  # the largest gap a UInt32 of microseconds holds


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(os.environ.get(STREAMSCOPE_DATA_DIR) or Path(xdg) / "streamscope")


def default_storage_dsn() -> str:
    return os.environ.get(STREAMSCOPE_STORAGE) or f"chdb://{default_data_dir() / 'chdb'}"


def host_watch_enabled() -> bool:
    """Whether ``STREAMSCOPE_HOST_WATCH`` leaves the host watch on (it is unless set to a word for off)."""
    return os.environ.get(STREAMSCOPE_HOST_WATCH, "").strip().lower() not in ("off", "0", "false", "no")


def stall_threshold_us() -> int:
    raw = os.environ.get(STREAMSCOPE_STALL_THRESHOLD_MS)
    from streamscope.errors import ConfigError

    try:
        value = float(raw) if raw else DEFAULT_STALL_THRESHOLD_MS
    except ValueError:
        raise ConfigError(f"{STREAMSCOPE_STALL_THRESHOLD_MS}={raw!r} is not a number of milliseconds") from None
    if not 0 < value <= MAX_STALL_THRESHOLD_MS:
        raise ConfigError(f"{STREAMSCOPE_STALL_THRESHOLD_MS} must be above 0 and at most {MAX_STALL_THRESHOLD_MS:g}")
    return int(value * 1000)
