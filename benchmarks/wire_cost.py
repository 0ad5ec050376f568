"""OTLP bytes per chunk on the wire: packed vs events encoding, protobuf vs JSON, with and without gzip.

Records the same synthetic streams with StreamRecorder in each encoding (a fixed clock, so both encodings
carry identical timelines), encodes the finished spans with OpenTelemetry's own OTLP encoders, and divides
the request size by the number of chunks.

    python -m benchmarks.wire_cost [--quick] [--streams 50] [--chunks 250]
"""

from __future__ import annotations

import argparse
import gzip

import numpy as np
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_protobuf
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope._internal.recorder as recorder_module
from benchmarks.chunk_codecs import synthetic_chunks
from streamscope import StreamRecorder


class _Clock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def perf_counter_ns(self) -> int:
        return self.now

    def time_ns(self) -> int:
        return 1_800_000_000_000_000_000 + self.now


def spans(encoding: str, streams: int, chunks: int):
    data = synthetic_chunks(streams, chunks)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(span_limits=SpanLimits(max_events=1_000_000))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    clock = _Clock()
    recorder_module.time = clock
    bounds = np.flatnonzero(np.diff(data["stream"])) + 1
    for rows in np.split(np.arange(data["stream"].size), bounds):
        recorder = StreamRecorder(
            side="client", provider="openai", request_model="gpt-4o-mini", encoding=encoding, tracer_provider=provider
        ).start()
        for gap, tokens, content, wire in zip(
            data["gap_us"][rows], data["tokens"][rows], data["content_bytes"][rows], data["wire_bytes"][rows]
        ):
            clock.now += int(gap) * 1000
            recorder.chunk(int(tokens), int(content), int(wire))
        recorder.finish()
    return exporter.get_finished_spans(), int(data["stream"].size)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=250)
    args = parser.parse_args()
    if args.quick:
        args.streams = 5
    print(f"{'encoding':9} {'format':9} {'bytes/chunk':>12} {'gzip bytes/chunk':>17}")
    for encoding in ("packed", "events"):
        finished, total_chunks = spans(encoding, args.streams, args.chunks)
        bodies = {
            "protobuf": encode_protobuf(finished).SerializeToString(),
            "json": encode_json(finished).to_json().encode(),
        }
        for name, body in bodies.items():
            raw, packed = len(body) / total_chunks, len(gzip.compress(body)) / total_chunks
            print(f"{encoding:9} {name:9} {raw:12.2f} {packed:17.2f}")


if __name__ == "__main__":
    main()
