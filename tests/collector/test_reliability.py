"""Faults injected into real processes: a collector killed mid-load, a store that refuses writes for a while.

Every stream a sender was told was accepted must be stored, exactly once.
"""

from __future__ import annotations

import http.client
import os
import signal
import statistics
import subprocess
import time
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from benchmarks.collector_memory import slow_down, speed_up
from streamscope import StreamRecorder
from streamscope.errors import ConfigError, Overloaded
from streamscope_collector.admission import InflightBudget
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector, running_collector
from streamscope_collector.status import RETRY_AFTER_S
from streamscope_ingest import store
from streamscope_ingest.durability.spool import Spool
from tests.support import (
    PROTOBUF,
    STREAMSCOPE,
    batch,
    free_port,
    metric,
    post,
    sql_request,
    stream_span,
    trace_request,
    wait_until,
)


class CollectorProcess:
    """``streamscope collector`` as its own process, on a fixed port so that it can be killed and restarted."""

    def __init__(self, data: Path, port: int) -> None:
        self.data, self.port = data, port
        self.http_url = f"http://127.0.0.1:{port}"
        self.process: subprocess.Popen | None = None
        self.log = data.parent / "collector.log"

    @property
    def operator_token(self) -> str:
        running = running_collector(store.parse_dsn(f"chdb://{self.data}"))
        assert running is not None, "the collector has not written its discovery file"
        return running.operator_token

    def start(self, probe: str = "/readyz") -> CollectorProcess:
        """Start, and wait until ``probe`` answers 200 (``/healthz``: the process serves, ready or not)."""
        command = [*STREAMSCOPE, "collector", "--storage", f"chdb://{self.data}", "--http-port", str(self.port)]
        with self.log.open("a") as log:
            process = self.process = subprocess.Popen([*command, "--no-grpc"], stdout=log, stderr=subprocess.STDOUT)

        def ready() -> bool:
            assert process.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.http_url}{probe}", timeout=1).status_code == 200
            except httpx.TransportError:
                return False

        wait_until(ready, "the collector to start", timeout_s=60, interval_s=0.1)
        return self

    def kill(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=60) == 0, self.log.read_text()

    def sql(self, query: str) -> list[list]:
        response = sql_request(self, query)
        assert response.status_code == 200, response.text
        return response.json()["data"]


def wait_for_empty_spool(url: str, timeout_s: float = 60.0) -> None:
    """Wait until the collector at ``url`` has stored every segment it acknowledged. A request is answered once
    spooled, and a query through the collector waits only ``read_wait_s`` (5 s) for the store to take what was
    answered; the backlog a load leaves, on a busy machine, can take longer."""

    def drained() -> bool:
        return not httpx.get(f"{url}/readyz").json()["spool"]["segments"]

    wait_until(drained, "the spool to drain", timeout_s, interval_s=0.1)


def record_streams(provider: TracerProvider, count: int, chunks: int) -> None:
    for _ in range(count):
        recorder = StreamRecorder(side="client", provider="openai", request_model="m", tracer_provider=provider)
        recorder.start()
        for _ in range(chunks):
            recorder.chunk(1, 4, 0)
        recorder.finish()


