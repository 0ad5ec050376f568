"""Exporters that count what reached the collector and what did not, so a run never loses telemetry in silence.

The OpenTelemetry SDK's batch processors log an export that failed and drop the batch; a workload that only
logged would report a run as done while the collector stored none of it. Each tally wraps the OTLP exporter and
keeps the counts the run reports (and ``streamscope load`` exits on).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExporter, LogRecordExportResult
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class Tally:
    """Items exported and items an export failed to deliver (thread-safe: batch processors export on a thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.exported = 0
        self.failed = 0

    def count(self, items: int, delivered: bool) -> None:
        with self._lock:
            if delivered:
                self.exported += items
            else:
                self.failed += items

    def add(self, exported: int, failed: int) -> None:
        """Counts kept elsewhere (another process's exporter)."""
        self.count(exported, True)
        self.count(failed, False)


class _Passing:
    """What a tallying exporter passes straight to the exporter it wraps."""

    delegate: SpanExporter | LogRecordExporter

    def shutdown(self) -> None:
        self.delegate.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.delegate.force_flush(timeout_millis)


class SpanTally(_Passing, SpanExporter):
    """``delegate``, counting in ``tally`` the spans it delivered and those it did not."""

    delegate: SpanExporter

    def __init__(self, delegate: SpanExporter, tally: Tally) -> None:
        self.delegate, self.tally = delegate, tally

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        result = self.delegate.export(spans)
        self.tally.count(len(spans), result is SpanExportResult.SUCCESS)
        return result


class LogTally(_Passing, LogRecordExporter):
    """``delegate``, counting in ``tally`` the log records it delivered and those it did not."""

    delegate: LogRecordExporter

    def __init__(self, delegate: LogRecordExporter, tally: Tally) -> None:
        self.delegate, self.tally = delegate, tally

    def export(self, batch: Sequence[ReadableLogRecord]) -> LogRecordExportResult:
        result = self.delegate.export(batch)
        self.tally.count(len(batch), result is LogRecordExportResult.SUCCESS)
        return result
