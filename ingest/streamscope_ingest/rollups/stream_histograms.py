"""Per-stream figures counted per interval of the stream's start and labels, so the fleet panels that take their
medians and shares read a number of rows that grows with the range, not with the streams stored (migration 0032):
``stream_histograms`` counts each ``streams`` block the writer inserts, ``smoothing_histograms`` each block of
``stream_smoothing`` rows the attribution job writes. A row counts the streams whose figure fell in one bucket:

- durations and rates: ``gap_histograms``' log buckets (k holds [1.01^(k-1), 1.01^k)), ``ZERO`` for 0, so a
  median read as the bucket's geometric middle is within 0.5 % of quantileExact's;
- counts (stalls; a tool call, 0 or 1): the count itself, so shares and sums are exact;
- quality indices (0 to 1): steps of 1/``INDEX_STEPS``, read as the step's middle.

A NULL figure (no content yet, no tool call) is not counted, as quantileExact leaves NULLs out. ``stream_totals``
(migration 0033) adds up each streams block instead: its streams, their sums and flags, and their content chunks
by tokens, so sums, shares and the tokens-per-chunk median are exact. The migrations' copies of rows stored before
them count the same way in SQL (a test holds the two together).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.stalls import DEFAULT_THRESHOLD_US
from streamscope_ingest.rollups.gap_histograms import BUCKET_RATIO, STEPS_S, label_groups

ZERO = -32768
"""The bucket of a duration or rate of 0 (bucket 0 holds [1/1.01, 1))."""
INDEX_STEPS = 10_000
"""A quality index's bucket k holds [k, k + 1) / INDEX_STEPS."""
_MOST = 32767
_BUCKET_BITS = 16
_BUCKET_MASK = (1 << _BUCKET_BITS) - 1

STREAM_LABELS = ("tenant", "side", "service", "provider", "model")
SIZED = ("full", "partial")
"""The coverages of streams whose chunks' sizes are known (``streams.coverage``)."""
TIMED = ("full", "arrivals")
"""The coverages of streams whose every chunk's arrival is known."""
SLO_US = DEFAULT_THRESHOLD_US
"""The ITL SLO the dashboards and alert rules read (``streamscope_dashboards.panels.common.SLO_US``): ``over_slo``
counts the streams with a content gap over it (migration 0033 writes it as a number; a test compares)."""
SMOOTHING_LABELS = ("tenant", "side", "service", "model", "depth_ms")


def log_buckets(values: np.ndarray) -> np.ndarray:
    """The log bucket of each value (≥ 0; NaN gives an arbitrary bucket the caller masks)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        buckets = np.floor(np.log(values) / np.log(BUCKET_RATIO)) + 1
    return np.where(values == 0, ZERO, np.clip(np.nan_to_num(buckets), -_MOST, _MOST)).astype(np.int16)


def count_buckets(values: np.ndarray) -> np.ndarray:
    return np.minimum(np.nan_to_num(values), _MOST).astype(np.int16)


def index_buckets(values: np.ndarray) -> np.ndarray:
    """Each index's step; ``values`` as stored (Float32), widened before scaling as ClickHouse does."""
    scaled = np.floor(np.asarray(values, dtype=np.float32).astype(np.float64) * INDEX_STEPS)
    return np.clip(np.nan_to_num(scaled), -_MOST, _MOST).astype(np.int16)