def test_a_collector_killed_mid_load_loses_and_repeats_nothing(tmp_path):
    streams, chunks = 400, 25
    collector = CollectorProcess(tmp_path / "store", free_port()).start()
    exporter = OTLPSpanExporter(endpoint=f"{collector.http_url}/v1/traces", timeout=90)  # retries until then
    provider = TracerProvider(resource=Resource.create({"service.name": "load"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=10, schedule_delay_millis=20))
    record_streams(provider, streams, chunks)

    def load_started() -> bool:
        return metric(collector.http_url, "streamscope_collector_accepted_rows_total", table="streams") >= streams / 4

    wait_until(load_started, "the load to start", timeout_s=60, interval_s=0.02)
    collector.kill()  # mid-load: requests in flight, some spooled and not yet written
    collector.start()
    assert provider.force_flush(timeout_millis=120_000)
    provider.shutdown()

    wait_for_empty_spool(collector.http_url)
    (stored, distinct), *_ = collector.sql("SELECT count(), uniqExact(trace_id, span_id) FROM streams")
    (chunk_rows, distinct_chunks), *_ = collector.sql("SELECT count(), uniqExact(trace_id, span_id, seq) FROM chunks")
    collector.stop()
    assert (stored, distinct) == (streams, streams)
    assert (chunk_rows, distinct_chunks) == (streams * chunks, streams * chunks)


def test_a_store_outage_fills_the_spool_then_heals_by_itself(storage_dsn, store_client, tmp_path):
    first = trace_request([stream_span(1, 1, side="client", offsets_ms=[0, 10, 20], tokens=[1, 1, 1])])
    config = CollectorConfig(
        storage_dsn=storage_dsn,
        http_port=0,
        grpc_port=None,
        attribution_interval_s=None,
        spool_dir=tmp_path / "spool",
        spool_max_bytes=1024 * 1024,
        max_request_bytes=256 * 1024,
        store_wait_s=1.0,
    )
    collector = Collector(config).start()
    try:
        assert post(collector, first.SerializeToString()).status_code == 200
        # the store refuses every insert as an overloaded server does (TOO_MANY_PARTS), until restored
        for table in ("chunk_arrays", "streams"):
            store_client.command(f"ALTER TABLE {table} MODIFY SETTING parts_to_throw_insert = 1")
        accepted, refused = [], []
        for trace in range(2, 400):
            request = trace_request([stream_span(trace, 1, side="client", offsets_ms=[0, 10, 20], tokens=[1, 1, 1])])
            response = post(collector, request.SerializeToString())
            if response.status_code == 503:
                assert response.headers["retry-after"]
                refused.append(trace)
                break
            assert response.status_code == 200, response.text
            accepted.append(trace)
        assert refused and len(accepted) > 10, "the spool should take a backlog, then refuse"
        ready = httpx.get(f"{collector.http_url}/readyz").json()
        assert ready["store"].startswith("down") and "TOO_MANY_PARTS" in ready["store"]
        assert metric(collector.http_url, "streamscope_collector_store_up") == 0
        assert metric(collector.http_url, "streamscope_collector_refused_requests_total", reason="unavailable") >= 1

        for table in ("chunk_arrays", "streams"):
            store_client.command(f"ALTER TABLE {table} MODIFY SETTING parts_to_throw_insert = 3000")
        wait_for_empty_spool(collector.http_url)
        again = trace_request([stream_span(refused[0], 1, side="client", offsets_ms=[0], tokens=[1])])
        assert post(collector, again.SerializeToString()).is_success
    finally:
        collector.stop()
    rows = store_client.query("SELECT count(), uniqExact(trace_id) FROM streams").result_rows
    assert rows == [(len(accepted) + 2, len(accepted) + 2)]


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_either_fsync_policy_leaves_segments_a_new_process_reads(tmp_path, fsync):
    spool = Spool(tmp_path, max_bytes=10**6, fsync=fsync)
    spool.append([batch(1, "a")])
    spool.close()
    reopened = Spool(tmp_path, max_bytes=10**6)
    (segment,) = reopened.pending()
    assert reopened.read(segment)[0].rows("chunks") == 3


@pytest.mark.parametrize("fsync", ["always", "never"])
def test_a_segment_is_synced_whole_before_it_takes_its_name_when_the_policy_says_so(tmp_path, monkeypatch, fsync):
    """Under ``always`` the file is synced with every byte of it written, then the directory after the rename;
    under ``never``, nothing is."""
    synced: list[tuple[str, int]] = []
    real_fsync = os.fsync

    def fsync_seen(fd: int) -> None:  # records what each fsync covers: the file (and its size then) or directory
        target = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((target, os.fstat(fd).st_size if os.path.isfile(target) else -1))
        real_fsync(fd)

    spool = Spool(tmp_path, max_bytes=10**8, fsync=fsync)
    monkeypatch.setattr(os, "fsync", fsync_seen)
    segment = spool.append([batch(1, "a", chunks=5_000)])
    if fsync == "never":
        assert synced == []
    else:
        assert synced == [(str(segment.path.with_suffix(".tmp")), segment.size), (str(tmp_path), -1)]
        assert segment.path.stat().st_size == segment.size


def test_an_unknown_fsync_policy_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="fsync policy 'sometimes'"):
        Spool(tmp_path, max_bytes=10**6, fsync="sometimes")  # type: ignore[arg-type]


def test_a_tenant_over_its_rate_is_told_to_come_back(storage_dsn):
    config = CollectorConfig(
        storage_dsn=storage_dsn,
        http_port=0,
        grpc_port=None,
        attribution_interval_s=None,
        tokens={"secret-a": "team-a", "secret-b": "team-b"},
        tenant_bytes_per_s=1000,  # 2,000 bytes of burst
    )
    collector = Collector(config).start()
    try:

        def send(trace: int, token: str) -> httpx.Response:
            request = trace_request([stream_span(trace, 1, side="client", offsets_ms=[0] * 40, tokens=[1] * 40)])
            return post(collector, request.SerializeToString(), token=token, timeout=5.0)

        answers = [send(trace, "secret-a").status_code for trace in range(1, 8)]
        assert answers[0] == 200 and 429 in answers
        assert send(99, "secret-b").status_code == 200  # another tenant is not slowed
        assert metric(collector.http_url, "streamscope_collector_refused_requests_total", reason="overloaded") >= 1
    finally:
        collector.stop()


