"""The collector's settings, resolved once at start."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from streamscope import env
from streamscope.errors import ConfigError
from streamscope_collector.auth import Credentials
from streamscope_collector.browser import DEFAULT_CLOCK_WINDOW_S as DEFAULT_BROWSER_CLOCK_WINDOW_S
from streamscope_collector.browser import DEFAULT_MAX_REQUEST_BYTES as DEFAULT_MAX_BROWSER_REQUEST_BYTES
from streamscope_collector.browser import DEFAULT_REQUESTS_PER_MINUTE as DEFAULT_BROWSER_REQUESTS_PER_MINUTE
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.decode.limits import DEFAULT_LIMITS, SpanLimits
from streamscope_ingest.durability.group_commit import GroupCommitConfig
from streamscope_ingest.durability.spool import FsyncPolicy

DEFAULT_MAX_REQUEST_BYTES = 64 * 1024 * 1024  # the OTLP specification's recommended limit
DEFAULT_SPOOL_MAX_BYTES = 2 * 1024**3
DEFAULT_MAX_INFLIGHT_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True)
class CollectorConfig:
    storage_dsn: str = field(default_factory=env.default_storage_dsn)
    """Where spans are inserted, as whom: on a server, an account that may insert (and migrate, with ``migrate``)."""
    query_storage_dsn: str | None = None
    """The same store as another account, for everything the collector reads; None: the storage DSN's."""
    host: str = "127.0.0.1"
    http_port: int = 4318
    grpc_port: int | None = 4317
    """None disables OTLP/gRPC."""
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES
    """Largest request body accepted, measured after decompression (HTTP 413 / gRPC RESOURCE_EXHAUSTED)."""
    limits: SpanLimits = DEFAULT_LIMITS
    """Spans per request, chunks and attributes per span, string lengths (see streamscope_ingest.decode.limits)."""
    stall: StallRule = field(default_factory=StallRule.configured)
    """What a stall is (``STREAMSCOPE_STALL_THRESHOLD_MS`` sets its threshold): decoding counts them, attribution
    names them."""
    tenant: str = "default"
    """The tenant of every request while authentication is off (no ``tokens``)."""
    tokens: Mapping[str, str] = field(default_factory=dict)
    """Secret bearer token → tenant; any token turns authentication on (see streamscope_collector.auth)."""
    browser_tokens: Mapping[str, str] = field(default_factory=dict)
    """Public token web pages send with browser spans → tenant."""
    write_timeout_s: float = 30.0
    """How long a request waits for the spool to take it before it is answered 503."""
    alert_webhook_token: str | None = None
    """The token Grafana's contact point sends to the alert webhook, the only one it takes; None: the webhook is
    open while authentication is off, closed while it is on."""
    store_wait_s: float = 0.0
    """After a request is durable, how long it also waits for the store, while the store is healthy, before it is
    answered; 0: answered as soon as it is in the spool. Waiting ties every sender's pace to the store's insert
    latency, so it is for senders that read their own writes from the store directly."""
    insert_interval_s: float = GroupCommitConfig.insert_interval_s
    """Inserts into the store start at most this often (``GroupCommitConfig.insert_interval_s``)."""
    read_wait_s: float = 5.0
    """How long a query through the collector (``/api/v1/sql``) first waits, while the store is healthy, for every
    row acknowledged before it to be stored: a sender that then queries reads its own writes."""
    spool_dir: Path | None = None
    """Where accepted batches wait for the store; None: ``spool/<database>`` beside an embedded store, else
    ``<data dir>/spool/<host>-<port>-<database>``."""
    spool_max_bytes: int = DEFAULT_SPOOL_MAX_BYTES
    """Past this much waiting for the store, requests are answered 503 with Retry-After."""
    spool_fsync: FsyncPolicy = "always"
    """``always``: acknowledged batches survive a machine crash; ``never``: a process crash
    (see streamscope_ingest.durability.spool)."""
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    """Request bodies (decompressed) being read, decoded and spooled at once at most; past it, 429."""
    max_memory_bytes: int | None = None
    """The collector's resident memory at most: requests are refused (429) rather than let it pass; None: what it
    holds once started, plus the bound of the settings above (streamscope_collector.memory)."""
    tenant_bytes_per_s: float | None = None
    """Request bytes (decompressed) each tenant may send per second, sustained; None: no limit. Past it, 429."""
    migrate: bool = True
    """Apply pending migrations at start."""
    attribution_interval_s: float | None = 5.0
    """Attribute settled streams' stalls this often (None: never, e.g. when another collector does it)."""
    attribution_settle_s: float = 10.0
    """Attribute a stream this long after it was stored, once its other sides and the node's events are in."""
    cors_origins: tuple[str, ...] = ()
    """Origins whose pages may load the snippet and send browser spans (``*`` for any); none: no CORS headers."""
    browser_token: str | None = None
    """A public browser token for ``tenant`` (shorthand for one entry of ``browser_tokens``)."""
    browser_max_request_bytes: int = DEFAULT_MAX_BROWSER_REQUEST_BYTES
    browser_requests_per_minute: int | None = DEFAULT_BROWSER_REQUESTS_PER_MINUTE
    """Requests the browser route takes a minute from each origin named in ``cors_origins``, and from all other
    senders together, a minute's worth at once at most; None: no limit. Past it, 429 with Retry-After."""
    browser_clock_window_s: float = DEFAULT_BROWSER_CLOCK_WINDOW_S
    """How far from the collector's clock, before or after, a span on the browser route may start; a span outside
    is rejected in partial_success, so a stranger cannot spread rows over many days (each a partition)."""

    def __post_init__(self) -> None:
        if self.spool_max_bytes < self.max_request_bytes:
            raise ConfigError(
                f"the spool limit ({self.spool_max_bytes} bytes) is below the largest request accepted "
                f"({self.max_request_bytes} bytes): such a request could never be spooled, and the collector would "
                "never report ready; raise the spool limit or lower the request limit"
            )

    def credentials(self) -> Credentials:
        browser = dict(self.browser_tokens)
        if self.browser_token:
            browser[self.browser_token] = self.tenant
        return Credentials(self.tenant, self.tokens, browser, self.alert_webhook_token)
