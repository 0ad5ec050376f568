"""streamscope.setup() against a real collector, for each protocol the SDK speaks."""

from __future__ import annotations

import gzip
import logging

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

import streamscope
from tests.support import wait_for_rows


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json", "grpc"])
def test_setup_exports_gzipped_stream_spans(collector, protocol, gzip_by_default):
    endpoint = f"http://{collector.grpc_endpoint}" if protocol == "grpc" else collector.http_url
    provider = streamscope.setup(f"svc-{protocol}", endpoint=endpoint, protocol=protocol, set_global=False)
    with streamscope.StreamRecorder(side="client", provider="openai", tracer_provider=provider) as recorder:
        for _ in range(200):  # more than the SDK's default 128 events
            recorder.chunk(1, 4, 90)
    provider.shutdown()
    client = collector.query_client
    wait_for_rows(client, "SELECT count() FROM streams", 1)
    assert client.query("SELECT service, chunk_count FROM streams").result_rows == [(f"svc-{protocol}", 200)]


def test_unknown_protocol_is_refused():
    with pytest.raises(ValueError, match="http/protobuf, http/json or grpc"):
        streamscope.setup("x", protocol="thrift", set_global=False)


def _export_one_stream(endpoint: str) -> None:
    provider = streamscope.setup("svc", endpoint=endpoint, set_global=False)
    with streamscope.StreamRecorder(side="client", provider="openai", tracer_provider=provider) as recorder:
        for _ in range(50):
            recorder.chunk(1, 4, 90)
    provider.shutdown()


def test_http_requests_are_one_gzip_member_by_default(recording_endpoint, gzip_by_default):
    endpoint, received = recording_endpoint
    _export_one_stream(endpoint)
    [(encoding, body)] = received
    assert encoding == "gzip"
    request = ExportTraceServiceRequest.FromString(gzip.decompress(body))
    [span] = request.resource_spans[0].scope_spans[0].spans
    assert {a.key for a in span.attributes} >= {"streamscope.chunks.offset_us", "streamscope.chunks.tokens"}


def test_the_standard_variable_turns_compression_off(recording_endpoint, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "none")
    endpoint, received = recording_endpoint
    _export_one_stream(endpoint)
    [(encoding, body)] = received
    assert encoding is None
    assert ExportTraceServiceRequest.FromString(body).resource_spans


def test_a_credential_provider_session_is_left_to_the_exporter(gzip_by_default, monkeypatch):
    """The exporter loads the application's session (an entry point the variable names) when none is given: this
    one names none that exists, so the exporter refuses, which it can only do if setup() passed no session."""
    monkeypatch.setenv("OTEL_PYTHON_EXPORTER_OTLP_HTTP_TRACES_CREDENTIAL_PROVIDER", "no-such-provider")
    with pytest.raises(RuntimeError, match="no-such-provider"):
        streamscope.setup("svc", endpoint="http://127.0.0.1:4318", set_global=False)


def test_an_endpoint_naming_the_traces_path_is_refused_with_the_base_url_to_give():
    from streamscope.errors import ConfigError

    with pytest.raises(ConfigError, match=r"names the traces path, which setup\(\) adds itself: give http://h:4318$"):
        streamscope.otlp_exporter("http://h:4318/v1/traces")
    with pytest.raises(ConfigError, match=r"give https://h/otlp$"):
        streamscope.otlp_exporter("https://h/otlp/v1/traces/")


def test_the_grpc_port_for_an_http_exporter_says_what_to_write_instead(caplog):
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        streamscope.otlp_exporter("http://localhost:4317")
    (record,) = [r for r in caplog.records if "usual port" in r.getMessage()]
    assert "give http://localhost:4318, or protocol='grpc'" in record.getMessage()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        streamscope.otlp_exporter("http://localhost:4318")
    assert not [r for r in caplog.records if "usual port" in r.getMessage()]


def test_setup_says_once_that_spans_are_being_dropped_and_once_that_they_get_through(caplog):
    """The collector down: two batches fail, one line says spans are being dropped; a batch that gets through
    says so. (The OTLP exporter's own lines are about its retries.)"""
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class Collector(SpanExporter):
        up = False

        def export(self, spans):
            return SpanExportResult.SUCCESS if self.up else SpanExportResult.FAILURE

    from streamscope._internal.setup import SaysDrops

    collector = Collector()
    exporter = SaysDrops(collector)
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        assert exporter.export([]) is SpanExportResult.FAILURE
        exporter.export([])
        collector.up = True
        exporter.export([])
        exporter.export([])
    said = [r.getMessage() for r in caplog.records if r.name == "streamscope"]
    assert said == [
        "streamscope: the collector did not take 0 span(s): spans are being dropped",
        "streamscope: the collector takes spans again",
    ]


def test_setup_exports_through_the_drop_watch(monkeypatch, caplog):
    """setup() with a collector that is not there: the one line reaches the log."""
    from tests.support import free_port

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    provider = streamscope.setup("app", endpoint=f"http://127.0.0.1:{free_port()}", set_global=False)
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        provider.get_tracer("t").start_span("s").end()
        provider.force_flush()
    provider.shutdown()
    assert any("spans are being dropped" in r.getMessage() for r in caplog.records if r.name == "streamscope")
