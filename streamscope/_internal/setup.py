"""One call that points an application's OpenTelemetry tracing at a streamscope collector.

Standard OTel variables keep their meaning (OTEL_SERVICE_NAME, OTEL_EXPORTER_OTLP_ENDPOINT,
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_EXPORTER_OTLP_HEADERS, ...);
arguments win over them. The span event limit is raised so the events encoding keeps whole streams.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from streamscope._internal.recorder import Encoding, set_default_encoding
from streamscope.errors import ConfigError
from streamscope.install import install_command

log = logging.getLogger("streamscope")

OTLP_PORTS = {"grpc": 4317, "http": 4318}
"""OTLP's default ports: a collector (ours, or OpenTelemetry's) serves gRPC on one and HTTP on the other."""

COMPRESSION_VARIABLES = ("OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION")
CREDENTIAL_VARIABLES = (
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_CREDENTIAL_PROVIDER",
    "OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER",
)
"""Variables that give the OTLP/HTTP exporter a requests session of the application's (a credential provider)."""
EVENTS_PER_SPAN = 65_536
"""Span event limit set unless OTEL_SPAN_EVENT_COUNT_LIMIT says otherwise (the SDK default is 128)."""


def setup(
    service_name: str | None = None,
    *,
    endpoint: str | None = None,
    protocol: str | None = None,
    encoding: Encoding | None = None,
    headers: Mapping[str, str] | None = None,
    resource_attributes: Mapping[str, str] | None = None,
    set_global: bool = True,
    exporter: SpanExporter | None = None,
) -> TracerProvider:
    """Configure tracing to export to the collector; returns the TracerProvider (made global by default).

    ``endpoint`` is the collector's base URL (http://host:4318 for OTLP/HTTP, http://host:4317 for gRPC);
    ``protocol`` is ``http/protobuf`` (default), ``http/json`` or ``grpc``. Requests are gzipped unless
    OTEL_EXPORTER_OTLP_[TRACES_]COMPRESSION says otherwise: packed timelines shrink about threefold
    (benchmarks/wire_cost.py). Over OTLP/HTTP protobuf at zlib's default level (``gzip_session``), unless a
    credential provider gives the exporter its session; its batches are encoded in place (``otlp_http_exporter``).
    ``exporter`` replaces the exporter built from those (``otlp_exporter`` builds it, for an application that
    wraps it).
    """
    if encoding is not None:
        set_default_encoding(encoding)
    attributes = dict(resource_attributes or {})
    if service_name:
        attributes["service.name"] = service_name
    limits = SpanLimits(max_events=None if "OTEL_SPAN_EVENT_COUNT_LIMIT" in os.environ else EVENTS_PER_SPAN)
    provider = TracerProvider(resource=Resource.create(attributes), span_limits=limits)
    provider.add_span_processor(BatchSpanProcessor(exporter or SaysDrops(otlp_exporter(endpoint, protocol, headers))))
    if set_global:
        trace.set_tracer_provider(provider)
    return provider


class SaysDrops(SpanExporter):
    """The exporter ``setup`` builds, saying once when spans start being dropped (the collector down, unreachable
    or refusing them) and once when they get through again: the OTLP exporter logs each retry, not the loss."""

    def __init__(self, exporter: SpanExporter) -> None:
        self._exporter = exporter
        self._failing = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self._exporter.export(spans)
        if result is SpanExportResult.FAILURE and not self._failing:
            self._failing = True
            log.warning("streamscope: the collector did not take %d span(s): spans are being dropped", len(spans))
        elif result is SpanExportResult.SUCCESS and self._failing:
            self._failing = False
            log.warning("streamscope: the collector takes spans again")
        return result

    def shutdown(self) -> None:
        self._exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self._exporter.force_flush(timeout_millis)


def _gzip_by_default() -> bool:
    return not any(name in os.environ for name in COMPRESSION_VARIABLES)


