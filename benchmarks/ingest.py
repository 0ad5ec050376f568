"""Ingest throughput: OTLP/HTTP protobuf → one collector process → rows committed in the embedded engine.

The streams are recorded by StreamRecorder in each encoding and encoded by OpenTelemetry's own OTLP encoder
(``benchmarks.wire_cost``), then copied under fresh trace ids into as many gzipped requests as asked for, all before
the clock starts; each copy ends a 4,000th of a second after the one before, as a fleet's spans do at a million chunks
a second (``FLEET_STREAMS_PER_S``). A ``streamscope collector`` process with its defaults (fsync'd spool,
repeated-span lookup, attribution job) is started on a fresh store; senders post the requests over keep-alive
connections, and the clock stops when a query sees every chunk committed. The collector's CPU time and peak RSS come
from /proc, and the CPU time also by thread (the collector's decode threads, spool, writer, HTTP loop and attribution
job, which it names for the operating system, the HTTP loop's worker threads under its name, reading and inflating
bodies; the engine's merges and its other threads) and the kernel's part of it. The engine parses each insert on the
thread that sends it, so the writer's share holds that too. Senders post one request at a time each, as
OpenTelemetry's exporters do; the command runs at each number of senders given (4 and 16: a few exporters and a busier
fleet). A request holds 512 stream spans, as a busy exporter sends them: OpenTelemetry's batch span processor exports
as soon as it holds its batch size (512 by default) and otherwise every 5 s, so a sender of a sixteenth of a million
chunks a second (250 streams of 250 chunks) sends full batches; ``--per-request`` models a sender that exports more
often. The collector answers once a request is durable in its spool, and its writer inserts whatever has been spooled
meanwhile, at most once a second. The packed runs are repeated with ``--store-wait-s 5``, the collector answering only
once the rows are stored: each sender then waits for the store, the number of senders bounds how many requests one
insert can group, and fewer, larger inserts cost the engine less per row.

The baseline is the same streams, recorded as span events, inserted into the OpenTelemetry Collector
ClickHouse exporter's ``otel_traces`` table (``benchmarks.otel_traces``) on the same engine. Its rows are
built before the clock, so only the engine's insert is timed: an upper bound for any exporter writing that
table. Our own ``chunks``/``streams`` insert is timed the same way beside it, and after it the attribution job
alone, over the streams just inserted: the collector's other cost per chunk, paid once streams settle. Last,
the packed requests are parsed and decoded on one thread alone, as the collector does: our own code's share.

    python -m benchmarks.ingest [--quick] [--streams 20000] [--chunks 250] [--senders 4 16]
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Generic, TypeVar

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families

from benchmarks import otel_traces
from benchmarks.wire_cost import spans
from streamscope import semconv as sc
from streamscope.threads import os_name
from streamscope_collector.admission import DECODE_THREAD
from streamscope_collector.pipeline import TRACES
from streamscope_collector.service import HTTP_THREAD, running_collector
from streamscope_ingest import store
from streamscope_ingest.analysis import attribution_job
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.decode.int_arrays import element_count
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.durability.group_commit import SPOOL_THREAD, WRITER_THREAD
from streamscope_ingest.store import migrations
from streamscope_ingest.store.writer import ClickHouseWriter

T = TypeVar("T")
EXPORT_BATCH_SPANS = 512
"""The spans OpenTelemetry's batch span processor exports at once, by default (``OTEL_BSP_MAX_EXPORT_BATCH_SIZE``)."""
FLEET_STREAMS_PER_S = 4_000
"""Streams a fleet at the ingest target ends each second (1 M chunks a second, in streams of 250 chunks). Each copy of
a recorded timeline ends that much after the one before, as spans reach an exporter when they end: the recordings ran
one after another, 200 of them over half an hour, and the tables pre-aggregated at insert hold a row per interval of
the streams' starts."""
_HEADERS = {"content-type": "application/x-protobuf", "content-encoding": "gzip"}


@dataclass(frozen=True)
class Workload:
    encoding: str
    requests: list[ExportTraceServiceRequest]
    warm_up: ExportTraceServiceRequest
    """Sent before the clock starts, with spans of its own (a span sent twice is stored once)."""

    @property
    def streams(self) -> int:
        return sum(len(r.resource_spans[0].scope_spans[0].spans) for r in self.requests)

    @property
    def chunks(self) -> int:
        return sum(_chunks(span) for r in self.requests for span in r.resource_spans[0].scope_spans[0].spans)

    def bodies(self) -> list[bytes]:
        return [gzip.compress(r.SerializeToString(), compresslevel=6) for r in self.requests]


