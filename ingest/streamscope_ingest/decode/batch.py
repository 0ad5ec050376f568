"""What one export request contributes to the store: a block of rows per table, and what was left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streamscope_ingest.decode import columns

_MAX_REASONS_REPORTED = 5
CHUNK_ARRAYS = "chunk_arrays"
"""The table ingest writes chunks to: one row a stream, its chunks' values in arrays."""
CHUNKS = "chunks"
"""The view of ``chunk_arrays`` with one row a chunk."""


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
    """What was accepted only in part (strings truncated at the limits, timelines known in part): said to the
    sender, nothing refused."""
    incomplete: dict[str, int] = field(default_factory=dict)
    """Streams stored with less than a full timeline, by ``streams.coverage``."""

    def rows(self, table: str) -> int:
        """Rows of ``table`` in the batch; for ``chunks``, the chunks in ``chunk_arrays``' arrays."""
        return self.counts().get(table, 0)

    def counts(self) -> dict[str, int]:
        """Rows per table, and ``chunks``: the rows the ``chunks`` view will show for the batch's chunk arrays
        (one row a stream), which is what the request log and the collector's metrics count."""
        counts = {table: block.num_rows for table, block in self.blocks.items()}
        arrays = self.blocks.get(CHUNK_ARRAYS)
        if arrays is not None:
            counts[CHUNKS] = pc.sum(pc.list_value_length(arrays["gap_us"])).as_py() or 0
        return counts

    @property
    def total_rows(self) -> int:
        return sum(block.num_rows for block in self.blocks.values())

    @property
    def nbytes(self) -> int:
        """The memory its rows hold: every buffer they reference, whole (``Table.nbytes`` works out which part of
        each buffer is in use, walking every nested array: a large share of a request's decode)."""
        return sum(block.get_total_buffer_size() for block in self.blocks.values())

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
    """The first few distinct items, each with how many times it came (a thousand points refused for one reason
    is one line, and leaves room for the other reasons)."""
    counts = Counter(str(item) for item in items)
    shown = "; ".join(text if n == 1 else f"{text} (×{n})" for text, n in list(counts.items())[:_MAX_REASONS_REPORTED])
    more = len(counts) - _MAX_REASONS_REPORTED
    return shown + (f"; and {more} other reason{'s' if more > 1 else ''}" if more > 0 else "")


def concat(batches: Sequence[DecodedBatch]) -> DecodedBatch:
    """One batch holding the rows of ``batches``, for one insert per table.

    Each batch has its own dictionaries; an Arrow IPC stream allows one per column, so they are unified. A block
    an earlier version decoded (a batch left in the spool) gets the columns added since, as the store fills them.
    """
    tables: dict[str, list[pa.Table]] = {}
    for batch in batches:
        for table, block in batch.blocks.items():
            tables.setdefault(table, []).append(columns.completed(table, block))
    return DecodedBatch(
        blocks={table: pa.concat_tables(blocks).unify_dictionaries() for table, blocks in tables.items()},
        ignored=sum(b.ignored for b in batches),
        rejected=[r for b in batches for r in b.rejected],
        warnings=[w for b in batches for w in b.warnings],
        incomplete=dict(sum((Counter(b.incomplete) for b in batches), Counter())),
    )
