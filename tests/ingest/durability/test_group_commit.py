"""The spool and the writer behind it: durable before acknowledged, written once, whatever fails in between."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from benchmarks.chunk_layout import as_rows
from streamscope.errors import ConfigError, RetryableWriteError, SpoolFull, WriteError
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.decode.request_log import Received, with_request_row
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.durability.group_commit import GroupCommitConfig, GroupCommitWriter
from streamscope_ingest.durability.spool import Spool, decode, encode
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import batch, plain_stream_span, request_of

FAST_RETRY = GroupCommitConfig(retry_initial_s=0.01, retry_max_s=0.05)


def stored(client, table: str = "chunks") -> list[tuple]:
    return client.query(f"SELECT tenant, count() FROM {table} GROUP BY tenant ORDER BY tenant").result_rows


class GatedSink:
    """The real ClickHouse writer, held at a gate; it may first fail a number of times as a busy store would."""

    def __init__(self, writer: ClickHouseWriter | None, failures: int = 0) -> None:
        self.writer = writer
        self.gate = threading.Event()
        self.failures = failures
        self.segments: list[int] = []

    def write(self, batches: list[DecodedBatch], token: str, **tables) -> int:
        self.gate.wait(10)
        if self.failures:
            self.failures -= 1
            raise RetryableWriteError("store busy: Too many parts (TOO_MANY_PARTS)")
        repeated = self.writer.write(batches, token, **tables) if self.writer else 0
        self.segments.append(len(batches))
        return repeated


def write_through_the_spool(tmp_path, store_client, batches: list[DecodedBatch]) -> None:
    """``batches`` left in the spool (by a collector of an earlier version, say), then written by this version."""
    spool = Spool(tmp_path, max_bytes=10**8)
    spool.append(batches)
    spool.close()
    GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY).shutdown()


def test_a_batch_is_durable_before_the_store_has_it_and_stored_once_it_does(tmp_path, store_client):
    sink = GatedSink(ClickHouseWriter(store_client))
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, FAST_RETRY)
    tickets = [writer.submit(batch(i, f"tenant-{i}")) for i in range(1, 6)]
    for ticket in tickets:
        ticket.spooled.result(timeout=10)
    assert not any(ticket.stored.done() for ticket in tickets)
    assert len(list(tmp_path.glob("*.seg"))) >= 1
    sink.gate.set()
    for ticket in tickets:
        ticket.stored.result(timeout=10)
    writer.shutdown()
    assert sum(sink.segments) == 5 and len(sink.segments) < 5  # some were spooled and inserted together
    assert stored(store_client) == [(f"tenant-{i}", 3) for i in range(1, 6)]
    assert not list(tmp_path.glob("*.seg"))


def test_the_writer_retries_a_failing_store_and_catches_up(tmp_path, store_client):
    sink = GatedSink(ClickHouseWriter(store_client), failures=4)
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, FAST_RETRY)
    ticket = writer.submit(batch(1, "a"))
    ticket.spooled.result(timeout=10)
    sink.gate.set()
    ticket.stored.result(timeout=10)
    assert writer.store_healthy and "TOO_MANY_PARTS" in writer.last_error
    writer.shutdown()
    assert stored(store_client) == [("a", 3)]


def test_segments_left_by_a_crash_are_written_at_start_and_only_once(tmp_path, store_client):
    spool = Spool(tmp_path, max_bytes=10**8)
    first = spool.append([batch(1, "a"), batch(2, "b")])
    spool.append([batch(3, "c")])
    # the crash came after the store took the first segment and before the spool heard it
    ClickHouseWriter(store_client).write(spool.read(first), spool.token([first]))
    spool.close()

    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    writer.shutdown()
    assert stored(store_client) == [("a", 3), ("b", 3), ("c", 3)]
    assert stored(store_client, "streams") == [("a", 1), ("b", 1), ("c", 1)]
    assert stored(store_client, "ingest_requests") == [("a", 1), ("b", 1), ("c", 1)]
    assert not list(tmp_path.glob("*.seg"))


@pytest.mark.parametrize("submitted", [0, 2], ids=["crash leftovers only", "and new batches"])
def test_flush_waits_for_what_was_accepted_before_it_crash_leftovers_included(tmp_path, store_client, submitted):
    spool = Spool(tmp_path, max_bytes=10**8)
    spool.append([batch(1, "a")])  # left by a crash: no request waits for it
    spool.close()
    sink = GatedSink(ClickHouseWriter(store_client))
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, FAST_RETRY)
    for i in range(2, 2 + submitted):
        writer.submit(batch(i, "b")).spooled.result(timeout=10)
    assert not writer.flush(0.2)  # the store is held at the gate
    sink.gate.set()
    assert writer.flush(10)
    assert stored(store_client) == [("a", 3), ("b", 3 * submitted)][: 1 + bool(submitted)]
    writer.shutdown()


def as_chunk_rows(arrays: pa.Table, hex_ids: bool) -> pa.Table:
    """A chunk_arrays block in the layout of the ``chunks`` table before migration 0020: one row a chunk, with
    ``seq``, the ids as a dictionary of their bytes, or before 0017 of their hex."""
    rows = as_rows(arrays)
    for name in ("trace_id", "span_id"):
        index = rows.column_names.index(f"{name}_bytes")
        ids = rows.column(index).combine_chunks().cast(pa.binary())
        if hex_ids:
            rows = rows.set_column(index, name, pa.array([v.hex() for v in ids.to_pylist()]).dictionary_encode())
        else:
            rows = rows.set_column(index, f"{name}_bytes", ids.dictionary_encode())
    return rows


@pytest.mark.parametrize("hex_ids", [False, True])
def test_chunk_rows_spooled_before_chunks_became_arrays_are_written_after_the_upgrade(tmp_path, store_client, hex_ids):
    """A chunks block in the layout before migration 0020 (one row a chunk) or before 0017 as well (hex trace_id
    and span_id), left in the spool by a collector of an earlier version, is written by this one, the same."""
    old = batch(0xAB, "a", chunks=4)
    old.blocks["chunks"] = as_chunk_rows(old.blocks.pop("chunk_arrays"), hex_ids)
    write_through_the_spool(tmp_path, store_client, [old, batch(0xCD, "b")])
    rows = store_client.query("SELECT trace_id, span_id, seq, kind FROM chunks ORDER BY trace_id, seq").result_rows
    assert rows == [
        *[("ab" * 16, "ab" * 8, seq, "first" if seq == 0 else "content") for seq in range(4)],
        *[("cd" * 16, "cd" * 8, seq, "first" if seq == 0 else "content") for seq in range(3)],
    ]
    assert stored(store_client) == [("a", 4), ("b", 3)]
    assert not list(tmp_path.glob("*.seg")) and not list(tmp_path.rglob("*quarantine*/*"))


def test_streams_spooled_before_their_chunks_were_counted_by_tokens_get_the_counts_decode_gives(tmp_path, store_client):
    """A streams block without content_chunks_by_tokens (before migration 0019), left in the spool beside a block
    in the current layout, is written with each stream's counts, taken from the chunks spooled with it."""
    request = request_of(
        plain_stream_span(0xA1, [10, 20, 30, 40], tokens=[2, 5, 2, 2]), plain_stream_span(0xB2, [10, 20], tokens=[3, 1])
    )
    old = decode_traces(request, tenant="before")
    streams = old.blocks["streams"]
    old.blocks["streams"] = streams.drop_columns(["content_chunks_by_tokens"])
    write_through_the_spool(tmp_path, store_client, [old, batch(0xC3, "after")])
    rows = store_client.query(
        "SELECT tenant, span_id, content_chunks_by_tokens FROM streams ORDER BY tenant, span_id"
    ).result_rows
    assert rows == [
        ("after", "c3" * 8, {1: 3}),
        ("before", "a1" * 8, {2: 3, 5: 1}),
        ("before", "b2" * 8, {1: 1, 3: 1}),
    ]
    assert [dict(m) for m in streams["content_chunks_by_tokens"].to_pylist()] == [r[2] for r in rows[1:]]


