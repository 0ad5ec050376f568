"""Per-chunk cost of the SDK as an application runs it: through ``streamscope.setup()``.

``setup()`` gives the application a TracerProvider with a BatchSpanProcessor and the gzipped OTLP/HTTP
exporter; here it exports to a sink in another process that reads each request and answers 200. Each
contender records ``--streams`` streams of ``--chunks`` chunks back to back on the application's thread:

- the recorder, as an application without a MeterProvider runs it (the API's default: measurements go nowhere);
- the recorder beside an SDK MeterProvider (most applications have one): its streaming histograms take one
  measurement a chunk;
- ``span.add_event`` per chunk on the same provider, the usual way to put chunk times on a span.

Per chunk: the application thread's CPU time (``time.thread_time``), its wall time (which includes waiting for
the interpreter while the export and recording threads hold it), and the CPU the process's other threads spent
(export: encoding, gzip, HTTP; the recorder's histogram thread), measured until everything is exported and
recorded.

    python -m benchmarks.sdk_setup [--quick] [--streams 1000] [--chunks 200]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

import streamscope
from streamscope import StreamRecorder

_SINK = """
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@contextmanager
def sink() -> Iterator[str]:
    """An OTLP/HTTP endpoint in a process of its own (its CPU is not the application's)."""
    process = subprocess.Popen([sys.executable, "-c", _SINK], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        yield f"http://127.0.0.1:{process.stdout.readline().strip()}"
    finally:
        process.terminate()
        process.wait()


Contender = Callable[[TracerProvider, int, int], None]


def recorder(meter_provider: MeterProvider | None) -> Contender:
    def run(provider: TracerProvider, streams: int, chunks: int) -> None:
        for _ in range(streams):
            stream = StreamRecorder(
                side="client", provider="openai", tracer_provider=provider, meter_provider=meter_provider
            ).start()
            for _ in range(chunks):
                stream.chunk(1, 4, 120)
            stream.finish()

    return run


def add_event(provider: TracerProvider, streams: int, chunks: int) -> None:
    tracer = provider.get_tracer("bench")
    for _ in range(streams):
        span = tracer.start_span("chat")
        for _ in range(chunks):
            span.add_event("chunk", {"tokens": 1, "content_bytes": 4, "wire_bytes": 120})
        span.end()


def measure(contender: Contender, endpoint: str, streams: int, chunks: int) -> tuple[float, float, float]:
    """(application thread CPU, its wall time, the other threads' CPU), in ns per chunk."""
    provider = streamscope.setup("bench", endpoint=endpoint, set_global=False)
    process0, thread0, wall0 = time.process_time_ns(), time.thread_time_ns(), time.perf_counter_ns()
    contender(provider, streams, chunks)
    thread, wall = time.thread_time_ns() - thread0, time.perf_counter_ns() - wall0
    provider.force_flush()  # (the batch processor exports what is left on the calling thread: counted as others')
    streamscope.flush_metrics(timeout_s=600)
    others = time.process_time_ns() - process0 - thread
    provider.shutdown()
    n = streams * chunks
    return thread / n, wall / n, others / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 streams: the same table, sooner")
    parser.add_argument("--streams", type=int, default=1_000)
    parser.add_argument("--chunks", type=int, default=200)
    args = parser.parse_args()
    streams = 100 if args.quick else args.streams
    meters = MeterProvider(metric_readers=[InMemoryMetricReader()])
    contenders: list[tuple[str, Contender]] = [
        ("StreamRecorder, no MeterProvider", recorder(None)),
        ("StreamRecorder, with a MeterProvider", recorder(meters)),
        ("span.add_event per chunk", add_event),
    ]
    with sink() as endpoint:
        rows = [(name, measure(run, endpoint, streams, args.chunks)) for name, run in contenders]
    base = rows[-1][1][0]
    print(f"{streams:,} streams of {args.chunks} chunks through streamscope.setup(), OTLP/HTTP gzip to a local sink")
    print(f"{'contender':38} {'app CPU ns':>10} {'vs add_event':>13} {'app wall ns':>12} {'other threads ns':>17}")
    for name, (thread, wall, others) in rows:
        print(f"{name:38} {thread:10.0f} {base / thread:12.1f}x {wall:12.0f} {others:17.0f}")


if __name__ == "__main__":
    main()
