"""What one export request contributes to the store: a block of rows per table, and what was left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from streamscope_ingest.blocks import columns

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
    ignored: Counter[str] = field(default_factory=Counter)
    """Items that were valid but not for us, by kind (``ignored_kind``): spans that are not streams, by their
    instrumentation scope; log records of other events; metrics of other names or types. Counted, and named to the
    sender, so data that is never stored is never missing in silence."""
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
        if self.ignored:
            parts.append(f"not read (not stream data): {_kinds(self.ignored)}")
        return "; ".join(parts)

    @property
    def ignored_count(self) -> int:
        return sum(self.ignored.values())


HEX_KEY = ("tenant", "trace_id", "span_id")
BYTES_KEY = ("tenant", "trace_id_bytes", "span_id_bytes")
"""How a table keys its rows by span: its tenant, and the ids in hex or (chunk_arrays) in bytes."""


def span_key_columns(block: pa.Table) -> tuple[str, str, str] | None:
    """The columns that key ``block``'s rows by span, or None for a table whose rows are not a span's."""
    return next((key for key in (HEX_KEY, BYTES_KEY) if all(c in block.column_names for c in key)), None)


def span_keys(block: pa.Table, key: tuple[str, str, str] = HEX_KEY) -> pa.ChunkedArray:
    """Each row's span key (``columns.span_keys``): text for ids in hex, bytes for ids in bytes."""
    tenants, trace_ids, span_ids = (block.column(c) for c in key)
    return columns.span_keys(tenants, trace_ids, span_ids, pa.binary() if key == BYTES_KEY else pa.string())


def with_spans(batch: DecodedBatch, keys: Sequence[str], *, keep: bool) -> DecodedBatch:
    """``batch`` with only (``keep``) or without the rows of the spans ``keys`` names (hex keys, as ``span_keys``
    gives them), in every table that keys its rows by span; a table that does not is left whole, or out when
    keeping only those spans."""
    key_sets = {HEX_KEY: pa.array(keys, pa.string()), BYTES_KEY: pa.array(map(_as_bytes_key, keys), pa.binary())}
    blocks = {}
    for table, block in batch.blocks.items():
        key = span_key_columns(block)
        if key is not None:
            chosen = pc.is_in(span_keys(block, key), value_set=key_sets[key])
            blocks[table] = block.filter(chosen if keep else pc.invert(chosen))
        elif not keep:
            blocks[table] = block
    return DecodedBatch(blocks=blocks, ignored=batch.ignored, rejected=batch.rejected)


def _as_bytes_key(hex_key: str) -> bytes:
    tenant, ids = hex_key.rsplit("/", 1)
    return tenant.encode() + b"/" + bytes.fromhex(ids)


def halves(batch: DecodedBatch) -> tuple[DecodedBatch, DecodedBatch] | None:
    """``batch`` cut in two, each with about half its spans (a span's rows in every table stay together), or with
    the rows that are no span's apart from the spans', or half of those; None when it holds one span or one row,
    which cannot be cut. How a batch the store refuses is narrowed down to the rows it refuses."""
    keyed = {t: b for t, b in batch.blocks.items() if b.num_rows and span_key_columns(b) is not None}
    other = {t: b for t, b in batch.blocks.items() if b.num_rows and t not in keyed}
    spans = list(dict.fromkeys(k for block in keyed.values() for k in _hex_keys(block)))
    if spans and other:
        return DecodedBatch(blocks=keyed), DecodedBatch(blocks=other)
    if len(spans) > 1:
        first = spans[: len(spans) // 2]
        return with_spans(batch, first, keep=True), with_spans(batch, first, keep=False)
    if len(other) > 1:
        tables = list(other)
        return (
            DecodedBatch(blocks={t: other[t] for t in tables[: len(tables) // 2]}),
            DecodedBatch(blocks={t: other[t] for t in tables[len(tables) // 2 :]}),
        )
    for table, block in other.items():  # one table at most, here
        if block.num_rows > 1:
            middle = block.num_rows // 2
            first, second = block.slice(0, middle), block.slice(middle)
            return DecodedBatch(blocks={table: first}), DecodedBatch(blocks={table: second})
    return None


def _hex_keys(block: pa.Table) -> list[str]:
    key = span_key_columns(block)
    if key == HEX_KEY:
        return span_keys(block).to_pylist()
    tenants, trace_ids, span_ids = (block.column(c).to_pylist() for c in BYTES_KEY)
    return [f"{t}/{trace.hex()}{span.hex()}" for t, trace, span in zip(tenants, trace_ids, span_ids, strict=True)]


KIND_NAME_LIMIT = 80
"""A kind's name (a scope, an event, a metric: the sender's words) is cut at this many characters."""


def ignored_kind(what: str, name: str) -> str:
    """How an ignored kind is named to the sender: ``what`` (``span(s) of scope``) and the sender's ``name``."""
    shown = name if len(name) <= KIND_NAME_LIMIT else name[:KIND_NAME_LIMIT] + "…"
    return f"{what} {shown!r}" if name else f"{what} (none)"


def _kinds(ignored: Counter[str]) -> str:
    """The most common ignored kinds, each with its count."""
    common = ignored.most_common(_MAX_REASONS_REPORTED)
    shown = "; ".join(f"{n} {kind}" for kind, n in common)
    more = len(ignored) - len(common)
    return shown + (f"; and {more} other kind{'s' if more > 1 else ''}" if more > 0 else "")


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
        ignored=sum((b.ignored for b in batches), Counter()),
        rejected=[r for b in batches for r in b.rejected],
        warnings=[w for b in batches for w in b.warnings],
        incomplete=dict(sum((Counter(b.incomplete) for b in batches), Counter())),
    )
