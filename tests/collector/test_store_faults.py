"""Faults of the disks under a running collector, and of its store: every answer tells the sender the truth (503 and
Retry-After while nothing can be kept), /readyz and /metrics show the fault, and what was acknowledged is stored
once the fault clears."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_collector.status import RETRY_AFTER_S
from tests.collector.test_reliability import CollectorProcess, wait_for_empty_spool
from tests.ingest.durability.test_spool_faults import DAY_NS, UnlinkFaults, no_room_for_inserts
from tests.support import T0, free_port, metric, otlp_json, post, stream_span, trace_request, wait_until

METRIC = "streamscope_collector_"


@pytest.fixture
def collector(storage_dsn: str, tmp_path: Path) -> Iterator[Collector]:
    running = Collector(
        CollectorConfig(
            storage_dsn=storage_dsn,
            http_port=0,
            grpc_port=0,
            attribution_interval_s=None,
            spool_dir=tmp_path / "spool",
        )
    ).start()
    yield running
    running.stop()


def body(trace: int) -> bytes:
    return trace_request([stream_span(trace, 1, side="client", offsets_ms=[0, 10], tokens=[1, 1])]).SerializeToString()


def readyz(collector) -> httpx.Response:
    return httpx.get(f"{collector.http_url}/readyz", timeout=30)


def stored_streams(client) -> int:
    return client.query("SELECT count() FROM streams").result_rows[0][0]


def test_a_store_out_of_disk_space_is_not_ready_counted_and_loses_nothing(collector, store_client):
    url = collector.http_url
    with no_room_for_inserts(store_client):
        answers = [post(collector, body(trace)).status_code for trace in range(1, 21)]
        assert answers == [200] * 20
        wait_until(lambda: "NOT_ENOUGH_SPACE" in readyz(collector).json()["store"], "/readyz to name the fault")
        assert readyz(collector).status_code == 503
        assert metric(url, f"{METRIC}store_up") == 0
        assert metric(url, f"{METRIC}store_failures_total") >= 1
        assert stored_streams(store_client) == 0
    wait_until(lambda: readyz(collector).status_code == 200, "the collector to recover", timeout_s=120)
    wait_for_empty_spool(url)
    quarantined = metric(url, f"{METRIC}dropped_batches_total")
    print(f"disk full: 20 acknowledged, {stored_streams(store_client)} stored, {quarantined:g} quarantined")
    assert stored_streams(store_client) == 20 and quarantined == 0


def test_a_request_spread_over_more_days_than_allowed_is_told_which_spans_and_holds_nothing_back(
    collector, store_client
):
    """150 spans a day apart in one request: more partitions than one insert may touch. (The browser route takes
    only spans near the collector's clock: tests/collector/test_browser_route.py.)"""
    spans = [
        stream_span(5000 + day, 1, side="client", offsets_ms=[0, 10], tokens=[1, 1], start_ns=T0 - day * DAY_NS)
        for day in range(150)
    ]
    answer = post(collector, otlp_json(trace_request(spans)), headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    partial = answer.json()["partialSuccess"]
    assert partial["rejectedSpans"] == "143"
    assert "more than 7 days" in partial["errorMessage"]
    assert post(collector, body(1)).status_code == 200
    wait_until(lambda: stored_streams(store_client) == 8, "the kept spans and the next request to be stored")
    url = collector.http_url
    assert metric(url, f"{METRIC}rejected_items_total", signal="traces") == 143
    assert metric(url, f"{METRIC}dropped_batches_total") == 0
    assert readyz(collector).status_code == 200


def test_a_segment_that_cannot_be_removed_shows_the_writer_stuck_and_it_recovers(collector, store_client, monkeypatch):
    faults = UnlinkFaults(monkeypatch)
    faults.armed = True
    url = collector.http_url
    assert post(collector, body(1)).status_code == 200
    wait_until(lambda: readyz(collector).status_code == 503, "/readyz to show the writer stuck")
    state = readyz(collector).json()
    assert "Input/output error" in state["writer"] and str(collector.spool_dir) not in readyz(collector).text
    assert metric(url, f"{METRIC}writer_up") == 0 and metric(url, f"{METRIC}writer_faults_total") >= 1
    faults.armed = False
    wait_until(lambda: readyz(collector).status_code == 200, "the writer to recover", timeout_s=120)
    assert post(collector, body(2)).status_code == 200
    wait_for_empty_spool(url)
    assert stored_streams(store_client) == 2
    assert metric(url, f"{METRIC}writer_up") == 1


class SpoolDiskFaults:
    """Fault injection at the os-call boundary: renaming a file into place in the spool fails with ``errno`` while
    armed, as a full, read-only or forbidden disk answers (as root, chmod would not stop the write)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, spool: Path, code: int) -> None:
        self.armed = True
        real = os.rename

        def rename(source, target, *args, **kwargs):
            if self.armed and str(source).startswith(str(spool)):
                raise OSError(code, os.strerror(code), str(source))
            return real(source, target, *args, **kwargs)

        monkeypatch.setattr(os, "rename", rename)


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EROFS, errno.EACCES], ids=errno.errorcode.get)
def test_a_spool_that_refuses_writes_answers_503_without_its_path_and_is_not_ready(
    collector, store_client, monkeypatch, tmp_path, code
):
    spool = tmp_path / "spool"
    faults = SpoolDiskFaults(monkeypatch, spool, code)
    refused = post(collector, body(1))
    assert refused.status_code == 503 and refused.headers["retry-after"] == RETRY_AFTER_S
    assert os.strerror(code) in refused.text and str(tmp_path) not in refused.text
    with grpc.insecure_channel(collector.grpc_endpoint) as channel, pytest.raises(grpc.RpcError) as failure:
        export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
        export(trace_request([stream_span(2, 1, side="client", offsets_ms=[0], tokens=[1])]), timeout=30)
    assert failure.value.code() == grpc.StatusCode.UNAVAILABLE and str(tmp_path) not in failure.value.details()
    state = readyz(collector)
    assert state.status_code == 503 and os.strerror(code) in state.json()["status"]
    assert str(tmp_path) not in state.text
    assert metric(collector.http_url, f"{METRIC}spool_up") == 0
    assert metric(collector.http_url, f"{METRIC}refused_requests_total", reason="unavailable") == 2

    faults.armed = False
    wait_until(lambda: readyz(collector).status_code == 200, "the spool to take writes again")
    assert post(collector, body(3)).status_code == 200
    wait_for_empty_spool(collector.http_url)
    assert stored_streams(store_client) == 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; the injected faults above stand for it")
def test_a_read_only_spool_directory_answers_503(collector, tmp_path):
    spool = tmp_path / "spool"
    spool.chmod(0o500)
    try:
        refused = post(collector, body(1))
        assert refused.status_code == 503 and str(tmp_path) not in refused.text
        assert readyz(collector).status_code == 503
    finally:
        spool.chmod(0o700)
    wait_until(lambda: readyz(collector).status_code == 200, "the spool to take writes again")


def test_a_collector_starts_while_its_store_is_held_spools_and_drains_once_it_opens(tmp_path):
    """The embedded store's directory is held by another process (a migration, a forgotten shell): the collector
    starts anyway, takes requests into its spool, says why it is not ready, and stores them once it can open it."""
    data = tmp_path / "store"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(data)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        collector = CollectorProcess(data, free_port()).start(probe="/healthz")
        state = readyz(collector)
        assert state.status_code == 503 and state.json()["store"].startswith("down")
        answers = [post(collector, body(trace)).status_code for trace in range(1, 11)]
        assert answers == [200] * 10
        assert readyz(collector).status_code == 503
    finally:
        holder.kill()
        holder.wait(timeout=30)
    wait_until(lambda: readyz(collector).status_code == 200, "the store to open", timeout_s=120)
    wait_for_empty_spool(collector.http_url)
    (count,), *_ = collector.sql("SELECT count() FROM streams")
    collector.stop()
    print(f"start with the store held: 10 acknowledged, {count} stored")
    assert count == 10


_HOLD = """
import sys, time
import clickhouse_connect
holding = clickhouse_connect.get_client(interface="chdb", path=sys.argv[1])
holding.query("SELECT 1")
print("held", flush=True)
time.sleep(600)
"""
