"""The OTel GenAI streaming histograms (semconv v1.41), recorded from each finished client stream.

Bucket boundaries are passed explicitly: the semconv helpers set none, and the SDK's defaults are in
milliseconds-sized steps that put every chunk gap in the first bucket.
"""

from __future__ import annotations

from functools import cache
from typing import Final

from opentelemetry import metrics

TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)


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
