"""Whether a request may go on: the collector's in-flight memory budget and each tenant's rate.

Both answer "not now" (Overloaded: HTTP 429 with Retry-After, gRPC UNAVAILABLE), before the collector
spends more memory or CPU on the request. The budget counts the bytes of request bodies being read and
inflated, and of their rows until spooled, so the collector's memory stays bounded however many senders push
at once; the rate keeps one tenant's burst from taking the budget from the others.

Between body and rows, a request is parsed: about ten times the body's size for packed stream spans (each
array element becomes a message of its own), too fleeting to count but not to multiply. ``expansion`` lets
as many requests be parsed and decoded at once as there are cores (the work holds the interpreter's lock, so
more would add memory, not speed); the others wait their turn holding only their body.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streamscope.errors import Overloaded
from streamscope_collector.auth import Credentials

if TYPE_CHECKING:
    from streamscope_collector.config import CollectorConfig

_CORES = os.cpu_count() or 1


class InflightBudget:
    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
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

    def _take(self, reservation: Reservation, size: int) -> None:
        with self._lock:
            # a request alone may always use the whole budget: the size limits bound it
            if self._used + size > self.max_bytes and self._used > reservation.held:
                raise Overloaded(
                    f"collector busy: {self._used} bytes of requests in flight, budget {self.max_bytes} bytes"
                )
            self._used += size
            reservation.held += size


class Reservation:
    def __init__(self, budget: InflightBudget) -> None:
        self._budget = budget
        self.held = 0

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes; raises Overloaded past the budget."""
        self._budget._take(self, size)


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
    expansion: threading.BoundedSemaphore = field(default_factory=lambda: threading.BoundedSemaphore(_CORES))
    """Held while a request is parsed and decoded into rows."""

    @classmethod
    def from_config(cls, config: CollectorConfig) -> Admission:
        return cls(
            config.credentials(), InflightBudget(config.max_inflight_bytes), TenantRate(config.tenant_bytes_per_s)
        )
