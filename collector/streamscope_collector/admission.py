"""Whether a request may go on: the collector's in-flight memory budget and each tenant's rate.

Both answer "not now" (Overloaded: HTTP 429 with Retry-After, gRPC UNAVAILABLE), before the collector
spends more memory or CPU on the request. The budget counts the bytes of request bodies being read and
inflated, and of their rows until spooled, so the collector's memory stays bounded however many senders push
at once; the rate keeps one tenant's burst from taking the budget from the others.

Between body and rows, a request is parsed and decoded, which holds many times its size while it lasts (each
element of a packed array becomes an object of its own). ``expansion`` lets one request at a time do so
(``DECODING_AT_ONCE``), counting ``EXPANSION`` times its inflated body (at most the whole budget) against a budget of
its own; the others wait their turn, in the order they came, holding only their body. Bodies and rows are bounded by
the in-flight budget, parsing by the same amount again, or by the one request that needs more, parsed alone.

A turn is also a thread: the gate runs the parsing and decoding on a thread of its own (``DECODE_THREAD``), one per
turn, rather than on whichever thread of the web or RPC framework took the request. The memory a decode frees is
then the memory the next one takes, still mapped: spread over the framework's threads, it was handed back to the
kernel by one thread's allocator and faulted in again on another's (docs/benchmarks.md, "Ingest throughput";
``benchmarks/ingest.py`` splits the collector's CPU by thread).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from streamscope.errors import ConfigError, Overloaded
from streamscope.threads import name_this_thread
from streamscope_collector.auth import Credentials
from streamscope_collector.memory import STORE_RESERVE, MemoryCeiling, memory_bound, resident_bytes

if TYPE_CHECKING:
    from streamscope_collector.config import CollectorConfig

T = TypeVar("T")

DECODE_THREAD = "otlp-decode"
"""What the threads that parse and decode requests are called in the operating system (``streamscope.threads``)."""
DECODING_AT_ONCE = 1
"""Requests parsed and decoded at a time. Decoding is Python, which runs on one thread at a time however many cores
there are: a second decode would not run beside the first, only take turns with it at the interpreter's switch
interval, each turn costing the other its caches (docs/benchmarks.md, "Ingest throughput")."""
MEMORY_POLL_S = 0.05
"""How often a request first in line for a turn looks again at the memory ceiling."""
EXPANSION = 24
"""The peak memory of parsing and decoding a request, per byte of its inflated body: stream spans with packed
chunk arrays take the most (docs/benchmarks.md, collector memory)."""


class InflightBudget:
    def __init__(self, max_bytes: int, memory: MemoryCeiling | None = None) -> None:
        self.max_bytes = max_bytes
        self.memory = memory or MemoryCeiling(None)
        self._used = 0
        self._lock = threading.Lock()

    @property
    def used(self) -> int:
        return self._used

    @contextmanager
    def reserve(self) -> Iterator[Reservation]:
        """A reservation that grows as the request's bytes arrive and is returned when the request ends."""
        reservation = Reservation(self)
        try:
            yield reservation
        finally:
            with self._lock:
                self._used -= reservation.held

    def _give_back(self, reservation: Reservation, size: int) -> None:
        with self._lock:
            self._used -= size
            reservation.held -= size

    def _take(self, reservation: Reservation, size: int, resident: bool) -> None:
        with self._lock:
            # a request alone may always use the whole budget: the size limits bound it
            if self._used + size > self.max_bytes and self._used > reservation.held:
                raise Overloaded(
                    f"collector busy: {self._used} bytes of requests in flight, budget {self.max_bytes} bytes"
                )
            if not resident and not self.memory.fits(size):  # alone or not: the ceiling is the process's
                raise Overloaded(self.memory.refusal())
            self._used += size
            reservation.held += size


class Reservation:
    def __init__(self, budget: InflightBudget) -> None:
        self._budget = budget
        self.held = 0

    def take(self, size: int, *, resident: bool = False) -> None:
        """Hold ``size`` more bytes; raises Overloaded past the budget, or past the memory ceiling unless the bytes
        are ``resident`` already and were counted against it (a decode's rows, within its turn)."""
        self._budget._take(self, size, resident)

    @contextmanager
    def held_for(self, size: int) -> Iterator[None]:
        """Hold ``size`` more bytes while the block runs: memory the request needs for a while, then frees."""
        self.take(size)
        try:
            yield
        finally:
            self._budget._give_back(self, size)