@pytest.fixture
def lone_collector(storage_dsn):
    """A collector on the shared store, without the attribution job, that waits up to 60 s for the store."""
    config = CollectorConfig(
        storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None, store_wait_s=60
    )
    collector = Collector(config).start()
    yield collector
    collector.stop()


def _post_in_background(collector: Collector, trace: int, senders: ThreadPoolExecutor) -> Future[httpx.Response]:
    request = trace_request([stream_span(trace, 1, side="client", offsets_ms=[0, 10, 20], tokens=[1, 1, 1])])
    return senders.submit(post, collector, request.SerializeToString(), timeout=60)


def test_a_request_waiting_for_a_slow_store_holds_no_inflight_budget(lone_collector, store_client):
    """Once durable in the spool, a request lets go of its body, its parsed message and its rows: a slow store
    costs the collector connections, not memory."""
    slow_down(store_client, seconds_per_chunk=2)
    url = lone_collector.http_url
    accepted = lambda: metric(url, "streamscope_collector_accepted_rows_total", table="chunks")  # noqa: E731
    try:
        with ThreadPoolExecutor(1) as senders:
            answer = _post_in_background(lone_collector, 70_001, senders)
            wait_until(lambda: accepted() == 3, "the request spooled", timeout_s=30, interval_s=0.1)
            assert not answer.done(), "the store took 3 chunks before 6 s of sleep"
            assert metric(url, "streamscope_collector_inflight_bytes") == 0
            assert metric(url, "streamscope_collector_spool_bytes") > 0
            assert answer.result().status_code == 200
    finally:
        speed_up(store_client)
    stored = store_client.query("SELECT count() FROM chunks WHERE trace_id = %(t)s", {"t": f"{70_001:032x}"})
    assert stored.result_rows == [(3,)]


def test_by_default_a_request_is_answered_once_spooled_and_a_query_through_the_collector_reads_it(
    storage_dsn, store_client
):
    """The sender's pace is not the store's: the answer comes once the rows are durable; a query through the
    collector's SQL route waits for them (``read_wait_s``), so a sender that then queries reads its own writes."""
    config = CollectorConfig(
        storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None, read_wait_s=60
    )
    collector = Collector(config).start()
    url, trace = collector.http_url, f"{70_003:032x}"
    slow_down(store_client, seconds_per_chunk=1.5)  # 4.5 s: an answer after the store would find the spool empty
    try:
        request = trace_request([stream_span(70_003, 1, side="client", offsets_ms=[0, 10, 20], tokens=[1, 1, 1])])
        answer = post(collector, request.SerializeToString(), timeout=60)
        assert answer.status_code == 200
        assert metric(url, "streamscope_collector_spool_bytes") > 0, "answered only once the store had the rows"
        where = f"WHERE trace_id = '{trace}'"
        counts = f"SELECT (SELECT count() FROM chunks {where}), count() FROM streams {where}"
        read = sql_request(collector, counts, timeout=90)
        assert read.json()["data"] == [[3, 1]]  # the stream row, written once its chunks are, is the last
        assert metric(url, "streamscope_collector_spool_bytes") == 0
    finally:
        speed_up(store_client)
        collector.stop()


def test_a_sender_that_waits_as_retry_after_says_finds_its_connection_still_open(lone_collector):
    """Told 429 or 503, a sender waits Retry-After and sends again on the same keep-alive connection; closing idle
    connections at that very moment (uvicorn's default is 5 s, Retry-After's too) reset such senders mid-retry."""
    connection = http.client.HTTPConnection("127.0.0.1", lone_collector.http_port, timeout=60)

    def export(trace: int) -> int:
        span = stream_span(trace, 1, side="client", offsets_ms=[0, 10], tokens=[1, 1])
        connection.request("POST", "/v1/traces", trace_request([span]).SerializeToString(), PROTOBUF)
        answer = connection.getresponse()
        answer.read()
        return answer.status

    try:
        assert export(70_004) == 200
        time.sleep(int(RETRY_AFTER_S) + 1)
        assert export(70_005) == 200  # on the same socket: http.client opens no other while it has one
    finally:
        connection.close()


