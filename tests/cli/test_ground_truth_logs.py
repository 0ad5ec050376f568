"""Ground truth reaches the ground_truth table as OTLP log records, over HTTP and gRPC."""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest, ExportLogsServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

from streamscope import semconv as sc
from streamscope_cli.workload.ground_truth import GroundTruth
from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger
from tests.support import metric, post

TRUTH = GroundTruth(
    cause="kv_pressure",
    node="node-1",
    start_ns=1_800_000_000_123_456_000,
    end_ns=1_800_000_000_623_456_000,
    trace_id="ab" * 16,
    request_id="req-7",
    chunk_indices=(12, 13),
    magnitude=0.5,
    detail={"preemptions": "2"},
)
ROW = "cause, node_name, scenario, trace_id, request_id, chunk_indices, magnitude, toUnixTimestamp64Micro(start_time), "
ROW += "toUnixTimestamp64Micro(end_time), attributes, service"
EXPECTED = (
    "kv_pressure",
    "node-1",
    "kv-pressure",
    "ab" * 16,
    "req-7",
    [12, 13],
    0.5,
    1_800_000_000_123_456,
    1_800_000_000_623_456,
    {"streamscope.truth.detail.preemptions": "2"},
    "sim",
)


def test_ground_truth_over_otlp_http(collector):
    provider = ground_truth_logger("sim", collector.http_url)
    OtlpGroundTruthSink(provider, scenario="kv-pressure").record(TRUTH)
    provider.shutdown()
    assert collector.query_client.query(f"SELECT {ROW} FROM ground_truth").result_rows == [EXPECTED]


def test_ground_truth_over_otlp_grpc(collector):
    from opentelemetry.sdk.resources import Resource

    provider = LoggerProvider(resource=Resource.create({"service.name": "sim"}))
    provider.add_log_record_processor(
        SimpleLogRecordProcessor(GrpcLogExporter(endpoint=collector.grpc_endpoint, insecure=True))
    )
    OtlpGroundTruthSink(provider, scenario="kv-pressure").record(TRUTH)
    provider.shutdown()
    assert collector.query_client.query(f"SELECT {ROW} FROM ground_truth").result_rows == [EXPECTED]


def record(event_name: str, **attributes: AnyValue) -> LogRecord:
    return LogRecord(
        time_unix_nano=1_800_000_000_000_000_000,
        event_name=event_name,
        attributes=[KeyValue(key=k.replace("__", "."), value=v) for k, v in attributes.items()],
    )


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (
            record(sc.STREAMSCOPE_GROUND_TRUTH_EVENT, streamscope__truth__cause=AnyValue(string_value="gremlins")),
            "must be one of",
        ),
        (
            record(
                sc.STREAMSCOPE_GROUND_TRUTH_EVENT,
                streamscope__truth__cause=AnyValue(string_value="connection"),
                streamscope__truth__end_unix_nano=AnyValue(int_value=5),
            ),
            "not before it",
        ),
    ],
)
def test_bad_ground_truth_is_rejected_and_other_logs_are_ignored(collector, bad, reason):
    good = record(sc.STREAMSCOPE_GROUND_TRUTH_EVENT, streamscope__truth__cause=AnyValue(string_value="connection"))
    other = record("app.started")
    body = ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[good, bad, other])])]
    ).SerializeToString()
    response = post(collector, body, path="/v1/logs", timeout=5.0)
    assert response.status_code == 200
    partial = ExportLogsServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_log_records == 1 and "log record 2" in partial.error_message
    assert reason in partial.error_message
    assert collector.query_client.query("SELECT cause FROM ground_truth").result_rows == [("connection",)]
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="logs") == 1
