"""What one export request contributes to the store: a block of rows per table, and what was left out."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

_MAX_REASONS_REPORTED = 5


@dataclass(frozen=True)
class Rejection:
    subject: str
    """What was rejected, e.g. "span 1a2b… of trace 9f8e…" or "log record 3"."""
    reason: str

    def __str__(self) -> str:
        return f"{self.subject}: {self.reason}"


@dataclass
class DecodedBatch:
    blocks: dict[str, pa.Table] = field(default_factory=dict)
    """Rows per table (the writer orders the tables)."""
    ignored: int = 0
    """Items that were valid but not for us (spans that are not streams, logs of other events)."""
    rejected: list[Rejection] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    """What was accepted only in part (strings truncated at the limits): said to the sender, nothing refused."""

    def rows(self, table: str) -> int:
        block = self.blocks.get(table)
        return block.num_rows if block is not None else 0

    @property
    def total_rows(self) -> int:
        return sum(block.num_rows for block in self.blocks.values())

    @property
    def nbytes(self) -> int:
        """The memory its rows take."""
        return sum(block.nbytes for block in self.blocks.values())

    def rejection_message(self, noun: str) -> str:
        """One English sentence for ``partial_success.error_message``: what was rejected, then the warnings
        (the OTLP specification's way to warn with nothing rejected); empty when there is neither."""
        parts = []
        if self.rejected:
            parts.append(f"rejected {len(self.rejected)} {noun}(s): {_some(self.rejected)}")
        if self.warnings:
            parts.append(f"accepted with warnings: {_some(self.warnings)}")
        return "; ".join(parts)


def _some(items: Sequence[object]) -> str:
    shown = "; ".join(str(item) for item in items[:_MAX_REASONS_REPORTED])
    more = len(items) - _MAX_REASONS_REPORTED
    return shown + (f"; and {more} more" if more > 0 else "")


def concat(batches: Sequence[DecodedBatch]) -> DecodedBatch:
    """One batch holding the rows of ``batches``, for one insert per table.

    Each batch has its own dictionaries; an Arrow IPC stream allows one per column, so they are unified.
    """
    tables: dict[str, list[pa.Table]] = {}
    for batch in batches:
        for table, block in batch.blocks.items():
            tables.setdefault(table, []).append(block)
    return DecodedBatch(
        blocks={table: pa.concat_tables(blocks).unify_dictionaries() for table, blocks in tables.items()},
        ignored=sum(b.ignored for b in batches),
        rejected=[r for b in batches for r in b.rejected],
        warnings=[w for b in batches for w in b.warnings],
    )
