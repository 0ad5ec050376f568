"""Group commit: concurrent requests share one insert per table, and each waits for its own rows.

The collector's request handlers call ``write``; one worker thread drains what is pending into a single
batch, writes it, and wakes every waiter with the outcome. Fewer, larger inserts are what ClickHouse wants,
and the bounded queue is where back-pressure starts (a durable spool can later sit in this seam).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol

from ingest.batch import DecodedBatch, concat
from streamscope.errors import RetryableWriteError, WriteError

log = logging.getLogger(__name__)


class BlockSink(Protocol):
    def write(self, batch: DecodedBatch) -> None: ...


@dataclass(frozen=True)
class GroupCommitConfig:
    max_pending_rows: int = 2_000_000
    """Rows (of every table) queued at most; past this, writes fail fast with RetryableWriteError."""
    max_group_rows: int = 1_000_000
    """Rows merged into one insert at most."""


class GroupCommitWriter:
    def __init__(self, sink: BlockSink, config: GroupCommitConfig | None = None) -> None:
        self._sink = sink
        self._config = config or GroupCommitConfig()
        self._pending: deque[tuple[DecodedBatch, Future[None]]] = deque()
        self._pending_rows = 0
        self._lock = threading.Condition()
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="streamscope-writer", daemon=True)
        self._worker.start()

    def write(self, batch: DecodedBatch, timeout_s: float | None = None) -> None:
        """Block until ``batch`` is in the store; raises what the store raised."""
        self.submit(batch).result(timeout=timeout_s)

    def submit(self, batch: DecodedBatch) -> Future[None]:
        future: Future[None] = Future()
        rows = _rows(batch)
        if rows == 0:
            future.set_result(None)
            return future
        with self._lock:
            if self._closed:
                raise WriteError("writer is shut down")
            if self._pending_rows + rows > self._config.max_pending_rows and self._pending:
                raise RetryableWriteError(f"write queue full ({self._pending_rows} rows pending)")
            self._pending.append((batch, future))
            self._pending_rows += rows
            self._lock.notify()
        return future

    def shutdown(self) -> None:
        """Write what is queued, then stop the worker."""
        with self._lock:
            self._closed = True
            self._lock.notify()
        self._worker.join()

    def _take_group(self) -> list[tuple[DecodedBatch, Future[None]]] | None:
        with self._lock:
            while not self._pending and not self._closed:
                self._lock.wait()
            if not self._pending:
                return None
            group = [self._pending.popleft()]
            rows = _rows(group[0][0])
            while self._pending and rows + _rows(self._pending[0][0]) <= self._config.max_group_rows:
                item = self._pending.popleft()
                rows += _rows(item[0])
                group.append(item)
            self._pending_rows -= rows
            return group

    def _run(self) -> None:
        while (group := self._take_group()) is not None:
            try:
                self._sink.write(concat([batch for batch, _ in group]))
            except RetryableWriteError as exc:
                for _, future in group:
                    future.set_exception(exc)
            except Exception as exc:
                self._isolate(group, exc)
            else:
                for _, future in group:
                    future.set_result(None)

    def _isolate(self, group: list[tuple[DecodedBatch, Future[None]]], exc: Exception) -> None:
        """A refused group: write its batches one by one so one bad batch fails only its own request."""
        if len(group) == 1:
            log.warning("store refused a batch: %s", exc)
            group[0][1].set_exception(exc if isinstance(exc, WriteError) else WriteError(str(exc)))
            return
        log.warning("a grouped insert of %d batches failed (%s); writing them one by one", len(group), exc)
        for batch, future in group:
            try:
                self._sink.write(batch)
            except Exception as single:
                log.warning("store refused a batch: %s", single)
                future.set_exception(single if isinstance(single, WriteError) else WriteError(str(single)))
            else:
                future.set_result(None)


def _rows(batch: DecodedBatch) -> int:
    return batch.total_rows
