"""Collector memory under sustained load with a slow store: peak RSS, and whether it stays bounded.

The slow store is the real engine made slow. Before the collector starts, a child process gives the store a
materialized view on ``chunks`` that sleeps for each row it is shown (``sleepEachRow``), so every insert of
chunks takes as long as a store taking ``--store-chunks-per-s`` would. The collector (its defaults, but a
spool of ``--spool-max-mib`` so that it fills within the run) then takes ``--senders`` concurrent senders
posting fresh streams as fast as it answers them, for ``--seconds``. Its RSS, spool depth, bytes in flight and
rows accepted and written are sampled twice a second from /proc and its own /metrics, and the memory the
engine tracks as its own (``MemoryTracking``) through its SQL route.

The reference is the same load against the same store without the view. "Bounded" compares the peak of
the collector's anonymous memory (its RSS less the mapped libraries, which do not change) in the run's second
half with the first: a collector whose memory follows its backlog grows all the way, one bounded by its
in-flight budget and insert size levels off once the spool is full.

    python -m benchmarks.collector_memory [--quick] [--seconds 90] [--store-chunks-per-s 50000]
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import multiprocessing
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from benchmarks.ingest import CollectorProcess, Sampler, post_all, workload
from streamscope_ingest import store
from streamscope_ingest.store import migrations

_MAX_REQUEST_MIB = 8
"""The request limit, above this benchmark's requests (under 1 MiB) and below the quick run's spool limit."""
_ENGINE_MEMORY = "SELECT value FROM system.metrics WHERE metric = 'MemoryTracking'"
_ACCEPTED = 'streamscope_collector_accepted_rows_total{table="chunks"}'
_WRITTEN = 'streamscope_collector_written_rows_total{table="chunks"}'
_SPOOL = "streamscope_collector_spool_bytes{}"
_INFLIGHT = "streamscope_collector_inflight_bytes{}"
_REFUSED = 'streamscope_collector_refused_requests_total{{reason="{}"}}'


@dataclass(frozen=True)
class Sample:
    seconds: float
    rss: int
    anon: int
    """Anonymous resident memory: the RSS without the mapped libraries' pages (about 250 MiB of it)."""
    engine: int
    """The memory the engine tracks as its own (queries, inserts, merges, caches)."""
    spool: float
    inflight: float
    accepted: float
    written: float


@dataclass(frozen=True)
class Run:
    store: str
    samples: list[Sample]
    refused: dict[str, float]
    """Requests answered "not now", by reason (overloaded: 429, unavailable: 503)."""

    def rate(self, field: str) -> float:
        first, last = self.samples[0], self.samples[-1]
        return (getattr(last, field) - getattr(first, field)) / (last.seconds - first.seconds)

    def peak(self, field: str, part: slice = slice(None)) -> float:
        return max(getattr(s, field) for s in self.samples[part])

    @property
    def anon_halves(self) -> tuple[float, float]:
        """The peak anonymous memory of the run's first half and of its second."""
        middle = len(self.samples) // 2
        return self.peak("anon", slice(None, middle)), self.peak("anon", slice(middle, None))


def slow_down(client: Client, seconds_per_chunk: float) -> None:
    """Make every insert of chunks take ``seconds_per_chunk`` per chunk, until ``speed_up``: a view that sleeps
    on each chunk it is shown (no cap per block, as ClickHouse's own 3 s would fail large inserts).

    The chunks are a stream's arrays; the LIMIT keeps the sleep after their ARRAY JOIN, where there is a row a
    chunk: without it the engine computes the sleep, which reads no column, before the join, once a stream."""
    client.command("CREATE TABLE slow_store_sink (slept UInt8) ENGINE = Null")
    client.command(
        "CREATE MATERIALIZED VIEW slow_store TO slow_store_sink"
        f" AS SELECT sleepEachRow({seconds_per_chunk:.9f}) AS slept"
        f" FROM (SELECT gap_us FROM chunk_arrays ARRAY JOIN gap_us LIMIT {2**64 - 1})"
        " SETTINGS function_sleep_max_microseconds_per_block = 0"
    )


def speed_up(client: Client) -> None:
    client.command("DROP VIEW slow_store")
    client.command("DROP TABLE slow_store_sink")


def _slow_store(data: Path, chunks_per_s: float) -> None:
    """The store at ``data``, migrated and slowed to ``chunks_per_s`` (in a child process: the embedded engine
    opens one directory per process, and the collector opens this one next)."""
    client = store.connect(store.parse_dsn(f"chdb://{data}"))
    migrations.migrate(client)
    slow_down(client, 1 / chunks_per_s)