def test_streams_spooled_before_coverage_was_decoded_are_written_as_what_they_were(tmp_path, store_client):
    """A streams block without source and coverage (an earlier version decoded it), left in the spool beside one
    in the current layout, is written as streamscope's own, full unless its timeline was truncated."""
    old = decode_traces(request_of(plain_stream_span(0xA1, [10, 20])), tenant="before")
    streams = old.blocks["streams"].drop_columns(["source", "coverage"])
    truncated = pa.array([True], pa.bool_())
    old.blocks["streams"] = streams.set_column(
        streams.schema.get_field_index("timeline_truncated"), "timeline_truncated", truncated
    )
    write_through_the_spool(tmp_path, store_client, [old, batch(0xC3, "after")])
    rows = store_client.query("SELECT tenant, source, coverage FROM streams ORDER BY tenant").result_rows
    assert rows == [("after", "streamscope", "full"), ("before", "streamscope", "partial")]


def test_a_drained_spool_opened_again_never_repeats_a_token_so_new_data_is_not_taken_for_a_replay(
    tmp_path, store_client
):
    for run, tenant in enumerate(["before", "after"]):
        writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
        writer.submit(batch(run + 1, tenant)).stored.result(timeout=10)  # segment 1 of a spool drained each time
        writer.shutdown()
    assert stored(store_client) == [("after", 3), ("before", 3)]


