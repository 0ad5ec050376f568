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

STREAMSCOPE_DATA_DIR: Final = "STREAMSCOPE_DATA_DIR"
"""Directory for the embedded engine's data when no DSN is given (default ~/.local/share/streamscope)."""

STREAMSCOPE_ENCODING: Final = "STREAMSCOPE_ENCODING"
"""Chunk timeline encoding the SDK emits: ``packed`` (default) or ``events``."""

STREAMSCOPE_STALL_THRESHOLD_MS: Final = "STREAMSCOPE_STALL_THRESHOLD_MS"
"""A gap longer than this many milliseconds counts as a stall in per-stream statistics (default 400)."""

STREAMSCOPE_COLLECTOR_URL: Final = "STREAMSCOPE_COLLECTOR_URL"
"""Base URL of a running collector, for commands that query through it (default http://127.0.0.1:4318)."""

DEFAULT_STALL_THRESHOLD_MS: Final = 400.0
DEFAULT_COLLECTOR_URL: Final = "http://127.0.0.1:4318"


def resolve(argument: str | None, variable: str, default: str) -> str:
    """The first of: the explicit argument, the environment variable, the default."""
    if argument:
        return argument
    return os.environ.get(variable) or default


def default_data_dir() -> Path:
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(os.environ.get(STREAMSCOPE_DATA_DIR) or Path(xdg) / "streamscope")


def default_storage_dsn() -> str:
    return os.environ.get(STREAMSCOPE_STORAGE) or f"chdb://{default_data_dir() / 'chdb'}"


def stall_threshold_us() -> int:
    raw = os.environ.get(STREAMSCOPE_STALL_THRESHOLD_MS)
    try:
        value = float(raw) if raw else DEFAULT_STALL_THRESHOLD_MS
    except ValueError:
        from streamscope.errors import ConfigError

        raise ConfigError(f"{STREAMSCOPE_STALL_THRESHOLD_MS}={raw!r} is not a number of milliseconds") from None
    return int(value * 1000)
