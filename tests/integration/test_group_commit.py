"""Concurrent requests share one insert; a refused batch fails only its own request."""

from __future__ import annotations

import threading

import pytest

from ingest.batch import DecodedBatch
from ingest.decode import decode_traces
from ingest.group_commit import GroupCommitConfig, GroupCommitWriter
from ingest.writer import ClickHouseWriter
from streamscope.errors import RetryableWriteError, WriteError
from tests.integration.test_bad_input import request_of, stream_span


def batch(span_byte: int, tenant: str, chunks: int = 3) -> DecodedBatch:
    return decode_traces(request_of(stream_span(span_byte, list(range(chunks)))), tenant=tenant, stall_threshold_us=1)


class GatedWriter:
    """The real ClickHouse writer, held at a gate so that requests queue up behind the first write."""

    def __init__(self, writer: ClickHouseWriter | None) -> None:
        self.writer = writer
        self.gate = threading.Event()
        self.groups: list[int] = []

    def write(self, decoded: DecodedBatch) -> None:
        self.gate.wait(10)
        if self.writer is not None:
            self.writer.write(decoded)
        self.groups.append(decoded.rows("streams"))  # only groups the store took


def test_queued_batches_are_written_together(store_client):
    sink = GatedWriter(ClickHouseWriter(store_client))
    writer = GroupCommitWriter(sink)
    first = writer.submit(batch(1, "a"))
    queued = [writer.submit(batch(i, f"tenant-{i}")) for i in range(2, 6)]
    sink.gate.set()
    for future in [first, *queued]:
        future.result(timeout=10)
    writer.shutdown()
    assert sink.groups == [1, 4]
    rows = store_client.query("SELECT tenant, count() FROM chunks GROUP BY tenant ORDER BY tenant").result_rows
    assert rows == [("a", 3)] + [(f"tenant-{i}", 3) for i in range(2, 6)]


class RefusingSink:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, decoded: DecodedBatch) -> None:
        tenants = set(decoded.blocks["streams"].column("tenant").to_pylist())
        if "bad" in tenants:
            raise WriteError("store refused the request: bad rows")
        self.written.extend(sorted(tenants))


def test_a_refused_batch_fails_only_its_own_request():
    sink = RefusingSink()
    writer = GroupCommitWriter(sink)
    futures = {tenant: writer.submit(batch(i + 1, tenant)) for i, tenant in enumerate(["x", "bad", "y"])}
    with pytest.raises(WriteError, match="bad rows"):
        futures["bad"].result(timeout=10)
    futures["x"].result(timeout=10)
    futures["y"].result(timeout=10)
    writer.shutdown()
    assert sorted(sink.written) == ["x", "y"]


def test_a_full_queue_answers_retry_later():
    sink = GatedWriter(writer=None)
    writer = GroupCommitWriter(sink, GroupCommitConfig(max_pending_rows=10))
    writer.submit(batch(1, "a", chunks=4))  # taken by the worker, held at the gate
    writer.submit(batch(2, "b", chunks=4))  # 5 rows pending
    with pytest.raises(RetryableWriteError, match="queue full"):
        writer.submit(batch(3, "c", chunks=8))
    sink.gate.set()
    writer.shutdown()
    assert sink.groups == [1, 1]
