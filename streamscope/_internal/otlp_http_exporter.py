"""OpenTelemetry's OTLP/HTTP span exporter, with each batch encoded by ``span_encoding`` (the same request, built in
place for about a fifth of the stock encoder's CPU on the export thread: docs/benchmarks.md).

The exporter has no public hook for its encoding, so ``export`` is the stock one with that call changed. It
reaches the exporter's HTTP client and its self-metrics, which are not public: an installed exporter without
them exports as it always does.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from streamscope._internal.span_encoding import encode_spans

log = logging.getLogger(__name__)


class RequestPayloadTooLargeError(Exception):
    """A batch over the exporter's ``max_request_size`` (named as the stock exporter's: its metrics' error.type)."""


class InPlaceEncodingExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` (same arguments, same requests) encoding with ``span_encoding.encode_spans``."""

    @property
    def encodes_in_place(self) -> bool:
        """Whether this exporter's internals are the ones ``export`` reaches (else it is the stock exporter)."""
        return all(hasattr(self, name) for name in ("_client", "_metrics", "_max_request_size", "_shutdown"))

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if not self.encodes_in_place:
            return super().export(spans)
        if self._shutdown:
            log.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                body = encode_spans(spans).SerializePartialToString()
            except Exception as error:  # as the stock exporter: a batch that cannot be encoded fails alone
                log.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if 0 < self._max_request_size < len(body):
                log.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size %d bytes.",
                    len(body),
                    self._max_request_size,
                )
                result.error = RequestPayloadTooLargeError(
                    f"Serialized span request size {len(body)} bytes exceeds max_request_size"
                    f" {self._max_request_size} bytes."
                )
                return SpanExportResult.FAILURE
            exported = self._client.export(body)
            if not exported.success:
                result.error = exported.error
                result.error_attrs = (
                    {"http.response.status_code": exported.status_code} if exported.status_code is not None else None
                )
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
