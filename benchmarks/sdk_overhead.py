"""Per-chunk cost in the application: StreamRecorder.chunk vs span.add_event per chunk vs one span per chunk.

Each contender records the same number of chunks into a real OpenTelemetry SDK TracerProvider, whose span
processor encodes the finished spans. The recorder's one-off cost at the end of the stream (building the
span) is reported separately and also spread over the chunks. A client recorder also records the OTel GenAI
streaming histograms, one measurement per chunk, on a thread of its own (counted here only as it competes for the
interpreter; ``benchmarks.sdk_setup`` counts its CPU): the global meter provider does nothing with them, so one
row gives the recorder a real SDK MeterProvider instead. The spans are encoded
by the OTLP exporter's own encoder, timed apart: the exporter does that in the application's process too (in
the batch processor's thread), so the last columns add it.

    python -m benchmarks.sdk_overhead [--quick] [--chunks 200000] [--stream-length 500]
"""

from __future__ import annotations

import argparse
import time

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, SpanProcessor, TracerProvider

from streamscope import StreamRecorder, flush_metrics


class _Encoder(SpanProcessor):
    """Encodes finished spans as the OTLP exporter does, in batches of 512 as BatchSpanProcessor exports them,
    and keeps only the time that took: holding every span would tax each contender with the garbage
    collector's walks over them."""

    def __init__(self) -> None:
        self.batch: list[ReadableSpan] = []
        self.seconds = 0.0

    def on_end(self, span: ReadableSpan) -> None:
        self.batch.append(span)
        if len(self.batch) == 512:
            self.flush()

    def flush(self) -> float:
        t0 = time.perf_counter()
        encode_spans(self.batch).SerializeToString()
        self.seconds += time.perf_counter() - t0
        self.batch.clear()
        return self.seconds


def _provider() -> tuple[TracerProvider, _Encoder]:
    provider, encoder = TracerProvider(span_limits=SpanLimits(max_events=1_000_000)), _Encoder()
    provider.add_span_processor(encoder)
    return provider, encoder


def recorder_chunks(
    n: int, stream_length: int, encoding: str, meter_provider: MeterProvider | None = None
) -> tuple[float, float, float]:
    provider, encoder = _provider()
    hot = finish = 0.0
    for _ in range(n // stream_length):
        recorder = StreamRecorder(
            side="client",
            provider="openai",
            encoding=encoding,
            tracer_provider=provider,
            meter_provider=meter_provider,
        )
        recorder.start()
        t0 = time.perf_counter()
        for _ in range(stream_length):
            recorder.chunk(1, 4, 120)
        t1 = time.perf_counter()
        encoding_before = encoder.seconds
        recorder.finish()
        hot += t1 - t0
        finish += time.perf_counter() - t1 - (encoder.seconds - encoding_before)
    flush_metrics(timeout_s=600)  # the histograms' thread: done before the next contender starts
    return hot / n, finish / n, encoder.flush() / n


def add_event_chunks(n: int, stream_length: int) -> tuple[float, float]:
    provider, encoder = _provider()
    tracer = provider.get_tracer("bench")
    total = 0.0
    for _ in range(n // stream_length):
        span = tracer.start_span("chat")
        t0 = time.perf_counter()
        for _ in range(stream_length):
            span.add_event("chunk", {"tokens": 1, "content_bytes": 4, "wire_bytes": 120})
        total += time.perf_counter() - t0
        span.end()
    return total / n, encoder.flush() / n


def span_per_chunk(n: int) -> tuple[float, float]:
    provider, encoder = _provider()
    tracer = provider.get_tracer("bench")
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.start_span("chunk", attributes={"tokens": 1, "content_bytes": 4, "wire_bytes": 120}).end()
    recorded = time.perf_counter() - t0 - encoder.seconds
    return recorded / n, encoder.flush() / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 chunks: the same table, sooner")
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--stream-length", type=int, default=500)
    args = parser.parse_args()
    if args.quick:
        args.chunks = 20_000
    hot, finish, encoded = recorder_chunks(args.chunks, args.stream_length, "packed")
    _, events_finish, events_encoded = recorder_chunks(args.chunks, args.stream_length, "events")
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    _, metered_finish, _ = recorder_chunks(args.chunks, args.stream_length, "packed", meters)
    rows: list[tuple[str, float, float | None]] = [
        ("StreamRecorder.chunk (hot path)", hot, None),
        ("StreamRecorder incl. finish, packed", hot + finish, encoded),
        ("StreamRecorder incl. finish, events", hot + events_finish, events_encoded),
        ("… packed, with a MeterProvider", hot + metered_finish, encoded),
        ("span.add_event per chunk", *add_event_chunks(args.chunks, args.stream_length)),
        ("one span per chunk", *span_per_chunk(args.chunks)),
    ]
    recorded, total = hot + finish, hot + finish + encoded
    print(f"{args.chunks:,} chunks, streams of {args.stream_length}")
    print(f"{'contender':36} {'ns/chunk':>9} {'vs recorder':>12} {'+ OTLP encoding':>16} {'vs recorder':>12}")
    for name, seconds, encoding in rows:
        line = f"{name:36} {seconds * 1e9:9.0f} {seconds / recorded:11.1f}x"
        if encoding is not None:
            line += f" {(seconds + encoding) * 1e9:16.0f} {(seconds + encoding) / total:11.1f}x"
        print(line)


if __name__ == "__main__":
    main()