def stream_histograms(streams: pa.Table) -> pa.Table:
    """The ``stream_histograms`` rows of a ``streams`` block: each stream's figures of ``stream_metrics`` (migrations
    0032 and 0033 list them)."""
    ttft, last, tokens = (_floats(streams[name]) for name in ("ttft_us", "last_content_us", "tokens"))
    has_content = last > ttft  # False where either is NULL (NaN)
    content_s = np.where(has_content, last - ttft, 1.0) / 1e6
    bursting, burst_ratio = _head_burst(streams)
    coverage = _strings(streams["coverage"]).to_numpy(zero_copy_only=False)
    sized, timed = np.isin(coverage, SIZED), np.isin(coverage, TIMED)
    lead = _floats(streams["ttft_us"]) - _floats(streams["ttfb_us"])
    p99 = _floats(streams["gap_p99_us"])
    figures = {
        "stall_count": _figure(streams["stall_count"], count_buckets),
        "tool_call": pa.array(streams["first_tool_call_seq"].is_valid().to_numpy(zero_copy_only=False), pa.int16()),
        "tokens_per_s": pa.array(log_buckets(tokens / content_s), mask=~has_content),
        "ttft_us": _figure(streams["ttft_us"], log_buckets),
        "gap_p99_us": pa.array(log_buckets(p99), mask=np.isnan(p99) | ~timed),
        "first_byte_lead_us": pa.array(log_buckets(np.maximum(lead, 0)), mask=np.isnan(lead)),
        "head_burst_ratio": pa.array(log_buckets(burst_ratio), mask=~bursting),
        "chunks_per_s": pa.array(
            log_buckets(_floats(streams["content_chunks"]) / content_s), mask=~(has_content & sized)
        ),
    }
    if "tool_call_pause_us" in streams.column_names:  # absent from blocks decoded before it was kept
        figures["tool_call_pause_us"] = _figure(streams["tool_call_pause_us"], log_buckets)
    return counted(_labels(streams), streams["start_time"], figures, columns.STREAM_HISTOGRAMS)


def stream_totals(streams: pa.Table) -> pa.Table:
    """The ``stream_totals`` rows of a ``streams`` block: per step, interval, labels, source, coverage, whether
    the tokens were estimated and node, how many streams, their sums and flags (``stream_metrics``'), and their
    content chunks by tokens added up (migrations 0033, 0037, 0039, 0040)."""
    labels = _labels(streams)
    for name in ("source", "coverage", "tokens_estimated", "node_name"):
        labels = labels.append_column(name, streams[name])
    distinct, group = label_groups(labels)
    bursting, burst_ratio = _head_burst(streams)
    stalled = _floats(streams["stall_count"]) > 0
    outcome = _strings(streams["outcome"]).to_numpy(zero_copy_only=False)
    wired = _floats(streams["wire_bytes"]) > 0
    counted = counted_tokens(streams, outcome)
    summed = {
        "streams": np.ones(streams.num_rows),
        **{name: _floats(streams[name]) for name in ("content_chunks", "tokens", "content_bytes", "wire_bytes")},
        "cancelled": np.isin(outcome, ("cancelled", "disconnected")),
        "stalled": stalled,
        "over_slo": np.nan_to_num(_floats(streams["gap_max_us"])) > SLO_US,
        "frontloaded_then_stalled": bursting & (burst_ratio >= 3) & stalled,
        "stuck_loops": _floats(streams["repetition_score"]) >= 0.5,  # False where NULL (NaN)
        "unknown_outcome": outcome == columns.OUTCOME_UNKNOWN,
        # the content of streams whose wire bytes are known (a wrapper that sees parsed events records none)
        "wired_chunks": _floats(streams["content_chunks"]) * wired,
        "wired_content_bytes": _floats(streams["content_bytes"]) * wired,
        "counted_tokens": np.nan_to_num(counted),
        "counted_chunks": _floats(streams["content_chunks"]) * ~np.isnan(counted),
    }
    by_tokens = streams["content_chunks_by_tokens"].combine_chunks()
    seconds = pc.divide(pc.cast(streams["start_time"], pa.int64()), 1_000_000).to_numpy(zero_copy_only=False)
    blocks = []
    for step in STEPS_S:
        paired, split = _paired_with_interval(group, seconds, step)
        rows, row_of_stream = np.unique(paired, return_inverse=True)
        of_labels, starts = split(rows)
        by_labels = distinct.take(pa.array(of_labels))
        values = {
            "step": pa.array(np.full(len(rows), step, dtype=np.uint16)),
            **{name: by_labels[name].combine_chunks() for name in distinct.column_names},
            "interval_start": pa.array(starts, pa.timestamp("s", tz="UTC")),
            **{
                name: pa.array(np.bincount(row_of_stream, column.astype(np.float64), len(rows)).astype(np.uint64))
                for name, column in summed.items()
            },
            "content_chunks_by_tokens": _maps_added(by_tokens, row_of_stream, len(rows)),
        }
        blocks.append(_table(values, columns.STREAM_TOTALS))
    return pa.concat_tables(blocks)


