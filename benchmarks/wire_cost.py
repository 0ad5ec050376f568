"""OTLP bytes per chunk on the wire: packed vs events encoding, protobuf vs JSON, with and without gzip.

Records the same synthetic streams with StreamRecorder in each encoding (a fixed clock, so both encodings
carry identical timelines), encodes the finished spans with OpenTelemetry's own OTLP encoders, and divides
the request size by the number of chunks. The packed arrays go once as our SDKs send them (bytes) and once as
int arrays, as an SDK without bytes attributes sends them. The last column is what reading a request costs
the collector: parsing the body and ``decode_traces``, per chunk, the best of as many reads as fit in a second (five at
least), the garbage collector paused.

    python -m benchmarks.wire_cost [--quick] [--streams 50] [--chunks 250]
"""

from __future__ import annotations

import argparse
import gc
import gzip
import time
from collections.abc import Callable, Sequence

import numpy as np
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans as encode_json
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as encode_protobuf
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import streamscope._internal.recorder as recorder_module
from benchmarks.chunk_codecs import synthetic_chunks
from streamscope import StreamRecorder
from streamscope_collector.pipeline import TRACES
from streamscope_ingest.decode.int_arrays import decode_int_array
from streamscope_ingest.decode.traces import decode_traces


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


def as_int_arrays(finished: Sequence[ReadableSpan]) -> list[ReadableSpan]:
    """The same spans with each packed array as an int array instead of bytes."""

    def ints(value: object) -> object:
        if not isinstance(value, bytes):
            return value
        return tuple(decode_int_array(AnyValue(bytes_value=value)).tolist())

    return [
        ReadableSpan(
            name=span.name,
            context=span.context,
            parent=span.parent,
            resource=span.resource,
            attributes={key: ints(value) for key, value in (span.attributes or {}).items()},
            events=span.events,
            links=span.links,
            kind=span.kind,
            status=span.status,
            start_time=span.start_time,
            end_time=span.end_time,
            instrumentation_scope=span.instrumentation_scope,
        )
        for span in finished
    ]


def read_cost(body: bytes, parse: Callable[[bytes], Message], chunks: int) -> float:
    """Microseconds per chunk for the collector to parse ``body`` and decode its spans: the best of as many reads as
    fit in a second, five at least, since this machine's speed varies from one moment to the next; with the garbage
    collector paused as ``timeit`` does, since the spans this benchmark holds would otherwise set its pace."""
    times: list[float] = []
    gc.collect()
    gc.disable()
    try:
        while len(times) < 5 or sum(times) < 1.0:
            t0 = time.perf_counter()
            decode_traces(parse(body), tenant="t")
            times.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return min(times) / chunks * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="5 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--chunks", type=int, default=250)
    args = parser.parse_args()
    if args.quick:
        args.streams = 5
    packed, total_chunks = spans("packed", args.streams, args.chunks)
    events, _ = spans("events", args.streams, args.chunks)
    contenders = [("packed", packed), ("packed, int arrays", as_int_arrays(packed)), ("events", events)]
    readers = {
        "protobuf": lambda b: TRACES.parse(b, protobuf=True),
        "json": lambda b: TRACES.parse(b, protobuf=False),
    }
    print(f"{'encoding':19} {'format':9} {'bytes/chunk':>12} {'gzip bytes/chunk':>17} {'read µs/chunk':>14}")
    for encoding, finished in contenders:
        bodies = {
            "protobuf": encode_protobuf(finished).SerializeToString(),
            "json": encode_json(finished).to_json().encode(),
        }
        for name, body in bodies.items():
            raw, packed_size = len(body) / total_chunks, len(gzip.compress(body)) / total_chunks
            cost = read_cost(body, readers[name], total_chunks)
            print(f"{encoding:19} {name:9} {raw:12.2f} {packed_size:17.2f} {cost:14.2f}")


if __name__ == "__main__":
    main()