def test_spans_sent_again_in_a_later_request_are_stored_once(tmp_path, store_client):
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    writer.submit(batch(1, "a")).stored.result(timeout=10)
    again = [writer.submit(batch(1, "a")), writer.submit(batch(2, "a")), writer.submit(batch(2, "a"))]
    for ticket in again:
        ticket.stored.result(timeout=10)
    writer.shutdown()
    assert stored(store_client) == [("a", 6)]
    assert stored(store_client, "streams") == [("a", 2)]
    assert stored(store_client, "ingest_requests") == [("a", 4)]  # every request is logged, once


def test_a_span_that_shares_only_its_span_id_with_a_stored_one_is_stored_too(tmp_path, store_client):
    first, other = plain_stream_span(1, [0, 1, 2]), plain_stream_span(1, [0, 1, 2])
    other.trace_id = bytes([2]) * 16  # the stored span's span id, in another trace
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    for span in (first, other, other):
        decoded = decode_traces(request_of(span), tenant="a")
        writer.submit(decoded).stored.result(timeout=10)
    writer.shutdown()
    assert stored(store_client, "streams") == [("a", 2)]
    assert stored(store_client) == [("a", 6)]


@pytest.mark.parametrize("one_insert", [True, False], ids=["in one insert", "one after the other"])
def test_a_span_another_tenant_sends_with_the_same_ids_is_never_taken_for_a_repeat(tmp_path, store_client, one_insert):
    """A downstream service that got a tenant's ``traceparent`` knows its ids: its own spans with those ids are
    its own, and never make the first tenant's disappear."""
    spool = Spool(tmp_path, max_bytes=10**8)
    first, second = batch(1, "intruder"), batch(1, "owner")
    if one_insert:
        spool.append([first, second])
        GroupCommitWriter(spool, ClickHouseWriter(store_client), FAST_RETRY).shutdown()
    else:
        writer = GroupCommitWriter(spool, ClickHouseWriter(store_client), FAST_RETRY)
        for each in (first, second, batch(1, "owner")):
            writer.submit(each).stored.result(timeout=10)
        writer.shutdown()
    assert stored(store_client, "streams") == [("intruder", 1), ("owner", 1)]
    assert stored(store_client) == [("intruder", 3), ("owner", 3)]


class RefusingSink:
    def __init__(self) -> None:
        self.written: list[str] = []

    def write(self, batches: list[DecodedBatch], token: str, **tables) -> int:
        tenants = {t for b in batches for block in b.blocks.values() for t in block.column("tenant").to_pylist()}
        if "bad" in tenants:
            raise WriteError("store refused the request: bad rows")
        self.written.extend(sorted(tenants))
        return 0


def test_a_refused_batch_is_quarantined_and_the_others_stored(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**8)
    spool.append([batch(1, "x"), batch(2, "bad"), batch(3, "y")])
    sink = RefusingSink()
    writer = GroupCommitWriter(spool, sink, FAST_RETRY)
    refused = writer.submit(batch(4, "bad"))
    with pytest.raises(WriteError, match=r"kept in .*quarantine"):
        refused.stored.result(timeout=10)
    writer.shutdown()
    assert sink.written == ["x", "y"]
    kept = sorted((tmp_path / "quarantine").glob("*.seg"))
    assert len(kept) == 4  # each refused batch's span, and its request's log row, each refused alone
    for path in kept:
        (quarantined,) = decode(path.read_bytes(), path)
        assert {t for block in quarantined.blocks.values() for t in block.column("tenant").to_pylist()} == {"bad"}


