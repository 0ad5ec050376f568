"""How much one export request may ask of the collector, so a hostile or broken sender costs it a bounded amount.

A request with more spans than allowed is refused whole (HTTP 413, gRPC RESOURCE_EXHAUSTED): the sender should
send smaller batches. A span with too many attributes or chunks is rejected alone, with its reason, through
partial_success. A string longer than allowed is stored cut to the limit and the sender is warned
(partial_success with nothing rejected). Byte sizes, before and after decompression, are the transports' limits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from streamscope.errors import LimitExceeded


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
