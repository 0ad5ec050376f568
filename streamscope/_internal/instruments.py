"""The OTel GenAI streaming histograms (semconv v1.41), recorded from each finished client stream.

Bucket boundaries are passed explicitly: the semconv helpers set none, and the SDK's defaults are in
milliseconds-sized steps that put every chunk gap in the first bucket.

``time_per_output_chunk`` takes one measurement per chunk, and the OpenTelemetry metrics SDK has no way to
record several at once: each ``Histogram.record`` cleans and hashes the measurement's attributes, several
microseconds a chunk, more than the rest of the recorder costs. So a finished stream hands its measurements
to ``RECORDS``, which records them on a thread of its own, as the span processor exports spans on its own: the
application's thread pays one append per stream. ``flush_metrics`` waits for what was handed over (tests, and
before a MeterProvider's last collection); it also runs at exit.
"""

from __future__ import annotations

import atexit
import itertools
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Sequence
from functools import cache
from typing import Final

from opentelemetry import metrics
from opentelemetry.util.types import AttributeValue

from streamscope.threads import named_thread

TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
MAX_PENDING: Final = 10_000
"""Streams waiting to be recorded at most; past it (the recording thread starved) a stream's are dropped."""

log = logging.getLogger(__name__)


@cache
def streaming_histograms(meter_provider: metrics.MeterProvider | None = None) -> tuple[metrics.Histogram, ...]:
    """(time_to_first_chunk, time_per_output_chunk) on ``meter_provider`` (default: the global one)."""
    meter = metrics.get_meter("streamscope", meter_provider=meter_provider)
    return (
        meter.create_histogram(
            TIME_TO_FIRST_CHUNK,
            unit="s",
            description="Time from the request to the first chunk carrying content.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        ),
        meter.create_histogram(
            TIME_PER_OUTPUT_CHUNK,
            unit="s",
            description="Time between consecutive chunks carrying content, once per chunk after the first.",
            explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS),
        ),
    )


_Pending = tuple[metrics.MeterProvider | None, dict[str, AttributeValue], Sequence[int]]


class DeferredRecords:
    """Streams' measurements, recorded on a daemon thread started when the first stream hands some over."""

    def __init__(self) -> None:
        self._reset()

    def _reset(self) -> None:
        self._changed = threading.Condition()
        self._pending: deque[_Pending] = deque()
        self._recording = 0
        self._thread: threading.Thread | None = None
        self.dropped = 0
        """Streams whose measurements were dropped because too many were waiting."""

    def submit(
        self, meter_provider: metrics.MeterProvider | None, labels: dict[str, AttributeValue], offsets_us: Sequence[int]
    ) -> None:
        """Record the stream whose content chunks arrived at ``offsets_us`` (µs from the request), later."""
        with self._changed:
            if len(self._pending) >= MAX_PENDING:
                self.dropped += 1
                if self.dropped == 1:
                    log.warning("streamscope: streaming histograms fall behind; some streams are not recorded")
                return
            self._pending.append((meter_provider, labels, offsets_us))
            if self._thread is None:
                self._thread = named_thread(self._run, "streamscope-metrics")
                self._thread.start()
                # registered now, after the application's MeterProvider registered its shutdown: runs before it
                atexit.register(self.flush)
            self._changed.notify_all()

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Wait until everything handed over so far is recorded; False if that took longer than ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while self._pending or self._recording:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._pending:
                    self._changed.wait()
                batch = list(self._pending)
                self._pending.clear()
                self._recording = len(batch)
            for meter_provider, labels, offsets_us in batch:
                try:
                    record(meter_provider, labels, offsets_us)
                except Exception:
                    log.exception("streamscope: could not record the streaming histograms")
            with self._changed:
                self._recording = 0
                self._changed.notify_all()


def record(
    meter_provider: metrics.MeterProvider | None, labels: dict[str, AttributeValue], offsets_us: Sequence[int]
) -> None:
    """One stream's measurements: the first content chunk's time, and each gap between content chunks."""
    first_chunk, per_chunk = streaming_histograms(meter_provider)
    first_chunk.record(offsets_us[0] / 1e6, labels)
    for previous, current in itertools.pairwise(offsets_us):
        per_chunk.record((current - previous) / 1e6, labels)


RECORDS: Final = DeferredRecords()


def flush_metrics(timeout_s: float = 5.0) -> bool:
    """Wait until the streaming histograms of every stream finished so far are recorded (at most ``timeout_s``);
    False if they were not by then."""
    return RECORDS.flush(timeout_s)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=RECORDS._reset)  # the recording thread did not come along
