"""Ship samples and events to the collector over OTLP, riding out collector outages with bounded memory.

Samples become OTLP gauge data points named ``streamscope.<source>.<metric>``; events become
``streamscope.engine_event`` log records; the node's identity is the resource. OpenTelemetry's own OTLP/HTTP
exporters do the encoding and the sending. What they cannot do is keep data across an outage: the outbox
here holds what was not yet delivered, retries with backoff, and when full drops the oldest (and counts it).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass, field

from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.sdk._logs import ReadableLogRecord
from opentelemetry.sdk._logs.export import LogRecordExportResult
from opentelemetry.sdk.metrics.export import (
    Gauge,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from streamscope import semconv as sc
from streamscope.threads import named_thread
from streamscope_gpu_agent.events import EngineEvent
from streamscope_gpu_agent.samples import Sample

log = logging.getLogger(__name__)
_SCOPE = InstrumentationScope("streamscope.gpu_agent")


@dataclass
class OutboxStats:
    sent_samples: int = 0
    sent_events: int = 0
    dropped_samples: int = 0
    dropped_events: int = 0
    failed_exports: int = 0


@dataclass
class Outbox:
    """Bounded FIFO of what awaits delivery; the oldest is dropped first when it overflows."""

    max_samples: int = 50_000
    max_events: int = 5_000
    samples: deque[Sample] = field(default_factory=deque)
    events: deque[EngineEvent] = field(default_factory=deque)
    stats: OutboxStats = field(default_factory=OutboxStats)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, samples: list[Sample], events: list[EngineEvent]) -> None:
        with self.lock:
            self.samples.extend(samples)
            self.events.extend(events)
            self._trim()

    def take(self, samples: int, events: int) -> tuple[list[Sample], list[EngineEvent]]:
        with self.lock:
            return (
                [self.samples.popleft() for _ in range(min(samples, len(self.samples)))],
                [self.events.popleft() for _ in range(min(events, len(self.events)))],
            )

    def give_back(self, samples: list[Sample], events: list[EngineEvent]) -> None:
        """Undelivered items go back to the front, in order, still within the bounds."""
        with self.lock:
            self.samples.extendleft(reversed(samples))
            self.events.extendleft(reversed(events))
            self._trim()

    def _trim(self) -> None:
        """Drop the oldest past the bounds (the caller holds the lock)."""
        while len(self.samples) > self.max_samples:
            self.samples.popleft()
            self.stats.dropped_samples += 1
        while len(self.events) > self.max_events:
            self.events.popleft()
            self.stats.dropped_events += 1


def agent_resource(node: str, host: str, engine_url: str) -> Resource:
    return Resource.create(
        {
            "service.name": "streamscope-gpu-agent",
            "host.name": host,
            sc.STREAMSCOPE_NODE_NAME: node,
            sc.STREAMSCOPE_ENGINE_URL: engine_url,
        }
    )


def metrics_data(resource: Resource, samples: list[Sample]) -> MetricsData:
    """One gauge per metric name, one data point per sample."""
    by_name: dict[str, list[NumberDataPoint]] = {}
    for s in samples:
        attributes: dict[str, str | int] = {}
        if s.engine:
            attributes[sc.STREAMSCOPE_ENGINE_ID] = s.engine
        if s.gpu_uuid:
            attributes.update(
                {
                    sc.STREAMSCOPE_GPU_UUID: s.gpu_uuid,
                    sc.STREAMSCOPE_GPU_INDEX: s.gpu_index,
                    sc.STREAMSCOPE_GPU_NAME: s.gpu_name,
                }
            )
        name = f"{sc.METRIC_PREFIX}{s.source}.{s.metric}"
        by_name.setdefault(name, []).append(NumberDataPoint(attributes, s.time_ns, s.time_ns, s.value))
    metrics = [Metric(name, None, None, Gauge(points)) for name, points in by_name.items()]
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(_SCOPE, metrics, "")], "")])


def log_records(resource: Resource, events: list[EngineEvent]) -> list[ReadableLogRecord]:
    records = []
    for event in events:
        attributes: dict[str, str | int | float] = {
            sc.STREAMSCOPE_EVENT_KIND: event.kind,
            sc.STREAMSCOPE_EVENT_MAGNITUDE: float(event.magnitude),
        }
        if event.end_ns is not None:
            attributes[sc.STREAMSCOPE_EVENT_END_UNIX_NANO] = event.end_ns
        if event.engine:
            attributes[sc.STREAMSCOPE_ENGINE_ID] = event.engine
        if event.gpu_uuid:
            attributes[sc.STREAMSCOPE_GPU_UUID] = event.gpu_uuid
        if event.xid is not None:
            attributes[sc.STREAMSCOPE_EVENT_XID] = event.xid
        record = LogRecord(
            timestamp=event.start_ns, event_name=sc.STREAMSCOPE_ENGINE_EVENT_EVENT, attributes=attributes
        )
        records.append(ReadableLogRecord(record, resource=resource, instrumentation_scope=_SCOPE))
    return records


class OtlpShipper:
    """Drains the outbox to the collector from a background thread; backs off while the collector is away."""

    def __init__(
        self,
        collector_url: str,
        resource: Resource,
        outbox: Outbox,
        *,
        interval_s: float = 1.0,
        batch_samples: int = 5_000,
        batch_events: int = 500,
        max_backoff_s: float = 30.0,
        timeout_s: float = 5.0,
    ) -> None:
        base = collector_url.rstrip("/")
        self._metrics = OTLPMetricExporter(f"{base}/v1/metrics", timeout=timeout_s, compression=Compression.Gzip)
        self._logs = OTLPLogExporter(f"{base}/v1/logs", timeout=timeout_s, compression=Compression.Gzip)
        self._resource = resource
        self.outbox = outbox
        self._interval_s = interval_s
        self._batch = (batch_samples, batch_events)
        self._max_backoff_s = max_backoff_s
        self._stop = threading.Event()
        self._thread = named_thread(self._run, "gpu-agent-shipper")

    def start(self) -> OtlpShipper:
        self._thread.start()
        return self

    def flush(self) -> bool:
        """Try to deliver everything now; True when the outbox is empty."""
        while True:
            samples, events = self.outbox.take(*self._batch)
            if not samples and not events:
                return True
            if not self._send(samples, events):
                return False

    def stop(self, drain: bool = True) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started
            self._thread.join()
        if drain:
            self.flush()
        self._metrics.shutdown()
        self._logs.shutdown()

    def _run(self) -> None:
        backoff = self._interval_s
        while not self._stop.wait(backoff):
            backoff = self._interval_s if self.flush() else min(backoff * 2, self._max_backoff_s)

    def _send(self, samples: list[Sample], events: list[EngineEvent]) -> bool:
        stats = self.outbox.stats
        if samples:
            if self._metrics.export(metrics_data(self._resource, samples)) != MetricExportResult.SUCCESS:
                stats.failed_exports += 1
                self.outbox.give_back(samples, events)
                return False
            stats.sent_samples += len(samples)
        if events:
            if self._logs.export(log_records(self._resource, events)) != LogRecordExportResult.SUCCESS:
                stats.failed_exports += 1
                self.outbox.give_back([], events)
                return False
            stats.sent_events += len(events)
        return True