def fresh_bodies(template: ExportTraceServiceRequest, until: float) -> Iterator[bytes]:
    """``template`` gzipped again and again under new trace ids, until the monotonic clock reads ``until``."""
    spans = template.resource_spans[0].scope_spans[0].spans
    ids = itertools.count(1)
    while time.monotonic() < until:
        for span in spans:
            span.trace_id = next(ids).to_bytes(16, "big")
        yield gzip.compress(template.SerializeToString(), compresslevel=1)


def under_load(label: str, chunks_per_s: float | None, args: argparse.Namespace) -> Run:
    template = workload("packed", args.per_request, args.chunks, args.per_request).requests[0]
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:  # the engine may still be merging
        data = Path(tmp) / "store"
        if chunks_per_s is not None:
            child = multiprocessing.get_context("spawn").Process(target=_slow_store, args=(data, chunks_per_s))
            child.start()
            child.join()
            if child.exitcode != 0:
                raise SystemExit("could not make the store slow (see above)")
        limits = ("--spool-max-mib", str(args.spool_max_mib), "--max-request-mib", str(_MAX_REQUEST_MIB))
        collector = CollectorProcess(data, *limits)
        started = time.monotonic()

        def sample() -> Sample:
            metrics = collector.metrics()
            return Sample(
                time.monotonic() - started,
                collector.rss_bytes(),
                collector.rss_bytes("RssAnon"),
                collector.scalar(_ENGINE_MEMORY),
                *(metrics.get(name, 0.0) for name in (_SPOOL, _INFLIGHT, _ACCEPTED, _WRITTEN)),
            )

        try:
            with Sampler(sample, 0.5) as sampler:
                post_all(collector.url, fresh_bodies(template, started + args.seconds), args.senders)
            metrics = collector.metrics()
        finally:
            collector.stop()
    refused = {reason: metrics.get(_REFUSED.format(reason), 0.0) for reason in ("overloaded", "unavailable")}
    under = [s for s in sampler.samples if s.seconds <= args.seconds]  # not the senders' last retries after it
    return Run(label, under, refused)


def _row(label: str, cells: Iterable[str]) -> str:
    return f"{label:24}" + "".join(f"{cell:>11}" for cell in cells)


def _mib(value: float) -> str:
    return f"{value / 2**20:,.0f} M"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="6 s per store, a 32 MiB spool: the same table")
    parser.add_argument("--seconds", type=float, default=90, help="how long the load lasts, per store")
    parser.add_argument("--store-chunks-per-s", type=float, default=50_000, help="what the slow store takes")
    parser.add_argument("--spool-max-mib", type=int, default=256, help="the collector's spool limit")
    parser.add_argument("--senders", type=int, default=32, help="concurrent connections")
    parser.add_argument("--chunks", type=int, default=250, help="mean chunks per stream")
    parser.add_argument("--per-request", type=int, default=100, help="stream spans per OTLP request")
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.spool_max_mib = 6, 32
    runs = [
        under_load("healthy", None, args),
        under_load(f"slow, {args.store_chunks_per_s:,.0f} chunks/s", args.store_chunks_per_s, args),
    ]
    print(
        f"{args.seconds:g} s of load per store, {args.senders} senders, {args.per_request} streams per request, "
        f"spool limit {args.spool_max_mib} MiB"
    )
    print("peaks; anonymous memory (RSS less the mapped libraries) in each half of the run")
    print(_row("store", ("accepted/s", "stored/s", "429s", "503s", "spool", "RSS", "anon", "1st half", "2nd half")))
    for run in runs:
        cells = [
            f"{run.rate('accepted'):,.0f}",
            f"{run.rate('written'):,.0f}",
            f"{run.refused['overloaded']:,.0f}",
            f"{run.refused['unavailable']:,.0f}",
            *(_mib(run.peak(field)) for field in ("spool", "rss", "anon")),
            *(_mib(half) for half in run.anon_halves),
        ]
        print(_row(run.store, cells))
    slow = runs[-1]
    step = len(slow.samples) // 10 or 1
    print(f"\n{slow.store}, every {step / 2:g} s:")
    print(_row("s", ("RSS", "anon", "engine", "spool", "in flight", "accepted", "written")))
    for s in slow.samples[::step]:
        memory = (_mib(value) for value in (s.rss, s.anon, s.engine, s.spool, s.inflight))
        print(_row(f"{s.seconds:.1f}", (*memory, f"{s.accepted:,.0f}", f"{s.written:,.0f}")))


if __name__ == "__main__":
    main()