class ExpansionGate:
    """Memory and turns for parsing and decoding: requests take their share in the order they came, waiting
    holding only their body; one that needs more than all of it takes all of it.

    Each waiter waits on a condition of its own and only the first in line is woken when a turn frees, so a
    large request is not overtaken for ever by smaller ones, and a release wakes one thread, not every waiter.
    A turn also needs room under the memory ceiling, which nothing signals: the first in line looks again every
    ``MEMORY_POLL_S`` while that is all it waits for.
    """

    def __init__(
        self,
        max_bytes: int,
        slots: int = DECODING_AT_ONCE,
        wait_s: float = 30.0,
        memory: MemoryCeiling | None = None,
    ) -> None:
        self.max_bytes, self.slots, self.wait_s = max_bytes, slots, wait_s
        self.memory = memory or MemoryCeiling(None)
        self.used = 0
        self._active = 0
        self._lock = threading.Lock()
        self._line: deque[threading.Condition] = deque()
        self._threads = ThreadPoolExecutor(slots, DECODE_THREAD, name_this_thread, (DECODE_THREAD,))

    @property
    def waiting(self) -> int:
        return len(self._line)

    def close(self) -> None:
        """End the decoding threads, once no request can come (the servers stopped)."""
        self._threads.shutdown()

    def decode(self, inflated_bytes: int, work: Callable[[], T]) -> T:
        """``work()``, the parsing and decoding of a request of ``inflated_bytes``, run in its turn on one of the
        gate's threads; raises what ``work`` raises, or Overloaded after ``wait_s`` without a turn."""
        with self.parsing(inflated_bytes):
            return self._threads.submit(work).result()

    @contextmanager
    def parsing(self, inflated_bytes: int) -> Iterator[None]:
        """Hold a turn for a request of ``inflated_bytes`` while the block runs; raises Overloaded after
        ``wait_s`` without one."""
        need = min(EXPANSION * inflated_bytes, self.max_bytes)
        with self._lock:
            turn = threading.Condition(self._lock)
            self._line.append(turn)
            try:
                self._wait_turn(turn, need)
                self._count(need, 1)
            finally:
                self._line.remove(turn)
                self._wake_first()
        try:
            yield
        finally:
            with self._lock:
                self._count(-need, -1)
                self._wake_first()

    def _wait_turn(self, turn: threading.Condition, need: int) -> None:
        """Wait, holding the lock, until ``turn`` is first in line and ``need`` fits; raises Overloaded after
        ``wait_s``, saying whether memory or the requests being decoded kept it waiting."""
        deadline = time.monotonic() + self.wait_s
        while not (first := self._line[0] is turn) or not self._fits(need):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if first and self._active < self.slots and self.used + need <= self.max_bytes:
                    raise Overloaded(self.memory.refusal())
                raise Overloaded(f"collector busy: {self.used} bytes of requests being decoded")
            turn.wait(min(remaining, MEMORY_POLL_S) if first else remaining)

    def _count(self, need: int, turns: int) -> None:
        self.used += need
        self._active += turns
        self.memory.promise(need)

    def _fits(self, need: int) -> bool:
        return self._active < self.slots and self.used + need <= self.max_bytes and self.memory.fits(need)

    def _wake_first(self) -> None:
        if self._line:
            self._line[0].notify()


class TenantRate:
    """A token bucket of bytes per tenant: ``bytes_per_s`` sustained, ``burst_s`` seconds of it at once."""

    def __init__(self, bytes_per_s: float | None, burst_s: float = 2.0) -> None:
        self.bytes_per_s = bytes_per_s
        self._capacity = (bytes_per_s or 0) * burst_s
        self._buckets: dict[str, tuple[float, float]] = {}  # tenant → (tokens, at)
        self._lock = threading.Lock()

    def admit(self, tenant: str, size: int) -> None:
        """Charge ``size`` bytes to ``tenant``; raises Overloaded while its bucket is in debt.

        A request is admitted while the bucket holds anything and may take it below zero, so a request larger
        than the burst still passes once the bucket refills, and the debt slows what follows.
        """
        if self.bytes_per_s is None:
            return
        now = time.monotonic()
        with self._lock:
            tokens, at = self._buckets.get(tenant, (self._capacity, now))
            tokens = min(self._capacity, tokens + (now - at) * self.bytes_per_s)
            if tokens <= 0:
                self._buckets[tenant] = (tokens, now)
                raise Overloaded(f"tenant {tenant!r} is over its rate of {self.bytes_per_s:g} bytes/s")
            self._buckets[tenant] = (tokens - size, now)


@dataclass(frozen=True)
class Admission:
    """What every transport checks before it spends on a request: who sends it, memory, and the tenant's rate."""

    credentials: Credentials
    budget: InflightBudget
    rate: TenantRate
    expansion: ExpansionGate
    """Held while a request is parsed and decoded into rows."""

    @classmethod
    def from_config(cls, config: CollectorConfig) -> Admission:
        """Admission for ``config``; the memory ceiling, unless configured, is the RSS now (the collector started,
        its store open) and the bound of its settings."""
        ceiling, resident, budget_bytes = config.max_memory_bytes, resident_bytes(), config.max_inflight_bytes
        if ceiling is None and resident is not None:
            ceiling = resident + memory_bound(budget_bytes, budget_bytes, bool(config.attribution_interval_s))
        elif ceiling is not None and resident is not None and ceiling < resident + STORE_RESERVE + budget_bytes:
            raise ConfigError(
                f"the memory ceiling ({ceiling >> 20} MiB) leaves no room for requests: the collector holds "
                f"{resident >> 20} MiB once started, keeps {STORE_RESERVE >> 20} MiB for the store's inserts, and "
                f"requests take up to the in-flight budget ({budget_bytes >> 20} MiB); raise --max-memory-mib to at "
                f"least {(resident + STORE_RESERVE + budget_bytes) >> 20}"
            )
        memory = MemoryCeiling(ceiling)
        budget, rate = InflightBudget(config.max_inflight_bytes, memory), TenantRate(config.tenant_bytes_per_s)
        return cls(config.credentials(), budget, rate, ExpansionGate(config.max_inflight_bytes, memory=memory))
