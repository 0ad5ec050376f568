"""Faults at the writer's two edges, the spool's disk and the store: the writer keeps going, and nothing acknowledged
is lost, stored twice or held back by another batch."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from streamscope_ingest.blocks.batch import DecodedBatch, concat
from streamscope_ingest.decode.request_log import Received, with_request_row
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.durability.group_commit import GroupCommitWriter
from streamscope_ingest.durability.spool import Spool
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.ingest.durability.test_group_commit import FAST_RETRY, stored
from tests.support import T0, batch, stream_span, trace_request, wait_until

DAY_NS = 86_400 * 10**9


class UnlinkFaults:
    """Fault injection at the os-call boundary: ``os.unlink`` of a spool segment fails with EIO while armed, as a
    failing disk answers; everything else goes through."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.armed = False
        self.failed = 0
        real = os.unlink

        def unlink(path, *args, **kwargs):
            if self.armed and str(path).endswith(".seg"):
                self.failed += 1
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
            return real(path, *args, **kwargs)

        monkeypatch.setattr(os, "unlink", unlink)


class Killed(BaseException):
    """The process dying at this point: nothing after it runs."""


def test_a_kill_during_cleanup_replays_the_leftover_segments_under_the_token_they_were_stored_with(
    tmp_path, store_client, monkeypatch
):
    spool = Spool(tmp_path, max_bytes=10**8)
    segments = [spool.append([batch(i, f"t{i}")]) for i in range(1, 4)]
    group = spool.begin_group(segments)
    ClickHouseWriter(store_client).write([b for s in segments for b in spool.read(s)], spool.token(group))
    real_unlink = os.unlink

    def unlink_then_die(path, *args, **kwargs):  # fault injection: killed once the first segment is removed
        if str(path) == str(segments[1].path):
            raise Killed
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "unlink", unlink_then_die)
    with pytest.raises(Killed):
        spool.remove(group)
    monkeypatch.setattr(os, "unlink", real_unlink)
    spool.close()

    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    writer.shutdown()
    assert stored(store_client, "ingest_requests") == [("t1", 1), ("t2", 1), ("t3", 1)]
    assert stored(store_client, "streams") == [("t1", 1), ("t2", 1), ("t3", 1)]
    assert not list(tmp_path.glob("*.seg"))


def test_a_failed_unlink_of_a_segment_does_not_end_the_writer(tmp_path, store_client, monkeypatch):
    faults = UnlinkFaults(monkeypatch)
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    faults.armed = True
    first = writer.submit(batch(1, "a"))
    first.spooled.result(timeout=10)
    wait_until(lambda: faults.failed >= 2, "the writer to try the removal again", timeout_s=60)
    assert "Input/output error" in writer.fault
    assert not first.stored.done()  # stored, but its segment is still on disk: the writer is not done with it

    faults.armed = False
    second = writer.submit(batch(2, "b"))
    first.stored.result(timeout=60)
    second.stored.result(timeout=60)
    assert writer.fault == ""
    writer.shutdown()
    assert stored(store_client) == [("a", 3), ("b", 3)]
    assert stored(store_client, "ingest_requests") == [("a", 1), ("b", 1)]
    assert not list(tmp_path.glob("*.seg"))


@contextmanager
def no_room_for_inserts(client) -> Iterator[None]:
    """The engine refuses every insert as a full disk does (NOT_ENOUGH_SPACE, 243), through its own free-space
    check set past any disk."""
    tables = ("chunk_arrays", "streams", "ingest_requests")
    for table in tables:
        client.command(f"ALTER TABLE {table} MODIFY SETTING min_free_disk_bytes_to_perform_insert = 1000000000000000")
    try:
        yield
    finally:
        for table in tables:
            client.command(f"ALTER TABLE {table} MODIFY SETTING min_free_disk_bytes_to_perform_insert = 0")


@contextmanager
def immutable_table_folders(client) -> Iterator[None]:
    """The tables' folders made immutable (chattr +i, which binds root too): the engine cannot create a part and
    answers with a filesystem error (STD_EXCEPTION, 1001)."""
    paths = [
        path
        for (table_paths,) in client.query(
            "SELECT data_paths FROM system.tables WHERE database = currentDatabase() "
            "AND name IN ('chunk_arrays', 'streams', 'ingest_requests')"
        ).result_rows
        for path in table_paths
    ]
    if not shutil.which("chattr") or subprocess.run(["chattr", "+i", paths[0]], capture_output=True).returncode:
        pytest.skip("chattr +i is not available on this filesystem")
    subprocess.run(["chattr", "+i", *paths], check=True)
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", *paths], check=True)


