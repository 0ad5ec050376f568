"""Group commit through the durable spool: a request is acknowledged once on disk, then written in order.

Request handlers call ``submit``. The appender thread takes everything pending, writes it as one spool
segment (one fsync for all of them) and tells each request it is durable. The drain thread writes segments
to the store oldest first, one insert per table each (fewer, larger inserts are what ClickHouse wants),
removes a segment once the store has all of it, and tells the requests still waiting.

While the store fails with a retryable error, the drain retries the same segment with exponential backoff;
segments accumulate in the spool up to its size limit, past which appends fail with SpoolFull (the collector
answers 503), and the drain catches up by itself when the store returns. A segment the store refuses for
good is written batch by batch, so one bad request's rows are set aside in the spool's quarantine and the
others are stored. Segments left by a crash are written first, at start.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Protocol

from streamscope.errors import RetryableWriteError, WriteError
from streamscope_ingest.decode.batch import DecodedBatch
from streamscope_ingest.durability.spool import Segment, Spool

log = logging.getLogger(__name__)


class SegmentSink(Protocol):
    def write(self, batches: list[DecodedBatch], token: str) -> int:
        """Store the batches idempotently under ``token``; returns how many repeated spans it left out."""
        ...


class WriteObserver(Protocol):
    """What the writer reports as it goes (the collector's self-metrics)."""

    def insert_written(self, seconds: float, batches: list[DecodedBatch], repeated_spans: int) -> None: ...

    def store_failed(self, error: Exception) -> None: ...

    def quarantined(self, batches: int) -> None: ...


@dataclass(frozen=True)
class GroupCommitConfig:
    max_group_rows: int = 1_000_000
    """Rows merged into one spool segment (and so one insert) at most."""
    max_insert_bytes: int = 64 * 1024 * 1024
    """Spool segments (their size on disk) merged into one insert at most, when the store is behind."""
    retry_initial_s: float = 0.1
    retry_max_s: float = 5.0
    """The backoff between attempts to write a segment while the store fails doubles up to this."""


@dataclass
class Ticket:
    spooled: Future[None] = field(default_factory=Future)
    """Done when the batch is durable in the spool: the request may be acknowledged."""
    stored: Future[None] = field(default_factory=Future)
    """Done when the store has the batch's rows."""


class GroupCommitWriter:
    def __init__(
        self,
        spool: Spool,
        sink: SegmentSink,
        config: GroupCommitConfig | None = None,
        observer: WriteObserver | None = None,
    ) -> None:
        self._spool = spool
        self._sink = sink
        self._config = config or GroupCommitConfig()
        self._observer = observer
        self._queue: deque[tuple[DecodedBatch, Ticket]] = deque()
        self._segments: deque[Segment] = deque(spool.pending())  # a crash's leftovers first
        self._first_group = spool.first_group()
        self._waiting: dict[int, list[Ticket]] = {}
        self._last_ticket: Ticket | None = None
        self._lock = threading.Condition()
        self._closing = False
        self._drain_deadline = float("inf")
        self.store_healthy = True
        """False from a failed write to the next successful one: requests then do not wait for the store."""
        self.last_error = ""
        self._appender = threading.Thread(target=self._append_loop, name="streamscope-spool", daemon=True)
        self._drainer = threading.Thread(target=self._drain_loop, name="streamscope-writer", daemon=True)
        self._appender.start()
        self._drainer.start()

    def submit(self, batch: DecodedBatch) -> Ticket:
        ticket = Ticket()
        if batch.total_rows == 0:
            ticket.spooled.set_result(None)
            ticket.stored.set_result(None)
            return ticket
        with self._lock:
            if self._closing:
                raise WriteError("writer is shut down")
            self._queue.append((batch, ticket))
            self._last_ticket = ticket
            self._lock.notify_all()
        return ticket

    def flush(self, timeout_s: float) -> bool:
        """Wait until every batch submitted before this call, and every segment a crash left, has reached the store
        (or been refused by it, or by the spool); False if ``timeout_s`` passed first. Segments are stored oldest
        first, so the last batch's turn, and the newest segment's, are all of them."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            last = self._last_ticket
            newest = self._segments[-1].seq if self._segments else None
        if last is not None:
            try:
                last.stored.exception(timeout=timeout_s)
            except FutureTimeout:
                return False
        with self._lock:
            while newest is not None and self._segments and self._segments[0].seq <= newest:
                if (remaining := deadline - time.monotonic()) <= 0:
                    return False
                self._lock.wait(remaining)
        return True

    def backlog(self) -> int:
        """Segments waiting for the store."""
        with self._lock:
            return len(self._segments)

    def shutdown(self, drain_timeout_s: float = 10.0) -> None:
        """Spool what is queued, write the spool to the store for up to ``drain_timeout_s``, then stop.

        What the store has not taken by then stays in the spool and is written at the next start.
        """
        with self._lock:
            self._closing = True
            self._drain_deadline = time.monotonic() + drain_timeout_s
            self._lock.notify_all()
        self._appender.join()
        with self._lock:
            self._lock.notify_all()
        self._drainer.join()
        self._spool.close()

    # the appender

    def _take_group(self) -> list[tuple[DecodedBatch, Ticket]] | None:
        with self._lock:
            while not self._queue and not self._closing:
                self._lock.wait()
            if not self._queue:
                return None
            group = [self._queue.popleft()]
            rows = group[0][0].total_rows
            while self._queue and rows + self._queue[0][0].total_rows <= self._config.max_group_rows:
                item = self._queue.popleft()
                rows += item[0].total_rows
                group.append(item)
            return group

    def _append_loop(self) -> None:
        while (group := self._take_group()) is not None:
            tickets = [ticket for _, ticket in group]
            try:
                segment = self._spool.append([batch for batch, _ in group])
            except Exception as exc:
                error = exc if isinstance(exc, WriteError) else WriteError(f"cannot spool the request: {exc}")
                for ticket in tickets:
                    ticket.spooled.set_exception(error)
                    ticket.stored.set_exception(error)
                continue
            with self._lock:
                self._segments.append(segment)
                self._waiting[segment.seq] = tickets
                self._lock.notify_all()
            for ticket in tickets:
                ticket.spooled.set_result(None)

    # the drain

    def _next_group(self) -> list[Segment] | None:
        """The oldest segments, merged up to ``max_insert_bytes``; None when shutting down and done."""
        with self._lock:
            while not self._segments and not (self._closing and not self._appender.is_alive()):
                self._lock.wait(0.5)
            if not self._segments or time.monotonic() > self._drain_deadline:
                return None
            if self._first_group:
                group, self._first_group = self._first_group, []
                return group
            group, size = [self._segments[0]], self._segments[0].size
            for segment in list(self._segments)[1:]:
                if size + segment.size > self._config.max_insert_bytes:
                    break
                group.append(segment)
                size += segment.size
            return group

    def _drain_loop(self) -> None:
        backoff = self._config.retry_initial_s
        while (group := self._next_group()) is not None:
            try:
                error = self._write_group(group)
            except Exception as exc:  # the store failed, or the disk did: the same group again, later
                if not isinstance(exc, RetryableWriteError):
                    log.error("writing spool segments %s failed; retrying", [s.seq for s in group], exc_info=exc)
                self._store_failed(exc)
                self._first_group = group  # the same segments again, under the same token
                if not self._pause(backoff):
                    return
                backoff = min(backoff * 2, self._config.retry_max_s)
                continue
            backoff = self._config.retry_initial_s
            self.store_healthy = True
            self._spool.remove(group)
            with self._lock:
                for _ in group:
                    self._segments.popleft()
                tickets = [t for segment in group for t in self._waiting.pop(segment.seq, [])]
                self._lock.notify_all()  # for flush
            for ticket in tickets:
                if error is None:
                    ticket.stored.set_result(None)
                else:
                    ticket.stored.set_exception(error)

    def _write_group(self, group: list[Segment]) -> WriteError | None:
        """Store ``group``; returns the error a refused batch met (its rows quarantined), None if all went in."""
        batches: list[DecodedBatch] = []
        for segment in group:
            try:
                batches += self._spool.read(segment)
            except Exception as exc:  # a damaged file: keep it for a human, go on with the rest
                path = self._spool.set_aside(segment)
                log.error("spool segment %s cannot be read (%s); moved to %s", segment.path, exc, path)
                self._report_quarantined(1)
        if not batches:
            return WriteError("spool segment unreadable")
        if len(group) > 1:
            self._spool.begin_group(group)
        token = self._spool.token(group)
        started = time.monotonic()
        try:
            repeated = self._sink.write(batches, token)
        except RetryableWriteError:
            raise
        except Exception as exc:
            return self._isolate(token, batches, exc)
        if self._observer is not None:
            self._observer.insert_written(time.monotonic() - started, batches, repeated)
        return None

    def _isolate(self, token: str, batches: list[DecodedBatch], exc: Exception) -> WriteError | None:
        """A refused insert: write its batches one by one; the ones refused again go to quarantine."""
        log.warning("the store refused an insert of %d batch(es) (%s); writing them one by one", len(batches), exc)
        first_error: WriteError | None = None
        for index, batch in enumerate(batches):
            backoff = self._config.retry_initial_s
            while True:
                try:
                    self._sink.write([batch], f"{token}.{index}")
                    break
                except RetryableWriteError as retryable:
                    self._store_failed(retryable)
                    if not self._pause(backoff):
                        raise  # shutting down: the group stays spooled; the batches written keep their tokens
                    backoff = min(backoff * 2, self._config.retry_max_s)
                except Exception as refused:
                    path = self._spool.quarantine(batch, f"{token}.{index}")
                    log.error("the store refused a batch (%s); kept in %s", refused, path)
                    self._report_quarantined(1)
                    first_error = first_error or WriteError(f"store refused the rows ({refused}); kept in {path}")
                    break
        return first_error

    def _store_failed(self, exc: Exception) -> None:
        if self.store_healthy:
            log.warning("store write failed, retrying with backoff while the spool holds the data: %s", exc)
        self.store_healthy = False
        self.last_error = str(exc)
        if self._observer is not None:
            self._observer.store_failed(exc)

    def _report_quarantined(self, batches: int) -> None:
        if self._observer is not None:
            self._observer.quarantined(batches)

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` before the next attempt, however often new segments wake the lock (a busy store is
        not retried at the request rate); False when the shutdown's drain deadline came first."""
        resume = time.monotonic() + seconds
        with self._lock:
            while (now := time.monotonic()) < (until := min(resume, self._drain_deadline)):
                self._lock.wait(until - now)
        return time.monotonic() <= self._drain_deadline
