"""Agent samples and events reach engine_samples and engine_events through real OTLP exporters."""

from __future__ import annotations

import time

import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetricExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetricExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from streamscope import semconv as sc
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.events import EngineEvent
from streamscope_gpu_agent.export import OtlpShipper, Outbox, agent_resource
from streamscope_gpu_agent.samples import Sample
from tests.support import free_port, metric


@pytest.mark.parametrize("transport", ["http", "grpc"])
def test_an_sdk_gauge_named_by_the_convention_lands_in_engine_samples(collector, transport):
    exporter = (
        HttpMetricExporter(f"{collector.http_url}/v1/metrics")
        if transport == "http"
        else GrpcMetricExporter(collector.grpc_endpoint, insecure=True)
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=60_000)
    resource = Resource.create({sc.STREAMSCOPE_NODE_NAME: "gpu-node-3", "host.name": "h3"})
    provider = MeterProvider(resource=resource, metric_readers=[reader])
    meter = provider.get_meter("test")
    meter.create_gauge("streamscope.engine.kv_usage").set(0.73, {sc.STREAMSCOPE_ENGINE_ID: "vllm"})
    meter.create_gauge("app.queue_depth").set(4)  # not ours: ignored
    provider.shutdown()
    rows = collector.query_client.query(
        "SELECT node_name, host, source, metric, engine, value FROM engine_samples"
    ).result_rows
    assert rows == [("gpu-node-3", "h3", "engine", "kv_usage", "vllm", 0.73)]
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="metrics") == 1


def test_shipper_delivers_samples_and_events(collector):
    outbox = Outbox()
    shipper = OtlpShipper(collector.http_url, agent_resource("node-a", "host-a", "http://e:8000/metrics"), outbox)
    now = time.time_ns()
    samples = [
        Sample(now, "engine", m.ENGINE_KV_USAGE, 0.5, engine="vllm"),
        Sample(now, "gpu", m.GPU_POWER, 301.5, gpu_uuid="GPU-abc", gpu_index=1, gpu_name="H100"),
    ]
    events = [
        EngineEvent("preemption", now - 250_000_000, now, 2.0, engine="vllm"),
        EngineEvent("xid", now, now, 79.0, gpu_uuid="GPU-abc", xid=79),
        EngineEvent("kv_high_water", now, None, 0.97, engine="vllm"),
        EngineEvent("gpu_recovery_action", now, now, 2.0, gpu_uuid="GPU-abc", xid=2),
    ]
    outbox.add(samples, events)
    assert shipper.flush()
    shipper.stop()
    query = collector.query_client.query
    assert query(
        "SELECT source, metric, engine, gpu_uuid, gpu_index, value, engine_url FROM engine_samples ORDER BY source"
    ).result_rows == [
        ("engine", "kv_usage", "vllm", "", -1, 0.5, "http://e:8000/metrics"),
        ("gpu", "power_watts", "", "GPU-abc", 1, 301.5, "http://e:8000/metrics"),
    ]
    assert query(
        "SELECT kind, node_name, engine, magnitude, xid, end_time IS NULL, "
        "dateDiff('millisecond', start_time, end_time) FROM engine_events ORDER BY kind"
    ).result_rows == [
        ("gpu_recovery_action", "node-a", "", 2.0, 2, False, 0),
        ("kv_high_water", "node-a", "vllm", 0.97, None, True, None),
        ("preemption", "node-a", "vllm", 2.0, None, False, 250),
        ("xid", "node-a", "", 79.0, 79, False, 0),
    ]


def test_the_outbox_keeps_data_through_a_collector_outage_within_its_bound(storage_dsn):
    port = free_port()
    outbox = Outbox(max_samples=100)
    shipper = OtlpShipper(f"http://127.0.0.1:{port}", agent_resource("node-b", "h", ""), outbox, timeout_s=0.5)
    first = time.time_ns()
    outbox.add([Sample(first + i, "engine", m.ENGINE_REQUESTS_RUNNING, float(i)) for i in range(150)], [])
    assert not shipper.flush()  # nobody listening: nothing lost, nothing sent
    assert len(outbox.samples) == 100 and outbox.stats.dropped_samples == 50
    assert outbox.stats.failed_exports == 1
    config = CollectorConfig(storage_dsn=storage_dsn, http_port=port, grpc_port=None, store_wait_s=5.0)
    collector = Collector(config).start()  # the test reads what it sent as soon as it is answered
    try:
        assert shipper.flush()
        shipper.stop()
        values = collector.query_client.query("SELECT min(value), max(value), count() FROM engine_samples").result_rows[
            0
        ]
        assert values == (50.0, 149.0, 100)  # the oldest 50 were dropped, the newest kept in order
    finally:
        collector.stop()
