"""OTLP/gRPC receiver: the Trace, Logs and Metrics services over grpcio, on the same pipeline as HTTP."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from collector.admission import Admission
from collector.auth import Unauthorized
from collector.pipeline import LOGS, METRICS, TRACES, ExportPipeline, Signal
from ingest.request_log import Received
from streamscope.errors import LimitExceeded, RetryableWriteError, WriteError

log = logging.getLogger(__name__)


def _export(
    pipeline: ExportPipeline, admission: Admission, signal: Signal, request: Message, context: grpc.ServicerContext
):
    try:
        tenant = admission.credentials.tenant(dict(context.invocation_metadata()).get("authorization"))
        size = request.ByteSize()
        with admission.budget.reserve() as reservation:
            reservation.take(size)
            admission.rate.admit(tenant, size)
            received = Received("grpc", "protobuf", "", None)
            return signal.response(pipeline.export(signal, request, tenant, received))
    except Unauthorized as exc:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, str(exc))
    except LimitExceeded as exc:
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
    except RetryableWriteError as exc:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"{exc}; retry later")
    except WriteError as exc:
        context.abort(grpc.StatusCode.INTERNAL, str(exc))
    except Exception:
        log.exception("unexpected error handling an OTLP/gRPC %s export", signal.name)
        context.abort(grpc.StatusCode.INTERNAL, "internal error in the collector; the request was not stored")
    raise AssertionError("unreachable: context.abort raises")


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, pipeline: ExportPipeline, admission: Admission) -> None:
        self._pipeline, self._admission = pipeline, admission

    def Export(self, request, context):
        return _export(self._pipeline, self._admission, TRACES, request, context)


class LogsService(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, pipeline: ExportPipeline, admission: Admission) -> None:
        self._pipeline, self._admission = pipeline, admission

    def Export(self, request, context):
        return _export(self._pipeline, self._admission, LOGS, request, context)


class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, pipeline: ExportPipeline, admission: Admission) -> None:
        self._pipeline, self._admission = pipeline, admission

    def Export(self, request, context):  # the generated servicer names it
        return _export(self._pipeline, self._admission, METRICS, request, context)


def start_grpc_server(
    pipeline: ExportPipeline,
    admission: Admission,
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
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(pipeline, admission), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsService(pipeline, admission), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsService(pipeline, admission), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound
