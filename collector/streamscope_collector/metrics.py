"""The collector's own metrics, served on ``/metrics`` in the Prometheus text format.

Counters of what happened (rows accepted, requests refused by reason, repeated spans dropped, batches set
aside, store failures, writer faults), a histogram of insert latency, and gauges read at scrape time (spool depth,
bytes in flight, whether the store, the writer and the spool's disk work). One registry per collector, so two
collectors in one process (tests, the demo) never mix their numbers.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from streamscope_ingest.blocks.batch import DecodedBatch

CONTENT_TYPE = CONTENT_TYPE_LATEST
_PREFIX = "streamscope_collector"
REFUSAL_REASONS = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    413: "too_large",
    415: "unsupported_media",
    429: "overloaded",
    500: "internal",
    503: "unavailable",
}
IGNORED_KIND_LABELS = 100
"""Kinds of ignored items (``streamscope_ingest.blocks.batch.ignored_kind``: a scope, an event, a metric name, in
the sender's words) that get a label of their own on ``ignored_kind_items_total``, the first seen; the rest are
counted together as ``OTHER_KINDS``, so a sender naming a new scope each request cannot grow the registry."""
OTHER_KINDS = "other kinds"


class SelfMetrics:
    """Implements ``streamscope_ingest.durability.group_commit.WriteObserver``.

    The transports call ``accepted`` and ``refused``.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self._accepted = Counter(f"{_PREFIX}_accepted_rows", "Rows accepted into the spool.", ["table"], registry=r)
        self._rejected_items = Counter(
            f"{_PREFIX}_rejected_items",
            "Spans, log records or points rejected in accepted requests.",
            ["signal"],
            registry=r,
        )
        self._ignored = Counter(
            f"{_PREFIX}_ignored_items",
            "Valid items that are not for us (spans that are not streams).",
            ["signal"],
            registry=r,
        )
        self._ignored_kinds = Counter(
            f"{_PREFIX}_ignored_kind_items",
            f"Valid items that are not for us, by kind (the first {IGNORED_KIND_LABELS}; '{OTHER_KINDS}' after).",
            ["signal", "kind"],
            registry=r,
        )
        self._labelled_kinds: set[str] = set()
        self._incomplete = Counter(
            f"{_PREFIX}_incomplete_streams",
            "Stream spans stored with less than a full timeline (chunks lost, unreadable), by coverage.",
            ["coverage"],
            registry=r,
        )
        self._refused = Counter(
            f"{_PREFIX}_refused_requests", "Requests answered with an error, by reason.", ["reason"], registry=r
        )
        self._browser_refused = Counter(
            f"{_PREFIX}_browser_refused",
            "What the public browser route refused, by reason: requests past their origin's rate (origin_rate), "
            "spans starting outside the clock window (clock_window) or of another side (not_browser).",
            ["reason"],
            registry=r,
        )
        self._written = Counter(
            f"{_PREFIX}_written_rows", "Rows the store confirmed, repeated spans included.", ["table"], registry=r
        )
        self._repeated = Counter(
            f"{_PREFIX}_repeated_spans_dropped", "Spans already stored, sent again, left out.", registry=r
        )
        self._quarantined = Counter(
            f"{_PREFIX}_dropped_batches",
            "Batches the store refused for good, kept in the spool's quarantine.",
            registry=r,
        )
        self._store_failures = Counter(
            f"{_PREFIX}_store_failures", "Inserts that failed and will be retried.", registry=r
        )
        self._writer_faults = Counter(
            f"{_PREFIX}_writer_faults",
            "Times the writer could not go on (the spool's disk failed under it) and retried.",
            registry=r,
        )
        self._write_seconds = Histogram(
            f"{_PREFIX}_store_write_seconds",
            "Time to insert one group of spool segments.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=r,
        )

    def watch(self, name: str, documentation: str, read: Callable[[], float]) -> None:
        """A gauge whose value is read at scrape time."""
        Gauge(f"{_PREFIX}_{name}", documentation, registry=self.registry).set_function(read)

    def chunks_per_stream(self) -> float | None:
        """The mean length of the streams accepted so far, in chunks; None before the first."""
        streams = self.registry.get_sample_value(f"{_PREFIX}_accepted_rows_total", {"table": "streams"})
        chunks = self.registry.get_sample_value(f"{_PREFIX}_accepted_rows_total", {"table": "chunks"})
        return chunks / streams if streams and chunks is not None else None

    def accepted(self, signal: str, batch: DecodedBatch) -> None:
        for table, rows in batch.counts().items():
            self._accepted.labels(table).inc(rows)
        self._rejected_items.labels(signal).inc(len(batch.rejected))
        self._ignored.labels(signal).inc(batch.ignored_count)
        for kind, count in batch.ignored.items():
            self._ignored_kinds.labels(signal, self._kind_label(kind)).inc(count)
        for coverage, streams in batch.incomplete.items():
            self._incomplete.labels(coverage).inc(streams)

    def _kind_label(self, kind: str) -> str:
        """``kind`` as a label: itself while fewer than ``IGNORED_KIND_LABELS`` kinds have one, else ``OTHER_KINDS``."""
        if kind in self._labelled_kinds:
            return kind
        if len(self._labelled_kinds) < IGNORED_KIND_LABELS:
            self._labelled_kinds.add(kind)
            return kind
        return OTHER_KINDS

    def refused(self, status: int) -> None:
        self._refused.labels(REFUSAL_REASONS.get(status, str(status))).inc()

    def browser_refused(self, reason: str, count: int = 1) -> None:
        self._browser_refused.labels(reason).inc(count)

    # WriteObserver

    def insert_written(self, seconds: float, batches: list[DecodedBatch], repeated_spans: int) -> None:
        self._write_seconds.observe(seconds)
        for batch in batches:
            for table, rows in batch.counts().items():
                self._written.labels(table).inc(rows)
        self._repeated.inc(repeated_spans)

    def store_failed(self, error: Exception) -> None:
        self._store_failures.inc()

    def quarantined(self, batches: int) -> None:
        self._quarantined.inc(batches)

    def writer_failed(self, error: Exception) -> None:
        self._writer_faults.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


PROBES = frozenset({"/healthz", "/readyz", "/metrics"})
"""Routes that answer about the collector, not requests of it: a 503 from /readyz refuses nothing."""


class CountRefusals:
    """ASGI middleware: every answer of 400 or more to a request (not a probe) counts as refused, by its status."""

    def __init__(self, app, metrics: SelfMetrics) -> None:
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in PROBES:
            return await self.app(scope, receive, send)

        async def counting(message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 400:
                self.metrics.refused(message["status"])
            await send(message)

        return await self.app(scope, receive, counting)