def counted_tokens(streams: pa.Table, outcome: np.ndarray) -> np.ndarray:
    """Each stream's tokens as counted (``stream_metrics.counted_tokens``, migration 0039), NaN where unknown: its
    chunks' tokens where counted; else, of a stream read to its end with every chunk kept, its provider's total,
    unless the provider said some were spent reasoning (which the stream may not have shown)."""
    estimated = streams["tokens_estimated"].to_numpy(zero_copy_only=False).astype(bool)
    reasoning = pc.map_lookup(streams["attributes"], sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, "first")
    shown = np.isin(pc.fill_null(reasoning, "").to_numpy(zero_copy_only=False), ("", "0"))
    whole = (outcome == "completed") & (_strings(streams["coverage"]).to_numpy(zero_copy_only=False) == "full") & shown
    told = np.where(whole, _floats(streams["output_tokens"]), np.nan)
    return np.where(estimated, told, _floats(streams["tokens"]))


def smoothing_histograms(smoothing: pa.Table) -> pa.Table:
    """The ``smoothing_histograms`` rows of ``stream_smoothing`` rows: each stream's figures before and after each
    buffer depth."""
    figures = {"added_end_us": _figure(smoothing["added_end_us"], log_buckets)}
    for name, bucketed in (("stalls", count_buckets), ("longest_gap", log_buckets), ("fluidity", index_buckets),
                           ("andes", index_buckets)):  # fmt: skip
        for when in ("before", "after"):
            column = f"{name}_{when}_us" if name == "longest_gap" else f"{name}_{when}"
            figures[column] = _figure(smoothing[column], bucketed)
    labels = smoothing.select(list(SMOOTHING_LABELS))
    return counted(labels, smoothing["start_time"], figures, columns.SMOOTHING_HISTOGRAMS)


