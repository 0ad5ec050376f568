"""The collector's browser side: the snippet web pages load, and the public route their spans arrive on.

Browsers are the internet: ``/v1/browser/traces`` accepts OTLP/HTTP JSON only (``text/plain`` too, the type
``navigator.sendBeacon`` can send without a CORS preflight), a smaller body than the OTLP routes, only stream
spans of the browser side (anything else in a request is refused through partial_success), and, when public
browser tokens are configured (streamscope_collector.auth), only requests that carry one (``?token=`` or
``Authorization: Bearer``), stored under that token's tenant. Such a token is public by nature (it ships in
the page): it limits what a page can write, not who reads.

So anyone may send here, and ``BrowserLimits`` bounds what a sender can cost the store: spans that start near the
collector's clock only (each day is a partition of the tables, and an insert costs the store a part per partition it
touches, so spans spread over many days slow the writer for everyone), and so many requests a minute per origin.
"""

from __future__ import annotations

import hashlib
import math
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import TYPE_CHECKING

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from streamscope import semconv
from streamscope.errors import Overloaded
from streamscope_ingest.blocks.batch import Rejection
from streamscope_ingest.decode.traces.rows import span_subject

if TYPE_CHECKING:
    from streamscope_collector.config import CollectorConfig
    from streamscope_collector.metrics import SelfMetrics

SNIPPET_PATH = "/sdk/streamscope.js"
ROUTE = "/v1/browser/traces"
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
"""A page's batch of stream spans is tens of kilobytes; a megabyte is generous and bounds what a stranger sends."""
DEFAULT_REQUESTS_PER_MINUTE = 1200
"""Requests a minute from one origin: the snippet sends a batch at most every 2 s while its page streams, so about
forty pages streaming at once."""
DEFAULT_CLOCK_WINDOW_S = 3600.0
"""How far from the collector's clock a browser span may start: a page sends its spans as they happen, so an hour
leaves room for long streams and clocks somewhat off, and keeps what the route stores to one or two days."""
BROWSER = "browser"
NOT_BROWSER, CLOCK_WINDOW, ORIGIN_RATE = "not_browser", "clock_window", "origin_rate"
"""What the route refuses, as ``streamscope_collector_browser_refused_total`` counts it: spans of another side, spans
starting outside the clock window, requests past their origin's rate."""


@cache
def snippet() -> tuple[bytes, str]:
    """The snippet's source and its ETag."""
    source = resources.files("streamscope_collector.snippet").joinpath("streamscope.js").read_bytes()
    return source, f'"{hashlib.sha256(source).hexdigest()[:16]}"'


class OriginOverRate(Overloaded):
    """A sender past its requests a minute on the browser route: HTTP 429, Retry-After ``retry_after_s``."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class OriginRate:
    """Requests a minute per origin, counted as the generic cell rate algorithm does: an origin's next request is due
    ``60 / per_minute`` s after its last one and may come up to a minute early, so a minute's worth may come at once.

    Each origin in ``listed`` (the CORS origins) has a budget of its own; every other sender (another origin, none,
    any under ``*``) shares one, so a sender that makes up origins gets no more, and the table stays small.
    """

    def __init__(self, per_minute: int | None, listed: Iterable[str]) -> None:
        self.per_minute = per_minute
        self._listed = frozenset(listed) - {"*"}
        self._due: dict[str | None, float] = {}  # origin (None: the others) → when its next request is due
        self._lock = threading.Lock()

    def admit(self, origin: str | None) -> None:
        """Count a request from ``origin`` (its Origin header); raises OriginOverRate past the rate."""
        if self.per_minute is None:
            return
        interval = 60.0 / self.per_minute
        key = origin if origin in self._listed else None
        now = time.monotonic()
        with self._lock:
            due = max(self._due.get(key, now), now)
            if (early := due - now - (60.0 - interval)) > 0:
                senders = "this origin" if key is not None else "origins the collector does not name"
                raise OriginOverRate(
                    f"the browser route takes {self.per_minute} requests a minute from {senders}",
                    max(1, math.ceil(early)),
                )
            self._due[key] = due + interval


@dataclass
class Screened:
    """What ``screen`` took out of a request."""

    not_browser: int = 0
    """Spans of another side than the browser's."""
    outside_window: list[Rejection] = field(default_factory=list)
    """Browser spans starting too far from the collector's clock, by name."""


def screen(request: ExportTraceServiceRequest, window_ns: int, now_ns: int) -> Screened:
    """Drop from ``request``, in place, every span that is not a browser stream span or that starts more than
    ``window_ns`` from ``now_ns``; returns what was dropped."""
    screened, reason = Screened(), f"starts more than {window_ns / 1e9:g} s before or after the collector's clock"
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            kept = []
            for span in scope_spans.spans:
                if _side(span) != BROWSER:
                    screened.not_browser += 1
                elif abs(span.start_time_unix_nano - now_ns) > window_ns:
                    screened.outside_window.append(Rejection(span_subject(span), reason))
                else:
                    kept.append(span)
            if len(kept) < len(scope_spans.spans):
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
    return screened


class BrowserLimits:
    """What one sender may cost the store through the browser route, and the count of what it refuses."""

    def __init__(self, config: CollectorConfig, metrics: SelfMetrics) -> None:
        self.rate = OriginRate(config.browser_requests_per_minute, config.cors_origins)
        self.window_ns = round(config.browser_clock_window_s * 1e9)
        self._metrics = metrics

    def admit(self, origin: str | None) -> None:
        """Count a request from ``origin``; raises OriginOverRate past its rate."""
        try:
            self.rate.admit(origin)
        except OriginOverRate:
            self._metrics.browser_refused(ORIGIN_RATE)
            raise

    def screen(self, request: ExportTraceServiceRequest) -> Screened:
        """``screen`` against the collector's clock, counted."""
        screened = screen(request, self.window_ns, time.time_ns())
        self._metrics.browser_refused(NOT_BROWSER, screened.not_browser)
        self._metrics.browser_refused(CLOCK_WINDOW, len(screened.outside_window))
        return screened


def _side(span) -> str:
    for attribute in span.attributes:
        if attribute.key == semconv.STREAMSCOPE_SIDE:
            return attribute.value.string_value
    return ""


def refusal_message(refused: int) -> str:
    return (
        f"refused {refused} span(s): this route takes only browser stream spans "
        f"({semconv.STREAMSCOPE_SIDE} = {BROWSER}); send other spans to /v1/traces"
    )