def poisoned(batch: DecodedBatch, row: int) -> DecodedBatch:
    """``batch`` with stream ``row``'s time to first token past what the writer can count (decode never lets such a
    value through: the store's refusal of one row, made by hand)."""
    streams = batch.blocks["streams"]
    ttft = streams["ttft_us"].to_pylist()
    ttft[row] = 2**62
    index = streams.schema.get_field_index("ttft_us")
    batch.blocks["streams"] = streams.set_column(index, "ttft_us", pa.array(ttft, pa.uint64()))
    return batch


def test_a_refused_batch_is_cut_down_until_only_the_refused_rows_are_quarantined(tmp_path, store_client):
    spans = [plain_stream_span(byte, [0, 1, 2]) for byte in range(1, 6)]
    decoded = decode_traces(request_of(*spans), tenant="a")
    received = Received("http", "protobuf", "identity", 1, 1)
    with_request_row(decoded, tenant="a", signal="traces", received=received)
    refused = poisoned(decoded, 3)
    spool = Spool(tmp_path, max_bytes=10**8)
    spool.append([batch(9, "b"), refused, batch(10, "c")])
    GroupCommitWriter(spool, ClickHouseWriter(store_client), FAST_RETRY).shutdown()
    assert store_client.query("SELECT span_id FROM streams ORDER BY span_id").result_rows == [
        (bytes([byte]).hex() * 8,) for byte in (1, 2, 3, 5, 9, 10)
    ]
    assert stored(store_client) == [("a", 12), ("b", 3), ("c", 3)]
    assert stored(store_client, "ingest_requests") == [("a", 1), ("b", 1), ("c", 1)]
    (kept,) = (tmp_path / "quarantine").glob("*.seg")
    (quarantined,) = decode(kept.read_bytes(), kept)
    assert {table: block.num_rows for table, block in quarantined.blocks.items()} == {"chunk_arrays": 1, "streams": 1}
    assert quarantined.blocks["streams"]["span_id"].to_pylist() == ["04" * 8]


def test_an_unreadable_segment_is_set_aside_and_the_rest_written(tmp_path, store_client):
    spool = Spool(tmp_path, max_bytes=10**8)
    damaged = spool.append([batch(1, "a")])
    spool.append([batch(2, "b")])
    damaged.path.write_bytes(damaged.path.read_bytes()[:40])
    spool.close()
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    writer.shutdown()
    assert stored(store_client) == [("b", 3)]
    assert (tmp_path / "quarantine" / damaged.path.name).exists()


def test_a_full_spool_refuses_and_takes_again_once_drained(tmp_path):
    sink = GatedSink(writer=None)
    spool = Spool(tmp_path, max_bytes=len(encode([batch(1, "a")])) * 3 // 2)
    writer = GroupCommitWriter(spool, sink, FAST_RETRY)
    first = writer.submit(batch(1, "a"))
    first.spooled.result(timeout=10)
    with pytest.raises(SpoolFull, match="spool full"):
        for i in range(2, 20):
            writer.submit(batch(i, "a")).spooled.result(timeout=10)
    sink.gate.set()
    first.stored.result(timeout=10)  # the drain has freed the spool: a sender's retry after Retry-After goes in
    writer.submit(batch(30, "a")).stored.result(timeout=10)
    writer.shutdown()
    assert spool.bytes == 0


def test_one_collector_per_spool(tmp_path):
    first = Spool(tmp_path, max_bytes=10**6)
    with pytest.raises(ConfigError, match="in use by another collector"):
        Spool(tmp_path, max_bytes=10**6)
    first.close()
    Spool(tmp_path, max_bytes=10**6).close()


def test_shutdown_leaves_what_the_store_did_not_take_in_the_spool(tmp_path):
    sink = GatedSink(writer=None, failures=10**6)
    sink.gate.set()
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, FAST_RETRY)
    writer.submit(batch(1, "a")).spooled.result(timeout=10)
    writer.shutdown(drain_timeout_s=0.2)
    assert [s.seq for s in Spool(tmp_path, max_bytes=10**8).pending()] == [1]


