"""Ground truth: what the simulator, the proxy and the clients' host actually did to streams, cause by cause.

Every record comes from an event that really happened (a preemption the scheduler performed, bytes the
proxy really held back, a time the clients' event loop did not run), never from what a scenario meant to
inject, so attribution can be scored by joining its verdicts with these rows. A record of a whole host
(``client_host``) has no trace id: it delayed every stream its process was reading at the time.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass, field
from typing import Protocol

from streamscope import semconv as sc

CAUSES = sc.STREAMSCOPE_TRUTH_CAUSE_VALUES
"""The stall causes (docs/architecture.md), plus chunking_regression (a change in tokens per chunk, not a stall)."""


@dataclass(frozen=True)
class GroundTruth:
    cause: str
    node: str
    """The engine node, or the proxy, that did it; for ``client_host``, the client process (its service name)."""
    start_ns: int
    """Wall-clock start of the window in which it delayed the stream (Unix ns)."""
    end_ns: int
    trace_id: str = ""
    """Hex trace id of the affected stream (from its traceparent); empty when the request carried none, and for
    a host-level record (every stream of the host was affected)."""
    request_id: str = ""
    """The engine's (or proxy's) id for the affected request."""
    chunk_indices: tuple[int, ...] = ()
    """Indices of the server-emitted SSE events it delayed (the engine's chunk numbering)."""
    magnitude: float = 0.0
    """How much: delay added in seconds, tokens per chunk after a chunking change, etc."""
    detail: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cause not in CAUSES:
            raise ValueError(f"unknown ground-truth cause {self.cause!r}; one of {', '.join(CAUSES)}")


FIRST_TOKEN = "first_token"
"""``detail.kind`` of a record of a first token's wait (a request queued for a slot, a prefill it waited for):
scoring matches it with slow starts."""


class GroundTruthSink(Protocol):
    def record(self, truth: GroundTruth) -> None: ...


class MemorySink:
    """Keeps records in memory (thread-safe); the load generator drains it into the store."""

    def __init__(self) -> None:
        self._records: list[GroundTruth] = []
        self._lock = threading.Lock()

    def record(self, truth: GroundTruth) -> None:
        with self._lock:
            self._records.append(truth)

    def drain(self) -> list[GroundTruth]:
        with self._lock:
            records, self._records = self._records, []
        return records

    def snapshot(self) -> list[GroundTruth]:
        with self._lock:
            return list(self._records)


_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def trace_id_of(traceparent: str | None) -> str:
    """The trace id of a W3C traceparent (a header, a gRPC call's metadata, a request's metadata), or "" when it is
    absent or malformed: the trace a record of what was done to a stream belongs to."""
    match = _TRACEPARENT.match((traceparent or "").strip().lower())
    if match is None or match[1] == "ff" or match[2] == "0" * 32 or match[3] == "0" * 16:
        return ""
    if match[1] == "00" and match[5]:
        return ""  # version 00 has exactly four fields
    return match[2]
