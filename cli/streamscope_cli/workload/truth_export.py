"""Export ground truth as ``streamscope.ground_truth`` OTLP log records, through the OpenTelemetry logs SDK.

The engine and the proxy may run in other processes (or containers) than the collector, so their ground
truth travels the way all telemetry does: OTLP to the collector, which writes the ``ground_truth`` table.
"""

from __future__ import annotations

from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.util.types import AttributeValue

from streamscope import semconv as sc
from streamscope_cli.workload.export_tally import LogTally, Tally
from streamscope_cli.workload.ground_truth import GroundTruth


class OtlpGroundTruthSink:
    def __init__(self, provider: LoggerProvider, scenario: str = "") -> None:
        self._logger = provider.get_logger("streamscope.workload")
        self.scenario = scenario

    def record(self, truth: GroundTruth) -> None:
        attributes: dict[str, AttributeValue] = {
            sc.STREAMSCOPE_TRUTH_CAUSE: truth.cause,
            sc.STREAMSCOPE_NODE_NAME: truth.node,
            sc.STREAMSCOPE_TRUTH_END_UNIX_NANO: truth.end_ns,
            sc.STREAMSCOPE_TRUTH_REQUEST_ID: truth.request_id,
            sc.STREAMSCOPE_TRUTH_CHUNK_INDICES: list(truth.chunk_indices),
            sc.STREAMSCOPE_TRUTH_MAGNITUDE: float(truth.magnitude),
            sc.STREAMSCOPE_TRUTH_SCENARIO: self.scenario,
        }
        attributes.update({f"streamscope.truth.detail.{k}": v for k, v in truth.detail.items()})
        self._logger.emit(
            LogRecord(  # type: ignore[call-overload]  # trace_id beside event_name: the SDK takes both, its stubs split them
                timestamp=truth.start_ns,
                event_name=sc.STREAMSCOPE_GROUND_TRUTH_EVENT,
                trace_id=int(truth.trace_id, 16) if truth.trace_id else None,
                attributes=attributes,
            )
        )


def ground_truth_logger(service_name: str, collector_url: str, tally: Tally | None = None) -> LoggerProvider:
    """A LoggerProvider exporting to the collector's OTLP/HTTP logs endpoint (gzipped, batched); ``tally`` counts
    the records delivered and those that were not."""
    provider = LoggerProvider(resource=Resource.create({"service.name": service_name}))
    exporter: LogRecordExporter = OTLPLogExporter(
        endpoint=f"{collector_url.rstrip('/')}/v1/logs", compression=Compression.Gzip
    )
    if tally is not None:
        exporter = LogTally(exporter, tally)
    provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
    return provider
