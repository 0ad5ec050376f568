"""The one export path every transport calls: decode, spool, wait for the store, and say what was accepted.

HTTP and gRPC adapters only turn bytes into an OTLP request and results into their protocol's answer;
decoding, writing and partial-success accounting happen here, once, for every signal we accept. The steps
are separate calls so that a transport can let go of each request's memory as soon as the next step no
longer needs it (see ``streamscope_collector.admission``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import suppress
from dataclasses import dataclass

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsPartialSuccess,
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTracePartialSuccess,
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from streamscope.errors import RetryableWriteError
from streamscope_collector.admission import Reservation
from streamscope_collector.metrics import SelfMetrics
from streamscope_ingest.blocks.batch import DecodedBatch, Rejection
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.decode.chunk_events import TraceRequestView
from streamscope_ingest.decode.limits import DEFAULT_LIMITS, SpanLimits
from streamscope_ingest.decode.logs import decode_logs
from streamscope_ingest.decode.metrics import decode_metrics
from streamscope_ingest.decode.otlp_body import parse_json, parse_protobuf
from streamscope_ingest.decode.request_log import Received, with_request_row
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.durability.group_commit import GroupCommitWriter, Ticket

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExportResult:
    rejected: int
    error_message: str

    @classmethod
    def of(cls, batch: DecodedBatch, signal: Signal) -> ExportResult:
        return cls(rejected=len(batch.rejected), error_message=batch.rejection_message(signal.noun))


@dataclass(frozen=True)
class Signal:
    """An OTLP signal the collector accepts: where it arrives and how it is answered."""

    name: str
    path: str
    request_type: type[Message]
    """OTLP's request message: what JSON bodies are parsed into."""
    noun: str
    """What a rejected item is called in partial_success messages."""
    _respond: Callable[[ExportResult], Message]
    protobuf_type: type[Message]
    """What protobuf bodies and gRPC messages are parsed into: ``request_type``, or a view of the same bytes that
    the decoder reads for less (traces: ``streamscope_ingest.decode.chunk_events``)."""

    def parse(self, body: bytes, *, protobuf: bool) -> Message:
        """The request in an inflated ``body``, protobuf or OTLP JSON, as the collector reads it; raises DecodeError."""
        return parse_protobuf(body, self.protobuf_type) if protobuf else parse_json(body, self.request_type)

    def response(self, result: ExportResult) -> Message:
        """The OTLP response: partial_success only when something was rejected or there is a warning."""
        return self._respond(result)


def _responder(
    response_type: type[Message], partial_type: type[Message], rejected_field: str
) -> Callable[[ExportResult], Message]:
    """The signal's response: partial_success (with its own rejected-count field) only when something was rejected
    or there is a warning (rejected 0 and a message, as the OTLP specification has it)."""

    def respond(result: ExportResult) -> Message:
        if not result.rejected and not result.error_message:
            return response_type()
        partial = partial_type(**{rejected_field: result.rejected}, error_message=result.error_message)
        return response_type(partial_success=partial)

    return respond


TRACES = Signal(
    "traces",
    "/v1/traces",
    ExportTraceServiceRequest,
    "stream span",
    _responder(ExportTraceServiceResponse, ExportTracePartialSuccess, "rejected_spans"),
    protobuf_type=TraceRequestView,
)
LOGS = Signal(
    "logs",
    "/v1/logs",
    ExportLogsServiceRequest,
    "log record",
    _responder(ExportLogsServiceResponse, ExportLogsPartialSuccess, "rejected_log_records"),
    protobuf_type=ExportLogsServiceRequest,
)
METRICS = Signal(
    "metrics",
    "/v1/metrics",
    ExportMetricsServiceRequest,
    "metric data point",
    _responder(ExportMetricsServiceResponse, ExportMetricsPartialSuccess, "rejected_data_points"),
    protobuf_type=ExportMetricsServiceRequest,
)
SIGNALS = (TRACES, LOGS, METRICS)
SAID_KINDS = 1000
"""Kinds of ignored items logged once each; the names are the senders', so the memory of them is bounded."""


