"""Per-chunk cost in the application: StreamRecorder.chunk vs span.add_event per chunk vs one span per chunk.

Each contender records the same number of chunks into a real OpenTelemetry SDK TracerProvider (with a
no-op span processor, so only recording is timed, not export). The recorder's one-off cost at the end of
the stream (building the span) is reported separately and also spread over the chunks.

    python -m benchmarks.sdk_overhead [--quick] [--chunks 200000] [--stream-length 500]
"""

from __future__ import annotations

import argparse
import time

from opentelemetry.sdk.trace import SpanLimits, TracerProvider

from streamscope import StreamRecorder


def _provider() -> TracerProvider:
    return TracerProvider(span_limits=SpanLimits(max_events=1_000_000))


def recorder_chunks(n: int, stream_length: int) -> tuple[float, float]:
    provider = _provider()
    hot = finish = 0.0
    for _ in range(n // stream_length):
        recorder = StreamRecorder(side="client", provider="openai", tracer_provider=provider).start()
        t0 = time.perf_counter()
        for _ in range(stream_length):
            recorder.chunk(1, 4, 120)
        t1 = time.perf_counter()
        recorder.finish()
        hot += t1 - t0
        finish += time.perf_counter() - t1
    return hot / n, finish / n


def add_event_chunks(n: int, stream_length: int) -> float:
    tracer = _provider().get_tracer("bench")
    total = 0.0
    for _ in range(n // stream_length):
        span = tracer.start_span("chat")
        t0 = time.perf_counter()
        for _ in range(stream_length):
            span.add_event("chunk", {"tokens": 1, "content_bytes": 4, "wire_bytes": 120})
        total += time.perf_counter() - t0
        span.end()
    return total / n


def span_per_chunk(n: int) -> float:
    tracer = _provider().get_tracer("bench")
    t0 = time.perf_counter()
    for _ in range(n):
        tracer.start_span("chunk", attributes={"tokens": 1, "content_bytes": 4, "wire_bytes": 120}).end()
    return (time.perf_counter() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="20,000 chunks: the same table, sooner")
    parser.add_argument("--chunks", type=int, default=200_000)
    parser.add_argument("--stream-length", type=int, default=500)
    args = parser.parse_args()
    if args.quick:
        args.chunks = 20_000
    hot, finish = recorder_chunks(args.chunks, args.stream_length)
    event = add_event_chunks(args.chunks, args.stream_length)
    span = span_per_chunk(args.chunks)
    print(f"{args.chunks:,} chunks, streams of {args.stream_length}")
    print(f"{'contender':36} {'ns/chunk':>9} {'vs recorder':>12}")
    rows = [
        ("StreamRecorder.chunk (hot path)", hot),
        ("StreamRecorder incl. finish, packed", hot + finish),
        ("span.add_event per chunk", event),
        ("one span per chunk", span),
    ]
    for name, seconds in rows:
        print(f"{name:36} {seconds * 1e9:9.0f} {seconds / (hot + finish):11.1f}x")


if __name__ == "__main__":
    main()
