"""The collector's browser side: the snippet web pages load, and the public route their spans arrive on.

Browsers are the internet: ``/v1/browser/traces`` accepts OTLP/HTTP JSON only (``text/plain`` too, the type
``navigator.sendBeacon`` can send without a CORS preflight), a smaller body than the OTLP routes, only stream
spans of the browser side (anything else in a request is refused through partial_success), and, when public
browser tokens are configured (streamscope_collector.auth), only requests that carry one (``?token=`` or
``Authorization: Bearer``), stored under that token's tenant. Such a token is public by nature (it ships in
the page): it limits what a page can write, not who reads.
"""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from streamscope import semconv

SNIPPET_PATH = "/sdk/streamscope.js"
ROUTE = "/v1/browser/traces"
DEFAULT_MAX_REQUEST_BYTES = 1024 * 1024
"""A page's batch of stream spans is tens of kilobytes; a megabyte is generous and bounds what a stranger sends."""
BROWSER = "browser"


@cache
def snippet() -> tuple[bytes, str]:
    """The snippet's source and its ETag."""
    source = resources.files("streamscope_collector.snippet").joinpath("streamscope.js").read_bytes()
    return source, f'"{hashlib.sha256(source).hexdigest()[:16]}"'


def keep_browser_spans(request: ExportTraceServiceRequest) -> int:
    """Drop every span that is not a browser stream span from ``request``, in place; returns how many."""
    refused = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            kept = [span for span in scope_spans.spans if _side(span) == BROWSER]
            if len(kept) < len(scope_spans.spans):
                refused += len(scope_spans.spans) - len(kept)
                del scope_spans.spans[:]
                scope_spans.spans.extend(kept)
    return refused


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