class ExportPipeline:
    def __init__(
        self,
        writer: GroupCommitWriter,
        *,
        stall: StallRule,
        write_timeout_s: float,
        store_wait_s: float,
        metrics: SelfMetrics,
        limits: SpanLimits = DEFAULT_LIMITS,
    ) -> None:
        self._writer = writer
        self._metrics = metrics
        self._write_timeout_s = write_timeout_s
        self._store_wait_s = store_wait_s
        self._said: set[tuple[str, str]] = set()
        self._decoders: dict[str, Callable[[Message, str], DecodedBatch]] = {
            TRACES.name: lambda request, tenant: decode_traces(request, tenant=tenant, stall=stall, limits=limits),
            LOGS.name: lambda request, tenant: decode_logs(request, tenant=tenant),
            METRICS.name: lambda request, tenant: decode_metrics(request, tenant=tenant, limits=limits),
        }

    def decode(
        self, signal: Signal, request: Message, tenant: str, received: Received, rejected: Sequence[Rejection] = ()
    ) -> DecodedBatch:
        """The request's rows, and its ``ingest_requests`` row; ``rejected``: items the transport took out of
        ``request`` before (the browser route's), counted with the decoder's.

        A parsed request takes many times its size on the wire (each element of a packed array is a message of
        its own), so transports decode a few at a time, on the threads kept for it (``Admission.expansion``), and
        let go of the request as soon as this returns.
        """
        batch = self._decoders[signal.name](request, tenant)
        batch.rejected[:0] = rejected
        self._say_ignored(signal, batch)
        with_request_row(batch, tenant=tenant, signal=signal.name, received=received)
        return batch

    def _say_ignored(self, signal: Signal, batch: DecodedBatch) -> None:
        """Log each kind of item the collector does not read the first time it comes (the sender is told every
        time, in partial_success; ``ignored_kind_items_total`` counts them by kind): a user whose data never shows
        up finds why in the log. At most ``SAID_KINDS`` kinds are remembered; past them, nothing more is logged."""
        for kind, count in batch.ignored.items():
            said = (signal.name, kind)
            if said not in self._said and len(self._said) < SAID_KINDS:
                self._said.add(said)
                log.warning(
                    "%s: not read, as not stream data: %d %s (first seen; counted in ignored_kind_items_total, and "
                    "told to each sender in partial_success)",
                    signal.name,
                    count,
                    kind,
                )

    def spool(self, batch: DecodedBatch, signal: str, reservation: Reservation) -> Ticket:
        """Hand ``batch`` to the writer, its bytes held in the request's ``reservation`` meanwhile; returns once it
        is durable in the spool. Raises Overloaded past the in-flight budget, WriteError if the spool fails."""
        reservation.take(batch.nbytes, resident=True)  # decoded within the turn's memory
        ticket = self._writer.submit(batch)
        try:
            ticket.spooled.result(timeout=self._write_timeout_s)
        except FutureTimeout:
            waited = f"{self._write_timeout_s:g} s"
            raise RetryableWriteError(f"the spool did not take the request within {waited}") from None
        self._metrics.accepted(signal, batch)
        return ticket

    def wait_for_store(self, ticket: Ticket) -> None:
        """While the store keeps up, wait (up to ``store_wait_s``) for the spooled rows to be written, so whoever
        sent them reads them next; while it fails, do not: the spool holds them meanwhile.

        Transports call this holding neither the request nor its rows, and outside the in-flight budget: a
        request waiting for the store costs nothing but its connection.
        """
        if self._store_wait_s > 0 and self._writer.store_healthy:
            with suppress(FutureTimeout):  # durable either way: the store will have it when it catches up
                self._writer.wait_stored(ticket, self._store_wait_s)
