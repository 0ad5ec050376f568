"""A chat app instrumented by another project's GenAI instrumentation, as its users run it: the real package
instruments the real ``openai`` client, whose streamed calls go to an engine, and a plain OpenTelemetry SDK exports
the spans and the metrics over OTLP/HTTP to a collector (and keeps a copy, printed as JSON, for the test to
compare).

    python -m tests.genai_client SOURCE ENGINE_URL COLLECTOR_URL [CALLS [CLOSE_AFTER [MAX_TOKENS]]]

SOURCE is openllmetry, opentelemetry-genai or streamscope (the SDK's own). With CLOSE_AFTER (0: none), the app
closes each stream once it has read that many chunks, as one does when the user stops the answer; MAX_TOKENS (40 by
default) is how long an answer each call asks for.

Instrumentations patch the ``openai`` module for the whole process, so each runs in a process of its own. The
pieces here import only the OpenTelemetry SDK and ``openai``, so an app in another environment (tests/openlit)
uses them too.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import HistogramDataPoint, InMemoryMetricReader, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


@dataclass
class Exporting:
    """Providers that export to a collector and keep a copy of what they exported."""

    tracer_provider: TracerProvider
    meter_provider: MeterProvider
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader

    @classmethod
    def to(cls, collector_url: str, service: str) -> Exporting:
        resource = Resource.create({"service.name": service})
        spans = InMemorySpanExporter()
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{collector_url}/v1/traces")))
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        metrics = InMemoryMetricReader()
        exporting = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=f"{collector_url}/v1/metrics"), export_interval_millis=3_600_000
        )  # exports what it has when the provider shuts down
        return cls(
            tracer_provider, MeterProvider(resource=resource, metric_readers=[exporting, metrics]), spans, metrics
        )

    def finish(self) -> dict[str, list[dict[str, Any]]]:
        """Export everything, shut down, and return the copies: the spans and the histogram points."""
        self.tracer_provider.shutdown()
        if "streamscope" in sys.modules:  # its streaming histograms are recorded on a thread of their own
            sys.modules["streamscope"].flush_metrics()
        data = self.metrics.get_metrics_data()  # None when nothing was measured
        histograms = [
            {
                "name": metric.name,
                "scope": scope.scope.name,
                "attributes": dict(point.attributes),
                "count": point.count,
                "sum": point.sum,
                "bounds": list(point.explicit_bounds),
                "bucket_counts": list(point.bucket_counts),
            }
            for resource_metrics in (data.resource_metrics if data else ())
            for scope in resource_metrics.scope_metrics
            for metric in scope.metrics
            for point in metric.data.data_points
            if isinstance(point, HistogramDataPoint)
        ]
        self.meter_provider.shutdown()
        spans = [
            {
                "trace_id": format(span.context.trace_id, "032x"),
                "span_id": format(span.context.span_id, "016x"),
                "name": span.name,
                "scope": span.instrumentation_scope.name if span.instrumentation_scope else "",
                "start_ns": span.start_time,
                "end_ns": span.end_time,
                "events": [(event.name, event.timestamp) for event in span.events],
                "dropped_events": span.dropped_events,
                "attributes": {k: plain(v) for k, v in span.attributes.items()},
            }
            for span in self.spans.get_finished_spans()
        ]
        return {"spans": spans, "histograms": histograms}


def plain(value: Any) -> Any:
    """An attribute's value as JSON can carry it (bytes, such as the SDK's packed arrays, as hex)."""
    return value.hex() if isinstance(value, bytes) else list(value) if isinstance(value, tuple) else value


def chat(
    engine_url: str,
    calls: int,
    *,
    refused: bool = True,
    wrap: Callable[[Any], Any] | None = None,
    close_after: int | None = None,
    max_tokens: int = 40,
) -> list[dict[str, Any]]:
    """Stream ``calls`` chat completions from the engine with the ``openai`` client, ``wrap``ped (and, if
    ``refused``, one call the engine refuses), each closed after ``close_after`` chunks if given; when each started
    and each chunk arrived."""
    import openai

    client = openai.OpenAI(base_url=f"{engine_url}/v1", api_key="unused", max_retries=0)
    client = wrap(client) if wrap else client
    received = []
    for call in range(calls):
        started = time.time_ns()
        stream = client.chat.completions.create(
            model="sim-llm",
            messages=[{"role": "user", "content": f"say something, call {call}"}],
            max_tokens=max_tokens,
            stream=True,
            stream_options={"include_usage": True},
        )
        arrivals = []
        with stream:  # leaving the block closes the stream, read to its end or not
            for _ in stream:
                arrivals.append(time.time_ns())
                if close_after and len(arrivals) == close_after:
                    break
        received.append({"started_ns": started, "arrivals_ns": arrivals})
    if refused:
        with contextlib.suppress(openai.BadRequestError):  # no messages
            client.chat.completions.create(model="sim-llm", messages=[], stream=True)
    return received


def instrument(source: str, exporting: Exporting) -> None:
    providers = {"tracer_provider": exporting.tracer_provider, "meter_provider": exporting.meter_provider}
    if source == "openllmetry":
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(**providers)
    elif source == "opentelemetry-genai":
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor as OpenAIv2Instrumentor

        OpenAIv2Instrumentor().instrument(**providers)
    else:
        raise SystemExit(f"unknown source {source!r}")


def main(
    source: str, engine_url: str, collector_url: str, calls: int = 2, close_after: int = 0, max_tokens: int = 40
) -> None:
    exporting = Exporting.to(collector_url, f"chat-{source}")
    wrap = None
    if source == "streamscope":  # the SDK's own client side, to join a server's spans by the trace it propagates
        import streamscope

        trace.set_tracer_provider(exporting.tracer_provider)
        wrap = streamscope.instrument_openai
    else:
        instrument(source, exporting)
    received = chat(engine_url, calls, wrap=wrap, close_after=close_after, max_tokens=max_tokens)
    print(json.dumps({"received": received, **exporting.finish()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:7]))
