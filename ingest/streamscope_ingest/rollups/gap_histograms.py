"""The ``gap_histograms`` rows of a ``chunk_arrays`` block: its content gaps counted per interval of the stream's
start, labels, ITL heatmap row and log bucket (migration 0030 documents the table, and its copy of rows stored
before it counts the same way in SQL; a test holds the two together).

The writer counts each block as it inserts it, after the repeated spans are left out, under the block's own
insert deduplication token, so a replayed insert is not counted twice.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa

from streamscope_ingest.blocks import columns

STEPS_S = (5, 60, 300, 3600)
"""The interval lengths every gap is counted at (the panels read the longest their interval is a multiple of)."""
ITL_BOUNDS_MS = (10, 25, 50, 100, 200, 400, 800, 1600, 3200)
"""The ITL heatmap's row bounds (``streamscope_dashboards.panels.quality.ITL_BUCKETS_MS``, which a test compares)."""
OVERFLOW_MS = 65535
"""``itl_upper_ms`` of a gap above every bound; 0 is a gap of 0 (no heatmap row)."""
BUCKET_RATIO = 1.01
"""``gap_bucket`` k >= 1 holds the gaps in [ratio^(k-1), ratio^k) µs."""
LABELS = ("tenant", "side", "service", "provider", "model")
SLICE_CHUNKS = 1 << 16
"""Chunks counted at once (whole streams: a longer stream is a slice of its own)."""

_UPPER_MS = np.array([0, *ITL_BOUNDS_MS, OVERFLOW_MS], dtype=np.uint16)
_BOUNDS_US = np.array(ITL_BOUNDS_MS, dtype=np.uint32) * 1000
_BUCKET_BITS, _CELL_BITS = 12, 16  # gap_bucket < 2^12 (a UInt32 gap is bucket 2231 at most), 11 heatmap rows


