"""OTLP/gRPC receiver: the Trace, Logs and Metrics services over grpcio, on the same pipeline as HTTP.

Messages arrive as bytes and are parsed here, as HTTP bodies are: one that does not parse is the sender's error
(INVALID_ARGUMENT, counted as a bad request, each cause logged once), not an internal one.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from streamscope.errors import DecodeError, LimitExceeded
from streamscope_collector.admission import Admission
from streamscope_collector.log_once import LogOnce
from streamscope_collector.metrics import SelfMetrics
from streamscope_collector.pipeline import LOGS, METRICS, TRACES, ExportPipeline, ExportResult, Signal
from streamscope_collector.status import answer
from streamscope_ingest.decode.otlp_body import parse_protobuf
from streamscope_ingest.decode.request_log import Received
from streamscope_ingest.durability.group_commit import Ticket


class _Exporter:
    """One export call: admission, the pipeline, and the status OTLP/gRPC gives each failure."""

    def __init__(self, pipeline: ExportPipeline, admission: Admission, metrics: SelfMetrics) -> None:
        self._pipeline, self._admission, self._metrics = pipeline, admission, metrics
        self._undecodable = LogOnce(log)

    def __call__(self, signal: Signal, message: bytes, context: grpc.ServicerContext) -> Message:
        try:
            tenant = self._admission.credentials.tenant(dict(context.invocation_metadata()).get("authorization"))
            request = parse_protobuf(message, signal.protobuf_type)
            result, ticket = self._accept(signal, request, tenant)
            self._pipeline.wait_for_store(ticket)
            return signal.response(result)
        except Exception as exc:
            if isinstance(exc, DecodeError) and not isinstance(exc, LimitExceeded):
                cause = f"{signal.name}: {exc}"
                self._undecodable.warning(cause, "undecodable OTLP/gRPC %s export: %s", signal.name, exc)
            failure = answer(exc, f"an OTLP/gRPC {signal.name} export")
            self._metrics.refused(failure.http)  # counted by the HTTP status it stands for, as on the HTTP side
            context.abort(failure.grpc, failure.message)
        raise AssertionError("unreachable: context.abort raises")

    def _accept(self, signal: Signal, request: Message, tenant: str) -> tuple[ExportResult, Ticket]:
        """Decode and spool the request within the in-flight budget; returns once it is durable, having let go of
        the rows (gRPC holds the parsed request until the call ends)."""
        size = request.ByteSize()
        with self._admission.budget.reserve() as reservation:
            reservation.take(size)
            self._admission.rate.admit(tenant, size)
            received = Received("grpc", "protobuf", "", size, size)
            batch = self._admission.expansion.decode(
                size, lambda: self._pipeline.decode(signal, request, tenant, received)
            )
            ticket = self._pipeline.spool(batch, signal.name, reservation)
        return ExportResult.of(batch, signal), ticket


log = logging.getLogger(__name__)

_SERVICES = {
    TRACES: trace_service_pb2.DESCRIPTOR.services_by_name["TraceService"],
    LOGS: logs_service_pb2.DESCRIPTOR.services_by_name["LogsService"],
    METRICS: metrics_service_pb2.DESCRIPTOR.services_by_name["MetricsService"],
}
"""Each signal's OTLP service; its one method, Export, takes the message's bytes (parsed as ``Signal.protobuf_type``
by the exporter, so that a message that does not parse is answered as the sender's error)."""


def _service(signal: Signal, export: _Exporter) -> grpc.GenericRpcHandler:
    service = _SERVICES[signal]
    (method,) = service.methods
    handler = grpc.unary_unary_rpc_method_handler(
        lambda message, context: export(signal, message, context),
        request_deserializer=None,  # the bytes as they came
        response_serializer=lambda response: response.SerializeToString(),
    )
    return grpc.method_handlers_generic_handler(service.full_name, {method.name: handler})


def start_grpc_server(
    pipeline: ExportPipeline,
    admission: Admission,
    metrics: SelfMetrics,
    *,
    host: str,
    port: int,
    max_request_bytes: int,
    workers: int = 8,
) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the bound port (useful when ``port`` is 0).

    grpcio enforces ``max_request_bytes`` on the decompressed message and answers RESOURCE_EXHAUSTED.
    """
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes)],
    )
    export = _Exporter(pipeline, admission, metrics)
    server.add_generic_rpc_handlers([_service(signal, export) for signal in _SERVICES])
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound
