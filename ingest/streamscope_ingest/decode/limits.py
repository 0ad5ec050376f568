"""How much one export request may ask of the collector, so a hostile or broken sender costs it a bounded amount.

A request with more spans than allowed is refused whole (HTTP 413, gRPC RESOURCE_EXHAUSTED): the sender should
send smaller batches. A span with too many attributes or chunks is rejected alone, with its reason, through
partial_success; so is a span that starts too many days away from the request's others (each day is a partition of
the tables, one insert may touch 100 at most, and a store that refuses an insert holds up what is spooled after
it). A string longer than allowed is stored cut to the limit and the sender is warned (partial_success with
nothing rejected). Byte sizes, before and after decompression, are the transports' limits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from streamscope.errors import LimitExceeded

_DAY_US = 86_400_000_000
LATEST_OFFSET_US = 7 * _DAY_US
"""The latest a stream's chunk, or any moment it marks, may come after its span's start: a week. A later one is a
broken clock, not a stream; below it every figure derived from an offset (a float64 of µs, a timestamp) is exact."""
LATEST_START_NS = 10_413_791_999_999_999_999 - LATEST_OFFSET_US * 1000
"""The latest a stream span may start: a week before the end of 2299, the last moment ClickHouse's DateTime64 holds,
so that its chunks' times are held too."""


class SpanOverLimit(Exception):
    """One span is past a limit: it is rejected, the request's other spans are kept."""


@dataclass(frozen=True)
class SpanLimits:
    max_spans_per_request: int = 100_000
    max_chunks_per_span: int = 262_144
    """A 128k-token answer streamed one token at a time, twice over."""
    max_attributes_per_span: int = 512
    max_string_length: int = 65_536
    """Characters kept of any string stored (attribute values, names, ids)."""
    max_days_per_request: int = 7
    """Consecutive days the stream spans of one request may start on; spans outside are rejected."""

    def check_span_count(self, spans: int) -> None:
        if spans > self.max_spans_per_request:
            raise LimitExceeded(
                f"request carries {spans} spans, more than the limit of {self.max_spans_per_request}: "
                "send smaller batches"
            )

    def check_span(self, attributes: int, events: int) -> None:
        if attributes > self.max_attributes_per_span:
            raise SpanOverLimit(f"{attributes} attributes, more than the limit of {self.max_attributes_per_span}")
        if events > self.max_chunks_per_span:
            raise SpanOverLimit(f"{events} events, more than the limit of {self.max_chunks_per_span} chunks")

    def check_chunks(self, chunks: int) -> None:
        if chunks > self.max_chunks_per_span:
            raise SpanOverLimit(f"{chunks} chunks, more than the limit of {self.max_chunks_per_span}")

    def days_kept(self, times_us: Sequence[int]) -> list[bool]:
        """Which items to keep, by the day each falls on (``times_us``: its start, µs since the epoch): those of the
        ``max_days_per_request`` consecutive days holding the most of them (the latest such days, on a tie), so a
        few stray items cannot reject the rest."""
        days = [time_us // _DAY_US for time_us in times_us]
        if not days or max(days) - min(days) < self.max_days_per_request:
            return [True] * len(days)
        counts = Counter(days)
        first = max(counts, key=lambda start: (sum(counts[start + d] for d in range(self.max_days_per_request)), start))
        return [first <= day < first + self.max_days_per_request for day in days]

    def days_message(self) -> str:
        """Why a span outside the kept days is rejected."""
        days = self.max_days_per_request
        return f"starts more than {days} days from the request's other spans; a request may span {days} days"

    def truncate(self, subject: str, *mappings: dict[str, Any]) -> str | None:
        """Cut every string value of ``mappings`` (in place) to the limit; returns the warning, if any was cut."""
        cut = []
        for strings in mappings:
            long = [k for k, v in strings.items() if isinstance(v, str) and len(v) > self.max_string_length]
            for key in long:
                strings[key] = strings[key][: self.max_string_length]
            cut += long
        return f"{subject}: {', '.join(cut)} cut to {self.max_string_length} characters" if cut else None


DEFAULT_LIMITS = SpanLimits()
