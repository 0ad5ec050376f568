"""The in-place OTLP trace encoding against OpenTelemetry's own encoder, byte for byte, and the exporter that uses
it sending through a real socket."""

from __future__ import annotations

import gzip
import logging

from opentelemetry import context, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as stock_encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags, TraceState

import streamscope
from streamscope._internal.otlp_http_exporter import InPlaceEncodingExporter
from streamscope._internal.setup import otlp_exporter
from streamscope._internal.span_encoding import encode_spans


def recorded_spans() -> list[ReadableSpan]:
    """Spans of two resources and three scopes, every kind, events, links, status and attribute types, recorded
    by the SDK (a stream span among them)."""
    finished: list[ReadableSpan] = []
    for resource in (Resource.create({"service.name": "a"}), Resource({"service.name": "b"}, schema_url="s://r")):
        provider, spans = TracerProvider(resource=resource), InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(spans))
        tracers = [
            provider.get_tracer("one"),
            provider.get_tracer("two", "1.2", schema_url="s://scope", attributes={"scope.key": "v"}),
        ]
        remote = SpanContext(7, 9, is_remote=True, trace_flags=TraceFlags(1), trace_state=TraceState([("k", "v")]))
        for index, kind in enumerate(SpanKind):
            tracer = tracers[index % 2]
            with tracer.start_as_current_span("parent", kind=kind, links=[Link(remote, {"link.key": 3})]) as parent:
                parent.set_attributes(
                    {"s": "x", "b": True, "i": -5, "f": 1.5, "by": b"\x00\x01", "ls": ["a", "b"], "li": [1, 2]}
                )
                parent.add_event("e", {"n": 1}, timestamp=123)
                parent.add_event("bare")
                with tracer.start_as_current_span("child") as child:
                    child.set_status(Status(StatusCode.ERROR, "it broke"))
            token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
            try:
                tracer.start_span("remote child").end()
            finally:
                context.detach(token)
        with streamscope.StreamRecorder(side="client", provider="openai", tracer_provider=provider) as recorder:
            for _ in range(20):
                recorder.chunk(1, 4, 90)
        finished += spans.get_finished_spans()
        provider.shutdown()
    return finished


def test_the_request_is_the_stock_encoders_byte_for_byte():
    spans = recorded_spans()
    assert len(spans) > 20
    ours, stock = encode_spans(spans), stock_encode_spans(spans)
    assert ours.SerializeToString(deterministic=True) == stock.SerializeToString(deterministic=True)
    assert len(ours.resource_spans) == 2 and len(ours.resource_spans[1].scope_spans) == 3  # one, two, the SDK's


def test_values_the_sdk_would_not_set_are_encoded_as_the_stock_encoder_does(caplog):
    context = SpanContext(1, 2, is_remote=False)
    span = ReadableSpan(
        name="odd",
        context=context,
        attributes={"map": {"a": 1, 2: ["x", None]}, "none": None, "empty": [], "bad": object(), "after": "kept"},
        events=[Event("e", {"nested": [[1, 2]]}, timestamp=5)],
        resource=Resource({}),
        instrumentation_scope=None,
        start_time=1,
        end_time=2,
    )
    with caplog.at_level(logging.ERROR):
        ours = encode_spans([span])
    stock = stock_encode_spans([span])
    assert ours.SerializeToString(deterministic=True) == stock.SerializeToString(deterministic=True)
    kept = [kv.key for kv in ours.resource_spans[0].scope_spans[0].spans[0].attributes]
    assert kept == ["map", "none", "empty", "after"]  # the value it cannot encode is left out, and logged
    assert "Failed to encode key bad" in caplog.text


def test_setup_exports_through_the_in_place_encoding(recording_endpoint, gzip_by_default):
    endpoint, received = recording_endpoint
    exporter = otlp_exporter(endpoint)  # what setup() exports through
    assert isinstance(exporter, InPlaceEncodingExporter) and exporter.encodes_in_place
    spans = recorded_spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    [(encoding, body)] = received
    assert encoding == "gzip"
    assert gzip.decompress(body) == stock_encode_spans(spans).SerializePartialToString()


def test_a_batch_over_the_size_limit_is_dropped_as_the_stock_exporter_drops_it(recording_endpoint, caplog):
    endpoint, received = recording_endpoint
    exporter = InPlaceEncodingExporter(endpoint=f"{endpoint}/v1/traces", max_request_size=100)
    with caplog.at_level(logging.WARNING):
        assert exporter.export(recorded_spans()) is SpanExportResult.FAILURE
    assert not received and "exceeds max_request_size 100" in caplog.text
    exporter.shutdown()
    assert exporter.export([]) is SpanExportResult.FAILURE  # after shutdown, as the stock exporter