class RefusedThenBusySink:
    """Refuses a multi-batch insert outright, then is busy for every batch tried alone."""

    def write(self, batches: list[DecodedBatch], token: str, **tables) -> int:
        if len(batches) > 1:
            raise WriteError("store refused the request: bad rows")
        raise RetryableWriteError("store busy: Too many parts (TOO_MANY_PARTS)")


def test_shutdown_ends_a_batch_by_batch_retry_and_leaves_the_segment_in_the_spool(tmp_path):
    spool = Spool(tmp_path, max_bytes=10**8)
    spool.append([batch(1, "a"), batch(2, "b")])
    writer = GroupCommitWriter(spool, RefusedThenBusySink(), FAST_RETRY)
    stopping = threading.Thread(target=writer.shutdown, kwargs={"drain_timeout_s": 0.2})
    stopping.start()
    stopping.join(timeout=30)
    assert not stopping.is_alive(), "shutdown waited on a store that stays busy"
    assert [s.seq for s in Spool(tmp_path, max_bytes=10**8).pending()] == [1]


def test_a_span_stored_before_is_found_by_its_ids_whatever_their_bytes(tmp_path, store_client):
    """The lookup binds each span's key as the number its hex spells: ids of distinct bytes (and a leading zero)
    must read the same in the query as in the batch."""
    span = plain_stream_span(1, [0, 10, 20])
    span.trace_id, span.span_id = bytes(range(16)), bytes(range(200, 208))
    sent = decode_traces(request_of(span), tenant="a")
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), FAST_RETRY)
    writer.submit(sent).stored.result(timeout=10)
    writer.submit(decode_traces(request_of(span), tenant="a")).stored.result(timeout=10)
    writer.shutdown()
    assert stored(store_client) == [("a", 3)]
    assert stored(store_client, "streams") == [("a", 1)]


PACED = GroupCommitConfig(retry_initial_s=0.01, retry_max_s=0.05, insert_interval_s=600)
"""Inserts at most every ten minutes: whatever a test sees stored sooner was not held for the interval."""


def test_batches_spooled_while_an_insert_waits_for_its_interval_join_that_insert(tmp_path, store_client):
    sink = GatedSink(ClickHouseWriter(store_client))
    sink.gate.set()
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, PACED)
    writer.submit(batch(1, "a")).stored.result(timeout=10)  # the first insert does not wait
    for i in range(2, 6):
        writer.submit(batch(i, "b")).spooled.result(timeout=10)
    writer.shutdown()  # the drain writes what is left at once
    assert sink.segments == [1, 4]
    assert stored(store_client) == [("a", 3), ("b", 12)]


@pytest.mark.parametrize("reader", ["flush", "wait_stored"])
def test_a_reader_waiting_for_the_store_does_not_wait_for_the_interval(tmp_path, store_client, reader):
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), PACED)
    writer.submit(batch(1, "a")).stored.result(timeout=10)
    ticket = writer.submit(batch(2, "b"))
    ticket.spooled.result(timeout=10)
    if reader == "flush":
        assert writer.flush(30)
    else:
        writer.wait_stored(ticket, 30)
    assert stored(store_client) == [("a", 3), ("b", 3)]
    writer.shutdown()


def test_a_full_insert_does_not_wait_for_the_interval(tmp_path, store_client):
    full_at_once = GroupCommitConfig(insert_interval_s=600, max_insert_bytes=1)
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), ClickHouseWriter(store_client), full_at_once)
    writer.submit(batch(1, "a")).stored.result(timeout=30)
    writer.submit(batch(2, "b")).stored.result(timeout=30)  # one segment is a full insert already
    writer.shutdown()
    assert stored(store_client) == [("a", 3), ("b", 3)]


def test_a_retry_does_not_wait_for_the_interval(tmp_path, store_client):
    sink = GatedSink(ClickHouseWriter(store_client), failures=2)
    sink.gate.set()
    writer = GroupCommitWriter(Spool(tmp_path, max_bytes=10**8), sink, PACED)
    writer.submit(batch(1, "a")).stored.result(timeout=30)  # its first insert failed, and the next
    writer.shutdown()
    assert stored(store_client) == [("a", 3)] and writer.store_failures == 2
