"""One exception tree for the whole product.

    StreamscopeError
     ├── ConfigError            a setting or DSN is wrong; the message says which and how to fix it
     ├── DecodeError            an OTLP body could not be decoded (the collector answers 400)
     │    └── LimitExceeded     the request asks more than the collector's limits allow (413)
     ├── SchemaMismatch         the store's tables differ from schema/ (run `streamscope migrate`)
     ├── WriteError             the store refused or failed a write
     │    └── RetryableWriteError   the store is unreachable or busy; the same write may succeed later
     │         ├── SpoolFull        the store has been behind for so long that the spool is full (503)
     │         ├── SpoolUnavailable the spool's disk refuses writes (full, read-only, not allowed) (503)
     │         └── Overloaded       more requests in flight than the memory budget allows (429)
     └── GrafanaError           a Grafana was unreachable or refused a request (`streamscope dashboards push`)

Driver exceptions are translated into this tree in ``streamscope_ingest.store`` and nowhere else; grafana-client's in
``streamscope_dashboards.push``.
"""

from __future__ import annotations


class StreamscopeError(Exception):
    """Root of every error streamscope raises on purpose."""


class MissingDependency(StreamscopeError, AttributeError):
    """A part of the SDK needs a package this install lacks; the message names it and how to install it. An
    AttributeError too, so ``hasattr(streamscope, name)`` answers False instead of raising."""


class ConfigError(StreamscopeError):
    """A setting, option or DSN is invalid."""


class DecodeError(StreamscopeError):
    """An OTLP request body could not be decoded."""


class LimitExceeded(DecodeError):
    """A request is past one of the collector's limits as a whole (too many spans)."""


class SchemaMismatch(StreamscopeError):
    """The store's schema is not the one this version of streamscope writes."""


class WriteError(StreamscopeError):
    """The store failed a write."""


class RetryableWriteError(WriteError):
    """The store is unavailable or overloaded; retrying the same write may succeed."""


class SpoolFull(RetryableWriteError):
    """The durable spool holds as much as it may: nothing more is accepted until the store catches up."""


class SpoolUnavailable(RetryableWriteError):
    """The spool's disk refused a write (full, read-only, no permission): nothing is accepted until it takes them
    again. The message says why, never where: senders see it."""


class Overloaded(RetryableWriteError):
    """The collector is at its in-flight memory budget or a tenant at its rate limit; retry after a pause."""


class GrafanaError(StreamscopeError):
    """A Grafana could not be reached, or answered a request with an error; the message carries Grafana's own."""
