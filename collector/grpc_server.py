"""OTLP/gRPC receiver: TraceService/Export over grpcio, calling the same pipeline as HTTP."""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collector.pipeline import TracePipeline
from streamscope.errors import RetryableWriteError, WriteError

log = logging.getLogger(__name__)


class TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, pipeline: TracePipeline, tenant: str) -> None:
        self._pipeline = pipeline
        self._tenant = tenant

    def Export(self, request: ExportTraceServiceRequest, context: grpc.ServicerContext) -> ExportTraceServiceResponse:
        try:
            return self._pipeline.export(request, self._tenant).response()
        except RetryableWriteError as exc:
            context.abort(grpc.StatusCode.UNAVAILABLE, f"{exc}; retry later")
        except WriteError as exc:
            context.abort(grpc.StatusCode.INTERNAL, str(exc))
        except Exception:
            log.exception("unexpected error handling an OTLP/gRPC export")
            context.abort(grpc.StatusCode.INTERNAL, "internal error in the collector; the request was not stored")
        raise AssertionError("unreachable: context.abort raises")


def start_grpc_server(
    pipeline: TracePipeline, *, host: str, port: int, tenant: str, max_request_bytes: int, workers: int = 8
) -> tuple[grpc.Server, int]:
    """Start serving; returns the server and the bound port (useful when ``port`` is 0).

    grpcio enforces ``max_request_bytes`` on the decompressed message and answers RESOURCE_EXHAUSTED.
    """
    server = grpc.server(
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="otlp-grpc"),
        options=[("grpc.max_receive_message_length", max_request_bytes)],
    )
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(TraceService(pipeline, tenant), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    if bound == 0:
        raise OSError(f"cannot listen for OTLP/gRPC on {host}:{port}")
    server.start()
    return server, bound
