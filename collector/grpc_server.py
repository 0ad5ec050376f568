"""OTLP/gRPC receiver: the Trace, Logs and Metrics services over grpcio, on the same pipeline as HTTP."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2_grpc
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from collector.pipeline import LOGS, METRICS, TRACES, ExportPipeline, Signal
from ingest.request_log import Received
from streamscope.errors import RetryableWriteError, WriteError

log = logging.getLogger(__name__)


def _export(pipeline: ExportPipeline, tenant: str, signal: Signal, request: Message, context: grpc.ServicerContext):
    try:
        received = Received("grpc", "protobuf", "", None)
        return signal.response(pipeline.export(signal, request, tenant, received))
    except RetryableWriteError as exc:
        context.abort(grpc.StatusCode.UNAVAILABLE, f"{exc}; retry later")
    except WriteError as exc:
        context.abort(grpc.StatusCode.INTERNAL, str(exc))
    except Exception:
        log.exception("unexpected error handling an OTLP/gRPC %s export", signal.name)
        context.abort(grpc.StatusCode.INTERNAL, "internal error in the collector; the request was not stored")
    raise AssertionError("unreachable: context.abort raises")


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, pipeline: ExportPipeline, tenant: str) -> None:
        self._pipeline, self._tenant = pipeline, tenant

    def Export(self, request, context):
        return _export(self._pipeline, self._tenant, TRACES, request, context)


class LogsService(logs_service_pb2_grpc.LogsServiceServicer):
    def __init__(self, pipeline: ExportPipeline, tenant: str) -> None:
        self._pipeline, self._tenant = pipeline, tenant

    def Export(self, request, context):
        return _export(self._pipeline, self._tenant, LOGS, request, context)


class MetricsService(metrics_service_pb2_grpc.MetricsServiceServicer):
    def __init__(self, pipeline: ExportPipeline, tenant: str) -> None:
        self._pipeline, self._tenant = pipeline, tenant

    def Export(self, request, context):  # the generated servicer names it
        return _export(self._pipeline, self._tenant, METRICS, request, context)


def start_grpc_server(
    pipeline: ExportPipeline, *, host: str, port: int, tenant: str, max_request_bytes: int, workers: int = 8
) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the bound port (useful when ``port`` is 0).

    grpcio enforces ``max_request_bytes`` on the decompressed message and answers RESOURCE_EXHAUSTED.
    """
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes)],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(pipeline, tenant), server)
    logs_service_pb2_grpc.add_LogsServiceServicer_to_server(LogsService(pipeline, tenant), server)
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(MetricsService(pipeline, tenant), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound
