"""The collector's settings, resolved once at start."""

from __future__ import annotations

from dataclasses import dataclass, field

from collector.browser import DEFAULT_MAX_REQUEST_BYTES as DEFAULT_MAX_BROWSER_REQUEST_BYTES
from streamscope import env

DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024  # the OTLP specification's recommended limit


@dataclass(frozen=True)
class CollectorConfig:
    storage_dsn: str = field(default_factory=env.default_storage_dsn)
    host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_port: int | None = 4317
    """None disables OTLP/gRPC."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Largest request body accepted, measured after decompression (HTTP 413 / gRPC RESOURCE_EXHAUSTED)."""
    stall_threshold_us: int = field(default_factory=env.stall_threshold_us)
    tenant: str = "default"
    """Tenant stored on every row until authentication maps credentials to tenants."""
    write_timeout_s: float = 30.0
    """How long a request waits for its rows to reach the store before it is answered 503."""
    migrate: bool = True
    """Apply pending migrations at start."""
    attribution_interval_s: float | None = 5.0
    """Attribute settled streams' stalls this often (None: never, e.g. when another collector does it)."""
    cors_origins: tuple[str, ...] = ()
    """Origins whose pages may load the snippet and send browser spans (``*`` for any); none: no CORS headers."""
    browser_token: str | None = None
    """The public token web pages must send with browser spans; None: the browser route is open."""
    browser_max_request_bytes: int = DEFAULT_MAX_BROWSER_REQUEST_BYTES
