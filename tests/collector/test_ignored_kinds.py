"""What the collector does not read is said: each kind named to the sender in partial_success (nothing rejected),
counted, and logged once, so data that never shows up is never missing in silence."""

from __future__ import annotations

import logging

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import InstrumentationScope
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from tests import support
from tests.support import PROTOBUF, metric, plain_stream_span


def framework_spans(count: int) -> ScopeSpans:
    """Spans of an agent framework's steps: its own scope, no call to a model, no stream timeline."""
    spans = [Span(trace_id=bytes([9]) * 16, span_id=bytes([i + 1]) * 8, name="agent_step") for i in range(count)]
    return ScopeSpans(scope=InstrumentationScope(name="agents.framework"), spans=spans)


def test_spans_not_read_are_named_to_the_sender_counted_and_logged_once(collector, caplog):
    caplog.set_level(logging.WARNING, logger="streamscope_collector")
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(scope_spans=[framework_spans(8), ScopeSpans(spans=[plain_stream_span(1, [10, 20])])])
        ]
    )
    for _ in range(2):
        response = support.post(collector, request.SerializeToString(), headers=PROTOBUF, timeout=10)
        assert response.status_code == 200
        partial = ExportTraceServiceResponse.FromString(response.content).partial_success
        assert partial.rejected_spans == 0
        assert "not read (not stream data): 8 span(s) of scope 'agents.framework'" in partial.error_message
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="traces") == 16
    kind = "span(s) of scope 'agents.framework'"
    by_kind = "streamscope_collector_ignored_kind_items_total"
    assert metric(collector.http_url, by_kind, signal="traces", kind=kind) == 16
    logged = [r.getMessage() for r in caplog.records if "span(s) of scope 'agents.framework'" in r.getMessage()]
    assert len(logged) == 1 and "not read" in logged[0]
    assert collector.query_client.query("SELECT count() FROM streams").result_rows[0][0] == 1


def test_gen_ai_counters_not_read_are_named_by_type_and_name(collector):
    counter = Metric(
        name="gen_ai.client.token.usage.total",
        sum=Sum(data_points=[NumberDataPoint(as_int=5, time_unix_nano=1)], is_monotonic=True),
    )
    request = ExportMetricsServiceRequest(
        resource_metrics=[ResourceMetrics(scope_metrics=[ScopeMetrics(metrics=[counter])])]
    )
    response = support.post(collector, request.SerializeToString(), headers=PROTOBUF, timeout=10, path="/v1/metrics")
    partial = ExportMetricsServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_data_points == 0
    assert "1 sum metric(s) named 'gen_ai.client.token.usage.total'" in partial.error_message


def test_ignored_kinds_past_the_labelled_ones_are_counted_together():
    """A sender may name a new scope or metric with every request: the counter by kind keeps a label for the first
    ``IGNORED_KIND_LABELS`` kinds and counts the rest under one, so it cannot grow without bound."""
    from streamscope_collector.metrics import IGNORED_KIND_LABELS, SelfMetrics
    from streamscope_ingest.blocks.batch import DecodedBatch, ignored_kind

    metrics = SelfMetrics()
    for n in range(IGNORED_KIND_LABELS + 5):
        batch = DecodedBatch()
        batch.ignored[ignored_kind("span(s) of scope", f"scope-{n}")] += 2
        metrics.accepted("traces", batch)

    def sample(kind: str) -> float | None:
        labels = {"signal": "traces", "kind": kind}
        return metrics.registry.get_sample_value("streamscope_collector_ignored_kind_items_total", labels)

    assert sample("span(s) of scope 'scope-0'") == 2
    assert sample(f"span(s) of scope 'scope-{IGNORED_KIND_LABELS - 1}'") == 2
    assert sample(f"span(s) of scope 'scope-{IGNORED_KIND_LABELS}'") is None
    assert sample("other kinds") == 5 * 2