def test_requests_wait_their_turn_to_be_parsed_holding_only_their_body(lone_collector):
    """Parsed, a request takes many times its body, and decoding it is Python: one is parsed at a time."""
    expansion = lone_collector.admission.expansion
    url = lone_collector.http_url
    with ExitStack() as turns, ThreadPoolExecutor(1) as senders:
        turns.enter_context(expansion.parsing(0))
        answer = _post_in_background(lone_collector, 70_002, senders)
        inflight = lambda: metric(url, "streamscope_collector_inflight_bytes")  # noqa: E731
        wait_until(lambda: inflight() > 0, "the body read", timeout_s=30, interval_s=0.1)
        time.sleep(0.5)  # time enough to parse, decode and spool 3 chunks many times over, were it allowed
        assert not answer.done()
        assert metric(url, "streamscope_collector_accepted_rows_total", table="chunks") == 0
        turns.close()
        assert answer.result().status_code == 200
    assert metric(url, "streamscope_collector_accepted_rows_total", table="chunks") == 3


def test_the_inflight_budget_refuses_a_second_request_past_it_and_frees_on_release():
    budget = InflightBudget(max_bytes=1000)
    with budget.reserve() as first:
        first.take(1500)  # one request alone may use it all: the size limits bound it
        with budget.reserve() as second, pytest.raises(Overloaded, match="1500 bytes of requests in flight"):
            second.take(1)
    assert budget.used == 0
    with budget.reserve() as again:
        again.take(900)
    assert budget.used == 0


def test_a_collector_that_does_not_migrate_inserts_and_looks_up_through_its_two_accounts(store_client, storage_dsn):
    """The compose wiring (--no-migrate, --query-storage) on the embedded engine: a repeat is still found."""
    config = CollectorConfig(
        storage_dsn=storage_dsn, query_storage_dsn=storage_dsn, migrate=False, http_port=0, grpc_port=None
    )
    collector = Collector(config).start()
    try:
        assert collector.read_target is not collector.target
        body = trace_request([stream_span(5, 1, side="client", offsets_ms=[0, 10], tokens=[1, 1])]).SerializeToString()
        for _ in range(2):
            assert post(collector, body, timeout=5.0).status_code == 200
    finally:
        collector.stop()
    assert store_client.query("SELECT count() FROM streams").result_rows == [(1,)]


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_sustained_load_keeps_the_collectors_memory_flat(tmp_path):
    """A bounded soak: 4 senders for 70 s. After 30 s of warm-up (the engine's caches and the attribution job
    reach their working size), the median RSS of the last 20 s stays near that of the 20 s before, and no sample
    is more than twice it: memory follows the load, not the time or the rows stored."""
    collector = CollectorProcess(tmp_path / "store", free_port()).start()
    assert collector.process is not None
    spans = [stream_span(1, s + 1, side="client", offsets_ms=list(range(100)), tokens=[1] * 100) for s in range(50)]
    template = trace_request(spans)
    warm_until = time.monotonic() + 30
    stop_at = warm_until + 40
    acknowledged: list[bytes] = []
    """The trace id of every span a 200 answered, each request's ids its own."""

    def send(worker: int) -> None:
        request = ExportTraceServiceRequest()
        request.CopyFrom(template)  # a sender's own copy: threads sharing one would send each other's ids
        with httpx.Client(timeout=60) as client:
            trace = worker << 32
            while time.monotonic() < stop_at:
                ids = []
                for span in request.resource_spans[0].scope_spans[0].spans:
                    span.trace_id = (trace := trace + 1).to_bytes(16, "big")
                    ids.append(span.trace_id)
                body = request.SerializeToString()
                response = client.post(f"{collector.http_url}/v1/traces", content=body, headers=PROTOBUF)
                assert response.status_code in (200, 429, 503), response.text
                if response.status_code == 200:
                    acknowledged.extend(ids)

    samples: list[int] = []
    with ThreadPoolExecutor(4) as senders:
        running = [senders.submit(send, worker) for worker in range(1, 5)]
        while time.monotonic() < stop_at:
            if time.monotonic() >= warm_until:
                samples.append(rss_bytes(collector.process.pid))
            time.sleep(0.5)
        for future in running:
            future.result()
    wait_for_empty_spool(collector.http_url)
    (stored,), *_ = collector.sql("SELECT count() FROM streams")
    collector.stop()
    half = len(samples) // 2
    early, late, peak = statistics.median(samples[:half]), statistics.median(samples[half:]), max(samples)
    mib = 1 << 20
    print(
        f"soak: {len(acknowledged) // len(spans)} requests, {stored} streams; RSS median {early / mib:.0f} then "
        f"{late / mib:.0f} MiB, peak {peak / mib:.0f} MiB"
    )
    assert len(set(acknowledged)) == len(acknowledged), "a span was sent twice: the test's ids, not the collector"
    assert stored == len(acknowledged)
    assert late <= early * 1.2 + 32 * mib, f"RSS grew from {early / mib:.0f} to {late / mib:.0f} MiB"
    assert peak <= 2 * early, f"RSS peaked at {peak / mib:.0f} MiB against a median of {early / mib:.0f}"