@pytest.mark.parametrize(
    ("fault", "code"),
    [(no_room_for_inserts, "NOT_ENOUGH_SPACE"), (immutable_table_folders, "STD_EXCEPTION")],
    ids=["disk full", "read-only table folders"],
)
def test_a_store_that_cannot_write_to_its_disk_is_retried_until_it_can_and_nothing_is_quarantined(
    tmp_path, store_client, fault: Callable, code: str
):
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    with fault(store_client):
        tickets = [writer.submit(batch(i, f"t{i}")) for i in range(1, 4)]
        for ticket in tickets:
            ticket.spooled.result(timeout=10)
        wait_until(lambda: code in writer.last_error, f"the store's {code}", timeout_s=60)
        wait_until(lambda: not writer.store_healthy, "the writer to see the store down", timeout_s=60)
        assert not any(ticket.stored.done() for ticket in tickets)
        assert not list(tmp_path.glob("quarantine/*"))
    for ticket in tickets:
        ticket.stored.result(timeout=60)
    writer.shutdown()
    assert stored(store_client, "streams") == [("t1", 1), ("t2", 1), ("t3", 1)]
    assert not list(tmp_path.glob("quarantine/*")) and not list(tmp_path.glob("*.seg"))


def spread_over_days(days: int, tenant: str) -> DecodedBatch:
    """One request's batch whose streams start on ``days`` different days, as a collector without a bound on the
    days one request may span spooled it: more partitions than the engine takes in one insert (100)."""
    spans = [
        decode_traces(
            trace_request(
                [
                    stream_span(
                        9000 + day, 1, side="browser", offsets_ms=[0, 10], tokens=[1, 1], start_ns=T0 - day * DAY_NS
                    )
                ]
            ),
            tenant=tenant,
        )
        for day in range(days)
    ]
    spread = concat(spans)
    with_request_row(spread, tenant=tenant, signal="traces", received=Received("http", "json", "", 1, 1))
    return spread


def test_a_batch_the_store_keeps_refusing_whole_is_cut_into_pieces_it_takes_and_the_rest_proceeds(
    tmp_path, store_client
):
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    spread = writer.submit(spread_over_days(150, "spread"))
    spread.spooled.result(timeout=10)
    wait_until(lambda: "TOO_MANY_PARTS" in writer.last_error, "the store to refuse the batch", timeout_s=60)
    after = [writer.submit(batch(i, f"t{i}")) for i in range(1, 4)]
    for ticket in [*after, spread]:
        ticket.stored.result(timeout=120)
    writer.shutdown()
    assert stored(store_client, "streams") == [("spread", 150), ("t1", 1), ("t2", 1), ("t3", 1)]
    assert stored(store_client, "ingest_requests") == [("spread", 1), ("t1", 1), ("t2", 1), ("t3", 1)]
    assert not list(tmp_path.glob("quarantine/*")) and not list(tmp_path.glob("*.seg"))


def test_a_store_outage_quarantines_nothing_however_many_batches_wait(tmp_path, store_client):
    """Every batch fails while the store cannot write: none is proven bad by the others, so none is set aside."""
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    with no_room_for_inserts(store_client):
        tickets = []
        for i in range(1, 6):
            tickets.append(writer.submit(batch(i, f"t{i}")))
            tickets[-1].spooled.result(timeout=10)
            failures = writer.store_failures + 10
            wait_until(lambda: writer.store_failures >= failures, "the writer to retry", timeout_s=60)  # noqa: B023
        assert not list(tmp_path.glob("quarantine/*"))
    for ticket in tickets:
        ticket.stored.result(timeout=60)
    writer.shutdown()
    assert stored(store_client, "streams") == [(f"t{i}", 1) for i in range(1, 6)]
    assert stored(store_client, "ingest_requests") == [(f"t{i}", 1) for i in range(1, 6)]
    assert not list(tmp_path.glob("quarantine/*"))