def workload(encoding: str, streams: int, chunks: int, per_request: int, distinct: int = 200) -> Workload:
    """``streams`` streams (rounded up to whole requests) in requests of ``per_request``, plus a warm-up request:
    ``distinct`` recorded timelines repeated under new trace ids, ending at a fleet's pace (``FLEET_STREAMS_PER_S``)."""
    finished, _ = spans(encoding, min(distinct, streams), chunks)
    template = encode_spans(finished)
    pool = [span for rs in template.resource_spans for ss in rs.scope_spans for span in ss.spans]
    first_end = min(span.end_time_unix_nano for span in pool)
    requests, ids = [], itertools.count(1)
    for _ in range(-(-streams // per_request) + 1):
        request = ExportTraceServiceRequest()
        request.CopyFrom(template)
        scope = request.resource_spans[0].scope_spans[0]
        del scope.spans[:]
        for _ in range(per_request):
            trace = next(ids)
            span = scope.spans.add()
            span.CopyFrom(pool[trace % len(pool)])
            span.trace_id = trace.to_bytes(16, "big")
            _end_at(span, first_end + trace * 1_000_000_000 // FLEET_STREAMS_PER_S)
        requests.append(request)
    return Workload(encoding, requests[:-1], warm_up=requests[-1])


def _end_at(span, end_ns: int) -> None:
    """Move ``span``, its events with it, to end at ``end_ns``."""
    shift = end_ns - span.end_time_unix_nano
    span.start_time_unix_nano += shift
    span.end_time_unix_nano += shift
    for event in span.events:
        event.time_unix_nano += shift


def _chunks(span) -> int:
    for kv in span.attributes:
        if kv.key == sc.STREAMSCOPE_CHUNKS_OFFSET_US:
            return element_count(kv.value)
    return len(span.events)


class CollectorProcess:
    """``streamscope collector`` on an embedded store (``options`` added to its command line), HTTP only; started
    with ``umask`` as its file mode creation mask, when one is given."""

    def __init__(self, data: Path, *options: str, umask: int = -1) -> None:
        port = free_port()
        self.data = data
        self.url = f"http://127.0.0.1:{port}"
        command = [sys.executable, "-m", "streamscope_cli.main", "collector", "--storage", f"chdb://{data}", *options]
        self._log = (data.parent / "collector.log").open("w")
        self.process = subprocess.Popen(
            [*command, "--http-port", str(port), "--no-grpc"], stdout=self._log, stderr=subprocess.STDOUT, umask=umask
        )
        deadline = time.monotonic() + 120
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = Path(self._log.name).read_text().splitlines()[-20:]
                raise SystemExit("the collector did not start:\n" + "\n".join(tail))
            time.sleep(0.2)

    def _ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    def scalar(self, query: str) -> int:
        """The first value of the query's answer, through the collector's SQL route."""
        running = running_collector(store.parse_dsn(f"chdb://{self.data}"))
        assert running is not None, "the collector has not written its discovery file"
        headers = running.operator_headers
        response = httpx.post(f"{self.url}/api/v1/sql", json={"query": query}, headers=headers, timeout=60)
        response.raise_for_status()
        return int(response.json()["data"][0][0])

    def metrics(self) -> dict[str, float]:
        """The collector's self-metrics, keyed ``name{label="value",...}`` as in the exposition."""
        text = httpx.get(f"{self.url}/metrics", timeout=30).text
        return {
            sample.name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())) + "}": sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }

    def cpu_seconds(self) -> float:
        return _cpu_seconds(Path(f"/proc/{self.process.pid}/stat"))

    def system_cpu_seconds(self) -> float:
        """The part of ``cpu_seconds`` spent in the kernel on the collector's behalf (page faults, file writes,
        thread switches)."""
        return _cpu_seconds(Path(f"/proc/{self.process.pid}/stat"), user=False)

    def cpu_by_thread(self) -> Counter[str]:
        """CPU seconds of the live threads by kind (``_THREAD_KINDS``): the collector's own by the names it gives
        them, its other Python threads (they keep the process's name), the engine's merges and its other threads
        (insert and query pipelines). Threads that ended are not counted."""
        interpreter = Path(f"/proc/{self.process.pid}/comm").read_text().strip()
        totals: Counter[str] = Counter()
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            try:
                name, seconds = (task / "comm").read_text().strip(), _cpu_seconds(task / "stat")
            except OSError:  # it ended meanwhile
                continue
            totals[_THREAD_KINDS.get(name, "engine, other") if name != interpreter else "interpreter, other"] += seconds
        return totals

    def rss_bytes(self, kind: str = "VmRSS") -> int:
        """Resident memory: all of it (``VmRSS``), or its anonymous part (``RssAnon``: not the mapped libraries)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{kind}:"):
                return int(line.split()[1]) * 1024
        return 0

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            print(f"the collector did not stop within 60 s of SIGTERM; killed (see {self._log.name})", file=sys.stderr)
            self.process.kill()
        self._log.close()


def _cpu_seconds(stat: Path, user: bool = True) -> float:
    """User (unless not ``user``) and system CPU time from a /proc stat file (of a process or of one of its
    threads)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return ((int(fields[11]) if user else 0) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_THREAD_KINDS = {
    **{
        os_name(thread): kind
        for thread, kind in (
            (DECODE_THREAD, "decode"),
            (SPOOL_THREAD, "spool"),
            (WRITER_THREAD, "writer"),
            (HTTP_THREAD, "HTTP"),
            (attribution_job.THREAD, "attribution"),
        )
    },
    "MergeMutate": "engine merges",
}
"""Kinds of thread by the name the operating system knows them by."""


@dataclass(frozen=True)
class Run:
    chunks: int
    seconds: float
    cpu_s: float
    """The collector's CPU time until every chunk was committed."""
    system_cpu_s: float
    """The kernel's part of ``cpu_s``."""
    attribution_cpu_s: float
    """Its CPU time after that, until the attribution job had rated every stream."""
    peak_rss: int
    cpu_by_thread: Counter[str]
    """``cpu_s`` by kind of thread (``CollectorProcess.cpu_by_thread``)."""

    @property
    def chunks_per_s(self) -> float:
        return self.chunks / self.seconds


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Sampler(Generic[T]):
    """Calls ``sample`` every ``interval_s`` on a thread of its own while in its ``with`` block; keeps the results."""

    def __init__(self, sample: Callable[[], T], interval_s: float) -> None:
        self.samples: list[T] = []
        self._sample, self._interval_s = sample, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            self.samples.append(self._sample())

    def __enter__(self) -> Sampler[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()


def post_all(url: str, bodies: Iterable[bytes], senders: int) -> None:
    """Post every body, each until accepted (honouring Retry-After), over ``senders`` connections at once.

    The senders are tasks of one event loop, so the load generator costs the machine little of what it shares
    with the collector: sixteen sender threads cost about three times as much CPU for the same requests."""
    asyncio.run(_post_all(url, iter(bodies), senders))


async def _post_all(url: str, bodies: Iterator[bytes], senders: int) -> None:
    async def send(client: httpx.AsyncClient) -> None:
        for body in bodies:  # one iterator shared by the tasks of one loop: each body is taken once
            while (response := await client.post(f"{url}/v1/traces", content=body, headers=_HEADERS)).status_code in (
                429,
                503,
            ):
                await asyncio.sleep(float(response.headers.get("retry-after", "1")))
            response.raise_for_status()

    limits = httpx.Limits(max_connections=senders, max_keepalive_connections=senders)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(send(client) for _ in range(senders)))


def through_collector(load: Workload, senders: int, *options: str) -> Run:
    """Post ``load`` to a fresh collector (``options`` added to its command line) and time it until every chunk
    is committed."""
    bodies = load.bodies()
    with tempfile.TemporaryDirectory() as tmp:
        collector = CollectorProcess(Path(tmp) / "store", *options)
        try:
            post_all(collector.url, [gzip.compress(load.warm_up.SerializeToString())], 1)  # first insert, lookup
            expected = collector.scalar("SELECT count() FROM chunks") + load.chunks
            rated = collector.scalar("SELECT count() FROM stream_quality") + load.streams
            with Sampler(collector.rss_bytes, 0.2) as rss:
                threads = collector.cpu_by_thread()
                cpu0, t0, system0 = collector.cpu_seconds(), time.perf_counter(), collector.system_cpu_seconds()
                post_all(collector.url, bodies, senders)
                while collector.scalar("SELECT count() FROM chunks") < expected:
                    time.sleep(0.05)
                seconds, cpu = time.perf_counter() - t0, collector.cpu_seconds() - cpu0
                system = collector.system_cpu_seconds() - system0
                threads = collector.cpu_by_thread() - threads
                while collector.scalar("SELECT count() FROM stream_quality") < rated:
                    time.sleep(0.5)
                attribution_cpu = collector.cpu_seconds() - cpu0 - cpu
        finally:
            collector.stop()
    return Run(load.chunks, seconds, cpu, system, attribution_cpu, max(rss.samples, default=0), threads)


def decode_only(load: Workload) -> float:
    """CPU µs a chunk of parsing and decoding ``load``'s requests as the collector does, on this thread alone
    (the best of three passes): the part of the collector's cost that is ours alone, without the engine, the
    spool or other threads beside it."""
    bodies = [request.SerializeToString() for request in load.requests]
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        for body in bodies:
            decode_traces(TRACES.parse(body, protobuf=True), tenant="default")
        best = min(best, time.thread_time() - start)
    return best / load.chunks * 1e6


def insert_only(packed: Workload, events: Workload) -> tuple[float, float, float]:
    """Chunks per second of the engine's insert alone, our tables (packed) and ``otel_traces`` (events), and of
    the attribution job alone over the streams inserted."""
    ours = [decode_traces(r, tenant="default") for r in packed.requests]
    baseline = [otel_traces.otel_traces_block(r) for r in events.requests]
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        client = store.connect(store.parse_dsn(f"chdb://{tmp}"))
        migrations.migrate(client)
        otel_traces.create(client)
        writer = ClickHouseWriter(client)
        t0 = time.perf_counter()
        for batch in ours:
            writer.insert(batch)
        ours_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
        attribution_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for block in baseline:
            client.insert_arrow("otel_traces", block)
        baseline_s = time.perf_counter() - t0
    return packed.chunks / ours_s, events.chunks / baseline_s, packed.chunks / attribution_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a small run (500 streams, 4 senders, streams attributed as soon as stored) that prints the same table",
    )
    parser.add_argument("--streams", type=int, default=20_000)
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    parser.add_argument(
        "--per-request", type=int, default=EXPORT_BATCH_SPANS, help="stream spans per OTLP request (the SDK's batch)"
    )
    parser.add_argument(
        "--senders", type=int, nargs="+", default=[4, 16], help="concurrent connections; one run per number given"
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="packed runs in a row per number of senders (the target is three in a row), each printed",
    )
    args = parser.parse_args()
    streams = 500 if args.quick else args.streams
    senders_runs = [4] if args.quick else args.senders
    # a quick run's streams are all stored within a second: attributed at once, not after the usual wait
    attributed = ("--attribution-interval-s", "0.5", "--attribution-settle-s", "0") if args.quick else ()
    packed = workload("packed", streams, args.chunks, args.per_request)
    events = workload("events", streams, args.chunks, args.per_request)
    runs = {
        f"packed, {senders} senders{repeat_label(run, args.repeat)}": through_collector(packed, senders, *attributed)
        for senders in senders_runs
        for run in range(1, args.repeat + 1)
    }
    runs |= {f"events, {senders} senders": through_collector(events, senders, *attributed) for senders in senders_runs}
    for senders in senders_runs:
        runs[f"packed, {senders} senders, answered once stored"] = through_collector(
            packed, senders, "--store-wait-s", "5", *attributed
        )
    ours, baseline, attribution_alone = insert_only(packed, events)
    decode_us = decode_only(packed)
    sent = len(packed.requests) * args.per_request
    print(f"{sent:,} streams, {packed.chunks:,} chunks, {args.per_request} per request")
    print(f"{'path':80} {'chunks/s':>11} {'CPU µs/chunk':>13} {'+ attribution':>14} {'peak RSS':>9}")
    for name, run in runs.items():
        label = f"OTLP/HTTP → collector → committed, {name}"
        cpu, attribution = (seconds / run.chunks * 1e6 for seconds in (run.cpu_s, run.attribution_cpu_s))
        print(f"{label:80} {run.chunks_per_s:11,.0f} {cpu:13.2f} {attribution:14.2f} {run.peak_rss / 2**20:7.0f} M")
    print(f"{'insert only: chunks + streams tables (packed)':80} {ours:11,.0f}")
    print(f"{'insert only: otel_traces baseline (events)':80} {baseline:11,.0f}")
    print(f"{'attribution job alone, over the packed streams':80} {attribution_alone:11,.0f}")
    print(f"{'decode only (parse and decode, one thread), packed':80} {1e6 / decode_us:11,.0f} {decode_us:13.2f}")
    for name, run in runs.items():
        threads = run.cpu_by_thread.most_common()
        split = ", ".join(f"{kind} {seconds / run.chunks * 1e6:.2f}" for kind, seconds in threads)
        kernel = run.system_cpu_s / run.chunks * 1e6
        print(f"CPU µs/chunk until committed, {name}, by thread: {split}; in the kernel {kernel:.2f} of all")


def repeat_label(run: int, runs: int) -> str:
    return f", run {run} of {runs}" if runs > 1 else ""


if __name__ == "__main__":
    main()
