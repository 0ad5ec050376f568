"""The one export path both transports call: decode, write, and say what was accepted.

HTTP and gRPC adapters only turn bytes into an ExportTraceServiceRequest and results into their
protocol's answer; decoding, writing and partial-success accounting happen here, once.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from ingest.decode import decode_traces
from ingest.group_commit import GroupCommitWriter
from streamscope.errors import RetryableWriteError


@dataclass(frozen=True)
class ExportResult:
    rejected_spans: int
    error_message: str

    def response(self) -> ExportTraceServiceResponse:
        """The OTLP response: partial_success only when something was rejected."""
        if not self.rejected_spans:
            return ExportTraceServiceResponse()
        return ExportTraceServiceResponse(
            partial_success=ExportTracePartialSuccess(
                rejected_spans=self.rejected_spans, error_message=self.error_message
            )
        )


class TracePipeline:
    def __init__(self, writer: GroupCommitWriter, *, stall_threshold_us: int, write_timeout_s: float) -> None:
        self._writer = writer
        self._stall_threshold_us = stall_threshold_us
        self._write_timeout_s = write_timeout_s
        self._counts: Counter[str] = Counter()
        self._counts_lock = threading.Lock()

    def export(self, request: ExportTraceServiceRequest, tenant: str) -> ExportResult:
        """Store the request's stream spans; returns once they are written. Raises WriteError."""
        batch = decode_traces(request, tenant=tenant, stall_threshold_us=self._stall_threshold_us)
        try:
            self._writer.write(batch, timeout_s=self._write_timeout_s)
        except FutureTimeout:
            raise RetryableWriteError(f"store did not confirm the write within {self._write_timeout_s:g} s") from None
        with self._counts_lock:
            self._counts.update(
                streams=batch.rows("streams"),
                chunks=batch.rows("chunks"),
                ignored_spans=batch.ignored,
                rejected_spans=len(batch.rejected),
            )
        return ExportResult(rejected_spans=len(batch.rejected), error_message=batch.rejection_message("stream span"))

    def counts(self) -> dict[str, int]:
        """Totals since start: streams, chunks, ignored_spans, rejected_spans."""
        with self._counts_lock:
            return dict(self._counts)
