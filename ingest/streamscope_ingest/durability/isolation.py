"""Write one group of spool segments, and tell a store that cannot write from a batch that cannot be written.

A failure is taken for the store's (down, full, read-only, busy) until shown otherwise, and retried under the same
token. When an insert has failed ``isolate_after`` times, the oldest segment outside it is written ahead (the
probe): if the store does not take that either, the fault is the store's, and the group waits with everything
behind it. If it does, or if the store refused the insert as wrong data, the group is written batch by batch,
each under a token of its own and without the tables the whole insert had already stored. A batch the store calls
wrong alone, or that fails alone ``alone_attempts`` times while the store takes other data (the probe, or another
batch of the group), is cut in halves written alone in turn until what fails is one span or one row: that alone is
quarantined with its reason. So a full disk quarantines nothing, a batch the store can never take holds nothing
back, and a row it takes is never kept back with one it refuses.

Every group attempted under a token stays that group (``pinned``) until done, so that what it stored in part is
deduplicated when it is tried again, in this process or, through the spool's records, after a crash.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol

from streamscope.errors import RetryableWriteError, WriteError
from streamscope_ingest.blocks.batch import DecodedBatch, halves
from streamscope_ingest.durability.spool import Group, Segment, Spool

log = logging.getLogger(__name__)

WHOLE_SEGMENT = -1
"""The batch index of an error that stands for every batch of a segment (one that cannot be read)."""
Errors = dict[tuple[int, int], WriteError]
"""Why batches were not stored, by (segment seq, batch index)."""


class SegmentSink(Protocol):
    def write(
        self,
        batches: list[DecodedBatch],
        token: str,
        *,
        skip: frozenset[str] = frozenset(),
        written: set[str] | None = None,
    ) -> int:
        """Store the batches idempotently under ``token``, leaving out the tables in ``skip`` and adding each table
        stored to ``written``; returns how many repeated spans it left out."""
        ...


class WriteObserver(Protocol):
    """What the writer reports as it goes (the collector's self-metrics)."""

    def insert_written(self, seconds: float, batches: list[DecodedBatch], repeated_spans: int) -> None: ...

    def store_failed(self, error: Exception) -> None: ...

    def quarantined(self, batches: int) -> None: ...

    def writer_failed(self, error: Exception) -> None: ...


class Settings(Protocol):
    """What of ``GroupCommitConfig`` this module reads."""

    @property
    def isolate_after(self) -> int: ...

    @property
    def alone_attempts(self) -> int: ...

    @property
    def retry_initial_s(self) -> float: ...

    @property
    def retry_max_s(self) -> float: ...


@dataclass
class Finished:
    """A group done with: stored, but for the batches in ``errors`` (quarantined or unreadable)."""

    group: Group
    errors: Errors = field(default_factory=dict)


@dataclass
class Outcome:
    """What one attempt at a group came to: the groups it finished (the group, a probe), and whether the group was
    among them."""

    done: bool
    finished: list[Finished] = field(default_factory=list)


_PATH = re.compile(r"""(?<![\w:/])/[^\s"'\]\[,;()]+""")


def without_paths(text: str) -> str:
    """``text`` (a store's error, say) with every absolute filesystem path replaced by ``<path>``: for answers and
    probes anyone may read; the log keeps the paths."""
    return _PATH.sub("<path>", text)


class _Stopped(Exception):
    """The shutdown's deadline came during a retry."""


@dataclass
class _Batch:
    seq: int
    index: int
    batch: DecodedBatch


class GroupWriter:
    def __init__(
        self,
        spool: Spool,
        sink: SegmentSink,
        settings: Settings,
        observer: WriteObserver | None,
        pause: Callable[[float], bool],
        oldest_outside: Callable[[Group], Segment | None],
    ) -> None:
        """``pause(seconds)`` waits before a retry (False: the shutdown's deadline came); ``oldest_outside(group)``
        is the oldest pending segment not in ``group``, the probe's candidate."""
        self._spool, self._sink, self._settings, self._observer = spool, sink, settings, observer
        self._pause, self._oldest_outside = pause, oldest_outside
        self.pinned: dict[int, Group] = {}
        """Each segment of a group tried and not done, by seq: it is written as that group, under its token."""
        for group in spool.first_groups():
            self._pin(group)
        self._attempts: dict[str, int] = {}
        self._written: dict[str, set[str]] = {}
        self._done: dict[str, set[tuple[int, int]]] = {}
        self.store_healthy = True
        """False from a failed write to the next successful one: requests then do not wait for the store."""
        self.last_error = ""
        self.failures = 0

    def write(self, group: Group) -> Outcome:
        """Try ``group`` once (once batch by batch, when it is written so)."""
        if group.alone is None and len(group.segments) > 1 and not group.marker:
            group = self._spool.begin_group(list(group.segments))
        self._pin(group)
        batches, unreadable = self._read(group)
        if not batches:
            return self._finished(group, unreadable, Outcome(True))
        outcome = Outcome(False)
        store_takes_data = False
        if group.alone is None:
            error = self._write_whole(group, batches)
            if error is None:
                return self._finished(group, unreadable, Outcome(True))
            if not self._isolate_now(group, error):
                return outcome
            if isinstance(error, RetryableWriteError):  # the store's, unless it takes other data
                if not self._probe(group, outcome):
                    self._attempts.pop(self._spool.token(group), None)  # probe again after as many failures
                    return outcome
                store_takes_data = True
            group = self._spool.begin_alone(group, self._written.get(self._spool.token(group), set()))
            self._pin(group)
            log.warning("an insert failed (%s); writing its %d batch(es) one by one", self.last_error, len(batches))
        with suppress(_Stopped):  # shutting down: the group stays spooled, recorded as written batch by batch
            self._write_alone(group, batches, unreadable, outcome, store_takes_data)
        return outcome

    def _write_whole(self, group: Group, batches: list[_Batch]) -> Exception | None:
        token = self._spool.token(group)
        written = self._written.setdefault(token, set())
        return self._insert(group, [b.batch for b in batches], token, frozenset(), written)

    def _insert(
        self, group: Group, batches: list[DecodedBatch], token: str, skip: frozenset[str], written: set[str] | None
    ) -> Exception | None:
        started = time.monotonic()
        try:
            repeated = self._sink.write(batches, token, skip=skip, written=written)
        except Exception as exc:
            self._store_failed(exc)
            return exc
        self.store_healthy = True
        if self._observer is not None:
            self._observer.insert_written(time.monotonic() - started, batches, repeated)
        return None

    def _isolate_now(self, group: Group, error: Exception) -> bool:
        token = self._spool.token(group)
        self._attempts[token] = attempts = self._attempts.get(token, 0) + 1
        return not isinstance(error, RetryableWriteError) or attempts >= self._settings.isolate_after

    def _write_alone(
        self, group: Group, batches: list[_Batch], unreadable: Errors, outcome: Outcome, store_takes_data: bool
    ) -> None:
        """Each batch not yet stored, alone. One the store calls wrong is quarantined; one that keeps failing with
        an error the store could heal from, only if it failed after the store was shown to take other data
        (``store_takes_data``: it was already). Done (``outcome.done``) unless that could not be shown."""
        token = self._spool.token(group)
        done = self._done.setdefault(token, set())
        skip = group.alone or frozenset()
        failed: list[tuple[str, _Batch, set[str], Exception]] = []
        for item in batches:
            if (item.seq, item.index) in done:
                continue
            name, written = f"{token}.{item.seq}.{item.index}", set[str]()
            error = self._write_batch(group, name, item.batch, skip, written)
            if isinstance(error, RetryableWriteError) and not store_takes_data:
                if not self._probe(group, outcome):
                    return  # the store takes nothing now: no batch is to blame
                store_takes_data = True
                error = self._write_batch(group, name, item.batch, skip, written)  # again, the store taking data now
            if error is None:
                done.add((item.seq, item.index))
                store_takes_data = True
            else:
                failed.append((name, item, written, error))
        errors = dict(unreadable)
        for name, item, written, error in failed:
            if refused := self._narrowed(group, name, item.batch, skip | written, error):
                errors[(item.seq, item.index)] = refused
        self._finished(group, errors, outcome)
        outcome.done = True

    def _write_batch(
        self, group: Group, name: str, batch: DecodedBatch, skip: frozenset[str], written: set[str]
    ) -> Exception | None:
        """Write one batch alone under the token ``name``, up to ``alone_attempts`` times while the store calls it
        retryable; the tables it stored are added to ``written``."""
        backoff = self._settings.retry_initial_s
        for attempt in range(self._settings.alone_attempts):
            if attempt and not self._pause(backoff):
                raise _Stopped
            backoff = min(backoff * 2, self._settings.retry_max_s)
            error = self._insert(group, [batch], name, skip, written)
            if not isinstance(error, RetryableWriteError):
                return error
        return error

    def _narrowed(
        self, group: Group, name: str, batch: DecodedBatch, skip: frozenset[str], error: Exception
    ) -> WriteError | None:
        """A batch refused alone with ``error``, cut in halves (``halves``) written alone in turn, each refused half
        cut again, until what is refused is one span or one row: that alone is quarantined, so a row the store
        takes is never kept back with one it refuses. ``skip``: tables already stored whole. Returns why the first
        piece was quarantined, or None when every piece was stored."""
        rest = DecodedBatch({table: block for table, block in batch.blocks.items() if table not in skip})
        pieces = halves(rest)
        if pieces is None:
            return self._quarantine(name, rest, error)
        refused = None
        for suffix, piece in zip("ab", pieces, strict=True):
            written = set[str]()
            if (failure := self._write_batch(group, f"{name}.{suffix}", piece, skip, written)) is not None:
                failure = self._narrowed(group, f"{name}.{suffix}", piece, skip | written, failure)
            refused = refused or failure
        return refused

    def _probe(self, group: Group, outcome: Outcome) -> bool:
        """Write the oldest segment outside ``group`` ahead of it; True if the store took it."""
        segment = self._oldest_outside(group)
        if segment is None:
            return False
        probe = self.pinned.get(segment.seq) or self._spool.begin_probe(segment)
        self._pin(probe)
        batches, unreadable = self._read(probe)
        if not batches:
            self._finished(probe, unreadable, outcome)
            return False
        if self._write_whole(probe, batches) is not None:
            return False
        self._finished(probe, unreadable, outcome)
        return True

    def _quarantine(self, name: str, rest: DecodedBatch, error: Exception) -> WriteError:
        """Keep what the store did not take of a batch (``rest``) for ``streamscope spool replay``."""
        reason = f"the store refused it alone while taking other data: {error}"
        path = self._spool.quarantine(rest, name, reason)
        log.error("a batch was quarantined (%s); kept in %s for `streamscope spool replay`", error, path)
        if self._observer is not None:
            self._observer.quarantined(1)
        return WriteError(f"the store refused the rows ({without_paths(str(error))}); kept in the spool's quarantine")

    def _read(self, group: Group) -> tuple[list[_Batch], Errors]:
        """The group's batches; a segment that cannot be read is set aside for a human and its batches answered."""
        batches: list[_Batch] = []
        unreadable: Errors = {}
        for segment in group.segments:
            try:
                batches += [_Batch(segment.seq, i, b) for i, b in enumerate(self._spool.read(segment))]
            except Exception as exc:  # a damaged file: keep it for a human, go on with the rest
                if not segment.path.exists():
                    continue  # set aside on an earlier try
                path = self._spool.set_aside(segment)
                log.error("spool segment %s cannot be read (%s); moved to %s", segment.path, exc, path)
                if self._observer is not None:
                    self._observer.quarantined(1)
                unreadable[(segment.seq, WHOLE_SEGMENT)] = WriteError("spool segment unreadable; set aside")
        return batches, unreadable

    def _finished(self, group: Group, errors: Errors, outcome: Outcome) -> Outcome:
        token = self._spool.token(group)
        for state in (self._attempts, self._written, self._done):
            state.pop(token, None)
        for segment in group.segments:
            self.pinned.pop(segment.seq, None)
        outcome.finished.append(Finished(group, errors))
        return outcome

    def _pin(self, group: Group) -> None:
        for segment in group.segments:
            self.pinned[segment.seq] = group

    def _store_failed(self, exc: Exception) -> None:
        if self.store_healthy:
            log.warning("store write failed, retrying with backoff while the spool holds the data: %s", exc)
        self.store_healthy = False
        self.last_error = str(exc)
        self.failures += 1
        if self._observer is not None:
            self._observer.store_failed(exc)
