"""streamscope.setup() against a real collector, for each protocol the SDK speaks."""

from __future__ import annotations

import pytest

import streamscope
from tests.support import wait_for_rows


@pytest.mark.parametrize("protocol", ["http/protobuf", "http/json", "grpc"])
def test_setup_exports_gzipped_stream_spans(collector, protocol, monkeypatch):
    for variable in ("OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION"):
        monkeypatch.delenv(variable, raising=False)
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