def gap_histograms(chunk_arrays: pa.Table) -> pa.Table:
    """The rows counting ``chunk_arrays``' content gaps, one per step, interval, labels, heatmap row and bucket."""
    if not chunk_arrays.num_rows:
        return columns.GAP_HISTOGRAMS.empty_table()
    gap_lists = chunk_arrays["gap_us"].combine_chunks()
    offsets = gap_lists.offsets.to_numpy()
    kinds = chunk_arrays["kind"].combine_chunks().values.to_numpy()
    gaps = gap_lists.values.to_numpy()
    labels, group_of_stream = label_groups(chunk_arrays.select(list(LABELS)))
    finest = chunk_arrays["start_time"].combine_chunks().cast(pa.int64()).to_numpy() // (STEPS_S[0] * 1_000_000)
    lowest, span = int(finest.min()), int(finest.max() - finest.min()) + 1
    of_stream = (group_of_stream << _CELL_BITS) * span + (finest - lowest)
    # Counted by cell and interval at the shortest step, a slice of streams at a time: each slice's arrays are small
    # enough to be reused from one to the next, where arrays of the whole insert would be fresh memory for the kernel
    # to zero each time. Each slice's counts are hash aggregated (sorting every gap costs several times more), then
    # the slices' counts together.
    slices = [
        counted
        for first, last in _stream_slices(offsets)
        if (counted := _counted_slice(of_stream[first:last], offsets[first : last + 1], kinds, gaps, span)).num_rows
    ]
    if not slices:
        return columns.GAP_HISTOGRAMS.empty_table()
    grouped = (
        pa.concat_tables(slices)
        .group_by("key", use_threads=False)
        .aggregate([("gap_count", "sum"), ("gap_max", "max")])
    )
    # Its few rows are sorted by (cell, interval); a longer step's intervals keep that order, so each step merges
    # neighbouring rows only.
    keys = grouped["key"].to_numpy()
    order = np.argsort(keys)
    cells, starts, counted, longest = (
        keys[order] // span,
        (keys[order] % span + lowest) * STEPS_S[0],
        grouped["gap_count_sum"].to_numpy()[order].astype(np.uint64),
        grouped["gap_max_max"].to_numpy()[order],
    )
    blocks = []
    for step in STEPS_S:
        cells, starts, counted, longest = _merged(cells, starts // step * step, counted, longest)
        blocks.append(_block(step, labels, cells, starts, counted, longest))
    return pa.concat_tables(blocks)


def _stream_slices(offsets: np.ndarray) -> list[tuple[int, int]]:
    """Ranges [first, last) of streams holding about ``SLICE_CHUNKS`` chunks each, given the streams' ``offsets``."""
    firsts = np.unique(np.searchsorted(offsets, np.arange(offsets[0], offsets[-1], SLICE_CHUNKS), side="right") - 1)
    bounds = [*firsts.tolist(), offsets.size - 1]
    return list(itertools.pairwise(bounds))


def _counted_slice(
    of_stream: np.ndarray, offsets: np.ndarray, kinds: np.ndarray, gaps: np.ndarray, span: int
) -> pa.Table:
    """The content gaps of one slice of streams counted by key (the stream's labels and interval, the gap's cell)."""
    lengths = np.diff(offsets)
    content = kinds[offsets[0] : offsets[-1]] == columns.KIND_CONTENT
    kept = gaps[offsets[0] : offsets[-1]][content]
    keyed = pa.table({"key": np.repeat(of_stream, lengths)[content] + _cells(kept) * span, "gap": kept})
    return keyed.group_by("key", use_threads=False).aggregate([("gap", "count"), ("gap", "max")])


def _cells(gaps: np.ndarray) -> np.ndarray:
    """Each gap's heatmap row and log bucket, as ``row << _BUCKET_BITS | bucket``."""
    # the row: 0 for a gap of 0, else 1 + the bounds below it (a comparison per bound costs a tenth of a binary
    # search per gap)
    positive = gaps > 0
    row = positive.astype(np.uint8)
    for bound in _BOUNDS_US:
        row += gaps > bound
    # the bucket: computed for every gap, a gap of 0 as if it were 1, then zeroed (gathering the positive gaps
    # first costs more than the logarithms it saves)
    logs = np.log(np.maximum(gaps, 1))
    logs /= np.log(BUCKET_RATIO)
    bucket = logs.astype(np.int64) + 1  # the floor: a cast cuts toward zero, and these logarithms are 0 or more
    bucket *= positive
    return (row.astype(np.int64) << _BUCKET_BITS) | bucket


def _merged(
    cells: np.ndarray, starts: np.ndarray, counted: np.ndarray, longest: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Neighbouring rows of one cell and interval as one: their counts added, the longest gap kept."""
    first = np.ones(cells.size, dtype=bool)
    first[1:] = (cells[1:] != cells[:-1]) | (starts[1:] != starts[:-1])
    at = np.flatnonzero(first)
    return cells[at], starts[at], np.add.reduceat(counted, at), np.maximum.reduceat(longest, at)


def label_groups(labels: pa.Table) -> tuple[pa.Table, np.ndarray]:
    """The distinct rows of ``labels`` (compared by their dictionary codes), and each row's index among them."""
    codes = []
    for name in labels.column_names:
        column = labels[name].combine_chunks()
        encoded = column if pa.types.is_dictionary(column.type) else column.dictionary_encode()
        codes.append(encoded.indices.to_numpy(zero_copy_only=False))
    _, first, group_of_stream = np.unique(np.stack(codes, axis=1), axis=0, return_index=True, return_inverse=True)
    return labels.take(pa.array(first)), group_of_stream.ravel().astype(np.int64)


def _block(
    step: int, labels: pa.Table, cells: np.ndarray, starts: np.ndarray, counted: np.ndarray, longest: np.ndarray
) -> pa.Table:
    by_labels = labels.take(pa.array(cells >> _CELL_BITS))
    cell = cells & ((1 << _CELL_BITS) - 1)
    values = {
        "step": pa.array(np.full(cells.size, step, dtype=np.uint16)),
        **{name: by_labels[name].combine_chunks() for name in ("tenant", "side")},
        "interval_start": pa.array(starts, pa.timestamp("s", tz="UTC")),
        **{name: by_labels[name].combine_chunks() for name in ("service", "provider", "model")},
        "itl_upper_ms": pa.array(_UPPER_MS[cell >> _BUCKET_BITS]),
        "gap_bucket": pa.array((cell & ((1 << _BUCKET_BITS) - 1)).astype(np.uint16)),
        "gaps": pa.array(counted),
        "gap_max_us": pa.array(longest),
    }
    return pa.Table.from_arrays(list(values.values()), schema=columns.GAP_HISTOGRAMS)