def otlp_exporter(
    endpoint: str | None = None, protocol: str | None = None, headers: Mapping[str, str] | None = None
) -> SpanExporter:
    """The OTLP span exporter ``setup`` uses for these arguments (and the standard variables)."""
    protocol = (
        protocol
        or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    )
    header_dict = dict(headers) if headers else None
    gzip = _gzip_by_default()
    if endpoint:
        _check_endpoint(endpoint, protocol)
    if protocol == "grpc":
        try:
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
        except ImportError:
            raise ImportError(f"protocol 'grpc' needs the grpc extra: {install_command('grpc')}") from None
        import grpc

        return GrpcExporter(
            endpoint=endpoint,
            headers=header_dict,
            insecure=_insecure(endpoint),
            compression=grpc.Compression.Gzip if gzip else None,
        )
    traces_url = f"{endpoint.rstrip('/')}/v1/traces" if endpoint else None
    if protocol == "http/json":
        try:
            from opentelemetry.exporter.otlp.json.http.trace_exporter import OTLPSpanExporter as JsonExporter
        except ImportError:
            raise ImportError("protocol 'http/json' needs: pip install opentelemetry-exporter-otlp-json-http") from None
        from opentelemetry.exporter.otlp.common.http import Compression as JsonCompression

        return JsonExporter(
            endpoint=traces_url, headers=header_dict, compression=JsonCompression.GZIP if gzip else None
        )
    if protocol != "http/protobuf":
        raise ValueError(f"protocol must be http/protobuf, http/json or grpc, not {protocol!r}")
    from opentelemetry.exporter.otlp.proto.http import Compression

    from streamscope._internal.otlp_http_exporter import InPlaceEncodingExporter as OTLPSpanExporter

    if not gzip:
        return OTLPSpanExporter(endpoint=traces_url, headers=header_dict)
    if any(name in os.environ for name in CREDENTIAL_VARIABLES):
        # the exporter sends through the application's own session: it gzips itself (level 9)
        return OTLPSpanExporter(endpoint=traces_url, headers=header_dict, compression=Compression.Gzip)
    from streamscope._internal.gzip_session import GzipSession

    # the session gzips at a fast level; the exporter's own gzip (level 9) stays off
    return OTLPSpanExporter(
        endpoint=traces_url, headers=header_dict, compression=Compression.NoCompression, session=GzipSession()
    )


def _check_endpoint(endpoint: str, protocol: str) -> None:
    """Refuse an endpoint that names the traces path (``setup`` adds it: the exporter would post to
    /v1/traces/v1/traces and get 404s), and warn of the other protocol's default port (an HTTP exporter on the gRPC
    port fails with unreadable errors such as ``BadStatusLine('\x00\x00\x18\x04…')``)."""
    parts = urlsplit(endpoint)
    if parts.path.rstrip("/").endswith("/v1/traces"):
        base = f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')[: -len('/v1/traces')]}"
        raise ConfigError(f"endpoint {endpoint} names the traces path, which setup() adds itself: give {base}")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"endpoint {endpoint}: its port is not a number") from None
    grpc = protocol == "grpc"
    if port == OTLP_PORTS["http" if grpc else "grpc"]:
        right = f"{parts.scheme}://{parts.hostname}:{OTLP_PORTS['grpc' if grpc else 'http']}"
        sent, usual, otherwise = (
            ("gRPC", "HTTP", "the default protocol") if grpc else ("HTTP", "gRPC", "protocol='grpc'")
        )
        log.warning(
            "streamscope: %s is OTLP/%s's usual port and this exporter sends OTLP/%s: give %s, or %s to send %s there",
            endpoint,
            usual,
            sent,
            right,
            otherwise,
            usual,
        )


def _insecure(endpoint: str | None) -> bool | None:
    """Plaintext unless the endpoint says https: a streamscope collector serves gRPC without TLS."""
    return not endpoint.startswith("https://") if endpoint else None
