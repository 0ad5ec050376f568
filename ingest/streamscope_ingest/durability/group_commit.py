"""Group commit through the durable spool: a request is acknowledged once on disk, then written in order.

Request handlers call ``submit``. The appender thread takes everything pending, writes it as one spool
segment (one fsync for all of them) and tells each request it is durable. The drain thread writes segments
to the store oldest first, one insert per table each, at most one insert an ``insert_interval_s`` (what is
spooled meanwhile joins the next: fewer, larger inserts are what ClickHouse wants), removes a segment once the
store has all of it, and tells the requests still waiting.

While the store fails, the drain retries the same segments under the same token with exponential backoff;
segments accumulate in the spool up to its size limit, past which appends fail with SpoolFull (the collector
answers 503), and the drain catches up by itself when the store returns. A failure is the store's until shown
otherwise: an insert that fails over and over, or that the store refuses outright, is written batch by batch
(``streamscope_ingest.durability.isolation``), and a batch that still fails alone while the store takes other
data is set aside in the spool's quarantine with its reason; the rest goes on. Segments left by a crash are
written first, at start. No exception ends the drain: a fault of the spool's own disk (a segment that cannot
be removed) is reported in ``fault`` and retried.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from dataclasses import dataclass, field

from streamscope.errors import SpoolUnavailable, StreamscopeError, WriteError
from streamscope.threads import named_thread
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.durability.isolation import (
    WHOLE_SEGMENT,
    Errors,
    GroupWriter,
    Outcome,
    SegmentSink,
    WriteObserver,
)
from streamscope_ingest.durability.spool import Group, Segment, Spool

__all__ = ["GroupCommitConfig", "GroupCommitWriter", "SegmentSink", "Ticket", "WriteObserver"]

log = logging.getLogger(__name__)
SPOOL_THREAD = "streamscope-spool"
WRITER_THREAD = "streamscope-writer"


@dataclass(frozen=True)
class GroupCommitConfig:
    max_group_rows: int = 1_000_000
    """Rows merged into one spool segment (and so one insert) at most."""
    max_insert_bytes: int = 64 * 1024 * 1024
    """Spool segments (their size on disk) merged into one insert at most, when the store is behind."""
    insert_interval_s: float = 1.0
    """Inserts start at most this often; segments spooled meanwhile join the next one. Each insert costs the store
    a part per table and a fixed share of work, so fewer, larger ones cost less a row and merge less. A full group
    (``max_insert_bytes``), a retry, or a reader waiting for the store (``flush``, ``wait_stored``) does not wait."""
    retry_initial_s: float = 0.1
    retry_max_s: float = 5.0
    """The backoff between attempts to write a segment while the store fails doubles up to this."""
    isolate_after: int = 5
    """Failed attempts of one insert after which its batches are written one by one."""
    alone_attempts: int = 3
    """Attempts of a batch written alone before, the store taking other data, it is quarantined."""


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
        self._config = config or GroupCommitConfig()
        self._observer = observer
        self._queue: deque[tuple[DecodedBatch, Ticket]] = deque()
        self._segments: dict[int, Segment] = {s.seq: s for s in spool.pending()}  # oldest first
        self._waiting: dict[int, list[Ticket]] = {}
        self._last_ticket: Ticket | None = None
        self._last_insert = -float("inf")
        self._retrying = False
        self._hurry = 0
        """Readers waiting for the store now: while there are any, inserts do not wait for ``insert_interval_s``."""
        self._lock = threading.Condition()
        self._closing = False
        self._drain_deadline = float("inf")
        self._groups = GroupWriter(spool, sink, self._config, observer, self._pause, self._oldest_outside)
        self.fault = ""
        """The writer's own trouble (the spool's disk failing under it) while it lasts; empty when there is none."""
        self.spool_error = ""
        """Why the last append failed, until one succeeds again; empty when the spool takes writes."""
        self._appender = named_thread(self._append_loop, SPOOL_THREAD)
        self._drainer = named_thread(self._drain_loop, WRITER_THREAD)
        self._appender.start()
        self._drainer.start()

    @property
    def store_healthy(self) -> bool:
        """False from a failed write to the next successful one: requests then do not wait for the store."""
        return self._groups.store_healthy

    @property
    def last_error(self) -> str:
        return self._groups.last_error

    @property
    def store_failures(self) -> int:
        """Failed store writes so far."""
        return self._groups.failures

    @property
    def alive(self) -> bool:
        """Both threads running (or done after ``shutdown``): the writer can make progress."""
        return self._closing or (self._appender.is_alive() and self._drainer.is_alive())

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
        (or been refused by it, or by the spool); False if ``timeout_s`` passed first."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            last = self._last_ticket
            newest = max(self._segments, default=None)
        with self._hurrying():
            if last is not None:
                try:
                    last.stored.exception(timeout=timeout_s)
                except FutureTimeout:
                    return False
            with self._lock:
                while newest is not None and self._segments and next(iter(self._segments)) <= newest:
                    if (remaining := deadline - time.monotonic()) <= 0:
                        return False
                    self._lock.wait(remaining)
        return True

    def wait_stored(self, ticket: Ticket, timeout_s: float) -> None:
        """Wait up to ``timeout_s`` until the store has ``ticket``'s rows (raising what ``ticket.stored`` raises),
        its insert starting without waiting for ``insert_interval_s``."""
        with self._hurrying():
            ticket.stored.result(timeout=timeout_s)

    @contextmanager
    def _hurrying(self) -> Iterator[None]:
        with self._lock:
            self._hurry += 1
            self._lock.notify_all()
        try:
            yield
        finally:
            with self._lock:
                self._hurry -= 1

    def backlog(self) -> int:
        """Segments waiting for the store."""
        with self._lock:
            return len(self._segments)

    def check_spool(self) -> str:
        """Why the spool does not take writes now, after a failed append; empty when it does (tried again)."""
        if self.spool_error:
            try:
                self._spool.check_writable()
            except OSError as exc:
                return str(SpoolUnavailable(f"the spool cannot take requests: {exc.strerror or type(exc).__name__}"))
            self.spool_error = ""
        return ""

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
                error = self._append_failed(exc)
                for ticket in tickets:
                    ticket.spooled.set_exception(error)
                    ticket.stored.set_exception(error)
                continue
            self.spool_error = ""
            with self._lock:
                self._segments[segment.seq] = segment
                self._waiting[segment.seq] = tickets
                self._lock.notify_all()
            for ticket in tickets:
                ticket.spooled.set_result(None)

    def _append_failed(self, exc: Exception) -> StreamscopeError:
        """What the requests of a failed append are told: the spool's own error (its disk: retry later), or, for
        anything else, an internal error whose text stays in the log."""
        if isinstance(exc, SpoolUnavailable):
            if self.spool_error != str(exc):
                log.error("the spool refuses writes (%s); answering 503 until it takes them", exc.__cause__)
            self.spool_error = str(exc)
            return exc
        if isinstance(exc, WriteError):
            return exc
        log.error("cannot spool a request", exc_info=exc)
        return StreamscopeError("cannot spool the request")

    # the drain

    def _next_group(self) -> Group | None:
        """The oldest segments, merged up to ``max_insert_bytes``; None when shutting down and done."""
        with self._lock:
            while not self._segments and not (self._closing and not self._appender.is_alive()):
                self._lock.wait(0.5)
            while (wait := self._insert_wait()) > 0:
                self._lock.wait(wait)
            if not self._segments or time.monotonic() > self._drain_deadline:
                return None
            self._last_insert = time.monotonic()
            pending = list(self._segments.values())
            pinned = self._groups.pinned
            if pending[0].seq in pinned:  # tried before (in this run, or by the one a crash ended): as it was
                return pinned[pending[0].seq]
            group, size = [pending[0]], pending[0].size
            for segment in pending[1:]:
                if segment.seq in pinned or size + segment.size > self._config.max_insert_bytes:
                    break
                group.append(segment)
                size += segment.size
        return self._spool.group(group)

    def _insert_wait(self) -> float:
        """Seconds the next insert waits for more segments to join it (``insert_interval_s``); 0: start it now.
        Called holding the lock."""
        if self._closing or self._hurry or self._retrying or not self._segments:
            return 0.0  # a retry waits for its own backoff alone
        if sum(segment.size for segment in self._segments.values()) >= self._config.max_insert_bytes:
            return 0.0
        return self._last_insert + self._config.insert_interval_s - time.monotonic()

    def _oldest_outside(self, group: Group) -> Segment | None:
        """The oldest segment outside ``group``: written ahead of it, it shows whether the store takes other data."""
        with self._lock:
            return next((s for s in self._segments.values() if s not in group.segments), None)

    def _drain_loop(self) -> None:
        backoff = self._config.retry_initial_s
        while (group := self._next_group()) is not None:
            try:
                outcome = self._groups.write(group)
                if not all(self._finish(finished.group, finished.errors) for finished in outcome.finished):
                    return  # shutdown came first; what is left is written at the next start, under the same tokens
            except Exception as exc:  # the spool's disk under the writer, or a bug: never the end of the drain
                self._report_fault(exc)
                outcome = Outcome(done=False)
            self._retrying = not outcome.done
            if outcome.done:
                backoff = self._config.retry_initial_s
                continue
            if not self._pause(backoff):  # then the same segments again, under the same token
                return
            backoff = min(backoff * 2, self._config.retry_max_s)

    def _finish(self, group: Group, errors: Errors) -> bool:
        """``group`` is done with (stored, or its refused batches quarantined): remove it from the spool, retrying
        while the disk refuses, and answer the requests waiting for it; False if shutdown came first."""
        backoff = self._config.retry_initial_s
        while True:
            try:
                self._spool.remove(group)
                break
            except OSError as exc:
                self._report_fault(exc)
                if not self._pause(backoff):
                    return False  # left in the spool, written again under the same token at the next start
                backoff = min(backoff * 2, self._config.retry_max_s)
        self.fault = ""
        with self._lock:
            for segment in group.segments:
                self._segments.pop(segment.seq, None)
            waiting = {s.seq: self._waiting.pop(s.seq, []) for s in group.segments}
            self._lock.notify_all()  # for flush
        for seq, tickets in waiting.items():
            for index, ticket in enumerate(tickets):
                error = errors.get((seq, index)) or errors.get((seq, WHOLE_SEGMENT))
                if error is None:
                    ticket.stored.set_result(None)
                else:
                    ticket.stored.set_exception(error)
        return True

    def _report_fault(self, exc: Exception) -> None:
        message = f"the writer cannot go on: {exc}"
        if message != self.fault:
            log.error("%s; retrying", message, exc_info=exc)
        self.fault = message
        if self._observer is not None:
            self._observer.writer_failed(exc)

    def _pause(self, seconds: float) -> bool:
        """Wait ``seconds`` before the next attempt, however often new segments wake the lock (a busy store is
        not retried at the request rate); False when the shutdown's drain deadline came first."""
        resume = time.monotonic() + seconds
        with self._lock:
            while (now := time.monotonic()) < (until := min(resume, self._drain_deadline)):
                self._lock.wait(until - now)
        return time.monotonic() <= self._drain_deadline
