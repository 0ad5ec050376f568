"""The collector's resident memory against its ceiling: what admission checks beside its budgets.

The budgets count what requests hold, but the process holds more: the embedded engine's inserts, merges and caches,
the writer's insert, the attribution job's pass, and what the allocators keep of the memory each thread freed, to
hand it to the same thread again. None of it is a request's, all of it is resident. So a request may take more
bytes, and a decode or an attribution pass a turn, only while the process's resident memory (RSS), the memory
promised to the turns under way, the store's reserve and its own share stay under the ceiling. The store's
inserts and merges never wait: their reserve is kept free for them. docs/operations.md ("Pressure and limits")
has the bound this keeps.
"""

from __future__ import annotations

import ctypes
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.durability.group_commit import GroupCommitConfig

log = logging.getLogger(__name__)

STORE_WORKING_SET = 8 * GroupCommitConfig.max_insert_bytes
"""The store's share of the collector's memory: the writer's largest insert (``max_insert_bytes`` of spool segments,
read back, concatenated and counted), the embedded engine's insert of it and the merges after, and what the engine
keeps between inserts: measured at about seven times the insert (docs/operations.md, "Pressure and limits")."""
STORE_RESERVE = STORE_WORKING_SET // 2
"""The part of ``STORE_WORKING_SET`` that an insert and its merges may take at any moment: kept free. The rest, what
the engine keeps between inserts, is in the RSS the ceiling is checked against."""
ATTRIBUTION_PASS = 256 * 1024 * 1024
"""The memory an attribution pass may take: its streams are as many as fit at ``ATTRIBUTION_BYTES_PER_CHUNK``."""
ATTRIBUTION_BYTES_PER_CHUNK = 160
"""What an attribution pass takes per chunk it reads: the engine's query, the Arrow timelines, the arrays judged
(a pass of 5,000 streams of 700 chunks took 565 MiB)."""
ATTRIBUTION_WAIT_S = 5.0
"""How long an attribution pass put off ``ATTRIBUTION_PUT_OFF`` times in a row waits for room, new requests refused
meanwhile (so that they cannot keep taking it), before it is put off again."""
ATTRIBUTION_PUT_OFF = 3
"""Passes put off in a row (for want of room at once) before the next waits for room."""
POLL_S = 0.05
"""How often a turn waiting for room looks again: nothing signals memory given back."""
TRIM_EVERY_S = 1.0
"""How often, at most, the allocator is told to hand back the memory it keeps while requests are refused."""


def memory_bound(max_inflight_bytes: int, decoding_bytes: int, attribution: bool = True) -> int:
    """How much the collector's RSS may grow over what it holds once started: the bodies and rows in flight, the
    decoding of requests (``decoding_bytes``: the gate's budget, or ``EXPANSION`` times the largest request when
    that is more), the store's working set and, while the job runs here, an attribution pass."""
    return max_inflight_bytes + decoding_bytes + STORE_WORKING_SET + (ATTRIBUTION_PASS if attribution else 0)


def resident_bytes() -> int | None:
    """The process's resident memory (VmRSS), from /proc; None where there is no /proc."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


class MemoryCeiling:
    """The RSS the collector keeps under (``max_bytes``; None: no ceiling), ``reserve`` of it kept for the store.

    ``promised`` is what the turns under way (decodes, an attribution pass) may still take: not resident yet when
    the turn is given.
    """

    def __init__(
        self, max_bytes: int | None, reserve: int = STORE_RESERVE, resident: Callable[[], int | None] = resident_bytes
    ) -> None:
        self.max_bytes, self.reserve = max_bytes, reserve
        self.promised = 0
        self._resident = resident
        self._lock = threading.Lock()
        self._trimmed_at = -TRIM_EVERY_S

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes keep the RSS, with what is promised and the reserve, under the ceiling; when
        they do not, the allocator is first told to give back what it keeps, and asked again."""
        if self.max_bytes is None or size <= self._room():
            return True
        return self._trim() and size <= self._room()

    def promise(self, size: int) -> None:
        """Count ``size`` (negative: give it back) as taken by a turn under way."""
        with self._lock:
            self.promised += size

    @contextmanager
    def turn(self, size: int, wait_s: float) -> Iterator[bool]:
        """``size`` promised at once, so that nothing else takes the room it waits for; yields True once it fits
        (kept while the block runs), or False after ``wait_s`` without room (the promise given back)."""
        self.promise(size)
        try:
            deadline = time.monotonic() + wait_s
            while not (room := self.fits(0)) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            yield room
        finally:
            self.promise(-size)

    def refusal(self) -> str:
        """Why a request is refused for memory, in the words of the other refusals."""
        resident = self._resident() or 0
        return (
            f"collector busy: resident memory {resident >> 20} MiB, ceiling {(self.max_bytes or 0) >> 20} MiB "
            f"with {self.reserve >> 20} MiB kept for the store"
        )

    def _room(self) -> int:
        resident = self._resident()
        if resident is None or self.max_bytes is None:
            return 1 << 62
        return self.max_bytes - self.reserve - self.promised - resident

    def _trim(self) -> bool:
        """Have glibc's allocator hand back the free memory it keeps, at most every ``TRIM_EVERY_S``; whether it
        did. Kept memory spares a thread's next request the page faults, but past the ceiling it refuses requests."""
        now = time.monotonic()
        with self._lock:
            if now - self._trimmed_at < TRIM_EVERY_S or _malloc_trim is None:
                return False
            self._trimmed_at = now
        _malloc_trim(0)
        return True


class AttributionInRoom(AttributionJob):
    """The attribution job, each pass taken as a turn under the memory ceiling: a pass runs when there is room for
    ``ATTRIBUTION_PASS``, and is put off to the next tick when there is none (the streams it would have read wait in
    the store); after ``ATTRIBUTION_PUT_OFF`` in a row, the next waits for room, new requests refused meanwhile.

    A pass reads as many streams as fit in ``ATTRIBUTION_PASS`` at the mean length of the streams accepted so far
    (``chunks_per_stream``; None before the first, when it reads as many as the job does): long streams make
    shorter passes.
    """

    def __init__(
        self, memory: MemoryCeiling, chunks_per_stream: Callable[[], float | None], *args: Any, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._memory, self._chunks_per_stream = memory, chunks_per_stream
        self._most_streams = self.pass_streams
        self._put_off = 0

    def run_pass(self, until: datetime | None = None) -> tuple[int, bool]:
        chunks = self._chunks_per_stream()
        fitting = ATTRIBUTION_PASS // (ATTRIBUTION_BYTES_PER_CHUNK * max(chunks, 1.0)) if chunks else self._most_streams
        self.pass_streams = max(1, min(self._most_streams, int(fitting)))
        wait_s = ATTRIBUTION_WAIT_S if self._put_off >= ATTRIBUTION_PUT_OFF else 0.0
        with self._memory.turn(ATTRIBUTION_PASS, wait_s) as room:
            if room:
                self._put_off = 0
                return super().run_pass(until)
        self._put_off += 1
        log.info("attribution put off: no room for a pass under the memory ceiling (%s)", self._memory.refusal())
        return 0, True


def _libc_malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None
    return trim


_malloc_trim = _libc_malloc_trim()