def counted(
    labels: pa.Table, start_time: pa.ChunkedArray | pa.Array, figures: Mapping[str, pa.Array], schema: pa.Schema
) -> pa.Table:
    """Rows of ``schema`` counting, at every step of ``STEPS_S``, the streams (rows of ``labels``, started at
    ``start_time``) in each figure's bucket, per interval and labels; NULL buckets are not counted."""
    distinct, group = label_groups(labels)
    seconds = pc.divide(pc.cast(start_time, pa.int64()), 1_000_000).to_numpy(zero_copy_only=False)
    # An integer per counted figure: its labels, figure and bucket (its cell); each step counts the distinct pairs
    # of cell and interval.
    keys, starts = [], []
    for number, buckets in enumerate(figures.values()):
        known = buckets.is_valid().to_numpy(zero_copy_only=False)
        bucket = buckets.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)[known]
        keys.append((group[known] * len(figures) + number) << _BUCKET_BITS | (bucket - ZERO))
        starts.append(seconds[known])
    key, start = np.concatenate(keys), np.concatenate(starts)
    if not key.size:
        return schema.empty_table()
    cells, steps, interval_starts, counts = [], [], [], []
    for step in STEPS_S:
        paired, split = _paired_with_interval(key, start, step)
        combined, counted_here = np.unique(paired, return_counts=True)
        cell, interval_start = split(combined)
        cells.append(cell)
        interval_starts.append(interval_start)
        steps.append(np.full(combined.size, step, dtype=np.uint16))
        counts.append(counted_here)
    cell = np.concatenate(cells)
    of_labels = cell >> _BUCKET_BITS
    by_labels = distinct.take(pa.array(of_labels // len(figures)))
    values = {
        "step": pa.array(np.concatenate(steps)),
        **{name: by_labels[name].combine_chunks() for name in distinct.column_names},
        "interval_start": pa.array(np.concatenate(interval_starts), pa.timestamp("s", tz="UTC")),
        "figure": pa.DictionaryArray.from_arrays(pa.array(of_labels % len(figures), pa.int32()), list(figures)),
        "bucket": pa.array(((cell & _BUCKET_MASK) + ZERO).astype(np.int16)),
        "streams": pa.array(np.concatenate(counts).astype(np.uint64)),
    }
    return _table(values, schema)


def _paired_with_interval(
    keys: np.ndarray, seconds: np.ndarray, step: int
) -> tuple[np.ndarray, Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]]:
    """Each key with the ``step``-second interval its ``seconds`` fall in, as one integer (a unique over one column
    costs a fraction of a unique over rows), and how to split such integers back into (key, interval start)."""
    interval = seconds // step
    lowest = int(interval.min())
    span = int(interval.max()) - lowest + 1
    return keys * span + (interval - lowest), lambda paired: (paired // span, (paired % span + lowest) * step)


def _maps_added(maps: pa.MapArray, row_of_stream: np.ndarray, rows: int) -> pa.MapArray:
    """Each row's map: the sum, key by key, of the maps (one per stream) of the streams in it."""
    keys = maps.keys.to_numpy(zero_copy_only=False).astype(np.int64)  # UInt16 token counts
    row_of_entry = np.repeat(row_of_stream.astype(np.int64), np.diff(maps.offsets.to_numpy()))
    cells, cell_of_entry = np.unique(row_of_entry << 16 | keys, return_inverse=True)
    weights = maps.items.to_numpy(zero_copy_only=False).astype(np.float64)
    sums = np.bincount(cell_of_entry, weights=weights, minlength=len(cells))
    return pa.MapArray.from_arrays(
        np.searchsorted(cells >> 16, np.arange(rows + 1)).astype(np.int32),
        pa.array(cells & 0xFFFF, pa.uint16()),
        pa.array(sums.astype(np.uint64)),
    )


def _head_burst(streams: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """Which streams have a ``stream_metrics.head_burst_ratio`` (content past the first 200 ms and past the rest's
    stalls, whose time is known, and tokens after the head), and the ratio (arbitrary where they have none)."""
    names = ("ttft_us", "last_content_us", "tokens", "head_tokens", "stall_count")
    ttft, last, tokens, head, stalls = (_floats(streams[name]) for name in names)
    rest_stalled = _floats(streams["rest_stalled_us"]) if "rest_stalled_us" in streams.column_names else stalls * np.nan
    rest_stalled = np.where(stalls == 0, 0.0, rest_stalled)  # NaN: stalls of unknown length
    bursting = (last > ttft + 200_000 + rest_stalled) & (tokens > head)
    rest_s = np.where(bursting, last - ttft - 200_000 - rest_stalled, 1.0) / 1e6
    with np.errstate(divide="ignore", invalid="ignore"):
        return bursting, (head / 0.2) / ((tokens - head) / rest_s)


def _table(values: Mapping[str, pa.Array], schema: pa.Schema) -> pa.Table:
    """``values`` as a table of ``schema``, each column cast to its type."""
    return pa.Table.from_arrays([_as(values[name], field.type) for name, field in zip(schema.names, schema)],
                                schema=schema)  # fmt: skip


def _labels(streams: pa.Table) -> pa.Table:
    """A streams block's ``STREAM_LABELS``, the model as ``stream_metrics`` gives it."""
    response, request = (_strings(streams[f"{which}_model"]) for which in ("response", "request"))
    return streams.select(list(STREAM_LABELS[:-1])).append_column(
        "model", pc.if_else(pc.not_equal(response, ""), response, request)
    )


def _as(column: pa.Array | pa.ChunkedArray, kind: pa.DataType) -> pa.Array:
    """``column`` as the schema's type (labels as dictionaries, whatever their encoding in the block)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if pa.types.is_dictionary(kind) and not pa.types.is_dictionary(column.type):
        return column.dictionary_encode().cast(kind)
    return column.cast(kind)


def _figure(column: pa.ChunkedArray, bucketed: Callable[[np.ndarray], np.ndarray]) -> pa.Array:
    """A column's buckets, NULL where the column is."""
    values = _floats(column)
    return pa.array(bucketed(values), mask=np.isnan(values))


def _strings(column: pa.ChunkedArray) -> pa.Array:
    return column.combine_chunks().cast(pa.string())


def _floats(column: pa.ChunkedArray) -> np.ndarray:
    """A numeric column as float64, NaN where NULL (integers of µs are exact in float64)."""
    return column.combine_chunks().cast(pa.float64()).to_numpy(zero_copy_only=False)
