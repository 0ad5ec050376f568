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

    def rows(self, table: str) -> int:
        block = self.blocks.get(table)
        return block.num_rows if block is not None else 0

    @property
    def total_rows(self) -> int:
        return sum(block.num_rows for block in self.blocks.values())

    def rejection_message(self, noun: str) -> str:
        """One English sentence for ``partial_success.error_message``; empty when nothing was rejected."""
        if not self.rejected:
            return ""
        shown = "; ".join(str(r) for r in self.rejected[:_MAX_REASONS_REPORTED])
        more = len(self.rejected) - _MAX_REASONS_REPORTED
        suffix = f"; and {more} more" if more > 0 else ""
        return f"rejected {len(self.rejected)} {noun}(s): {shown}{suffix}"


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
    )
