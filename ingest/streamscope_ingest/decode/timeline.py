"""Vectorised chunk-timeline maths over a batch of streams: chunk kinds, gaps and per-stream statistics.

Input is every stream's chunks concatenated (``offsets``, ``content_bytes`` ...) with ``lengths`` giving
each stream's chunk count; nothing loops over chunks in Python. Percentiles use ClickHouse's
``quantileExact`` definition (the element at index floor(level * n) of the sorted gaps), so
``SELECT quantileExact(0.99)(gap_us) FROM chunks WHERE kind = 'content' AND span_id = …`` reproduces
the stored ``gap_p99_us`` exactly. Gaps are stored as UInt32 microseconds: a pause longer than 71 minutes is
clamped to that maximum (and the chunk_timeline view's offsets after it are then short by the excess).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from streamscope_ingest.blocks.columns import KIND_ASIDE, KIND_CONTENT, KIND_FIRST, KIND_LEAD, KIND_RETRACT
from streamscope_ingest.blocks.stalls import StallRule

QUANTILES = (0.5, 0.95, 0.99)
HEAD_WINDOW_US = 200_000
"""The head of a stream: content arriving within this long of the first content chunk (burst-at-head)."""
_U32_MAX = np.iinfo(np.uint32).max
_KIND_OF = np.array([KIND_LEAD, KIND_ASIDE, KIND_FIRST, KIND_CONTENT], np.int8)
"""A chunk's kind by whether it has content (times 2) and whether content came before it in its stream."""


@dataclass(frozen=True)
class Timeline:
    """Per-chunk derived columns."""

    stream: np.ndarray  # index of each chunk's stream in the batch
    kind: np.ndarray  # KIND_* code
    gap_us: np.ndarray  # µs since the previous content chunk of the stream (or since span start)


@dataclass(frozen=True)
class TokenHistograms:
    """Each stream's content chunks counted by their token count, as the flat arrays of a map column: stream i
    owns the ``sizes[i]`` entries after those of the streams before it, token counts ascending."""

    sizes: np.ndarray  # distinct token counts per stream
    tokens: np.ndarray  # uint16 token counts
    chunks: np.ndarray  # uint32 content chunks that carried that many tokens

    def map_array(self) -> pa.MapArray:
        """The streams' maps as the Arrow column ``content_chunks_by_tokens`` of the streams block."""
        offsets = np.concatenate(([0], np.cumsum(self.sizes))).astype(np.int32)
        return pa.MapArray.from_arrays(offsets, self.tokens, self.chunks)


@dataclass(frozen=True)
class PerStream:
    """A per-stream value that some streams lack (no chunks, no content, no gaps): stored as NULL there."""

    values: np.ndarray
    present: np.ndarray  # bool per stream; ``values`` is 0 where it is False

    @classmethod
    def at(cls, streams: int, owners: np.ndarray, values: np.ndarray, dtype: type) -> PerStream:
        """``values[i]`` for stream ``owners[i]`` (each owner once), absent for the other streams."""
        out: np.ndarray = np.zeros(streams, dtype=dtype)
        present: np.ndarray = np.zeros(streams, dtype=bool)
        out[owners], present[owners] = values, True
        return cls(out, present)


@dataclass(frozen=True)
class StreamStats:
    """Per-stream statistics; ``PerStream`` where a stream may have no value (no content, no gaps)."""

    content_chunks: np.ndarray
    tokens: np.ndarray
    content_bytes: np.ndarray
    wire_bytes: np.ndarray
    first_chunk_us: PerStream
    ttft_us: PerStream
    last_content_us: PerStream
    head_tokens: np.ndarray
    """Tokens in content chunks that arrived within HEAD_WINDOW_US of the first one (the first included)."""
    gap_quantiles_us: dict[float, PerStream]
    gap_max_us: PerStream
    jitter_ratio: PerStream
    stall_count: np.ndarray
    rest_stalled_us: np.ndarray
    """Time in stalls past the head window (the part of each stall after it): the rest's pace leaves it out."""
    chunks_by_tokens: TokenHistograms


def build_timeline(
    lengths: np.ndarray, offsets: np.ndarray, content_bytes: np.ndarray, retracted_bytes: np.ndarray | None = None
) -> Timeline:
    """Each chunk's kind and its gap since the content chunk before it. A chunk without content that withdrew
    some is a retraction."""
    streams = lengths.size
    total = int(lengths.sum())
    stream = np.repeat(np.arange(streams), lengths)
    starts = np.cumsum(lengths) - lengths
    stream_start = np.repeat(starts, lengths)  # each chunk's stream's first chunk (repeated, cheaper than gathered)
    has_content = content_bytes > 0

    # Whether a content chunk came before each chunk in its stream: more content before it in the batch than
    # before its stream.
    before: np.ndarray = np.cumsum(has_content) - has_content
    seen = before > np.repeat(before[np.minimum(starts, total - 1)], lengths) if total else np.zeros(0, bool)
    kind = _KIND_OF.take(has_content.view(np.int8) * np.int8(2) + seen.view(np.int8))
    if retracted_bytes is not None:
        kind[(retracted_bytes > 0) & ~has_content] = KIND_RETRACT

    # Index of the latest content chunk strictly before each chunk, if it is in the same stream: the latest at or
    # before each chunk, written one place on.
    latest = np.empty(total + 1, np.int64)
    latest[0] = -1
    np.maximum.accumulate(np.where(has_content, np.arange(total), -1), out=latest[1:])
    previous = latest[:-1]
    base = offsets[np.maximum(previous, 0)] * (previous >= stream_start)  # 0 for a chunk with none before it
    gap = np.minimum(offsets - base, _U32_MAX).astype(np.uint32)
    return Timeline(stream=stream, kind=kind, gap_us=gap)


def stream_stats(
    lengths: np.ndarray,
    offsets: np.ndarray,
    tokens: np.ndarray,
    content_bytes: np.ndarray,
    wire_bytes: np.ndarray | None,
    timeline: Timeline,
    stall: StallRule,
) -> StreamStats:
    n = lengths.size
    stream = timeline.stream
    with_chunks = np.flatnonzero(lengths)
    starts = (np.cumsum(lengths) - lengths)[with_chunks]

    def per_stream_sum(values: np.ndarray | None, dtype: type = np.uint64) -> np.ndarray:
        """Each stream's sum, in integers (bincount's weights would go through float64); None is all zeros. Flags
        are counted (summed as integers); other values are summed as they are, without a copy in ``dtype``."""
        sums: np.ndarray = np.zeros(n, dtype=dtype)
        if values is not None and starts.size:
            sums[with_chunks] = np.add.reduceat(values, starts, dtype=np.int64 if values.dtype == bool else None)
        return sums

    def offset_of(chunks: np.ndarray, last: bool = False) -> PerStream:
        """The offset of each stream's first (or last) chunk among ``chunks``, indices in ascending order."""
        owners = stream[chunks]
        edge = np.diff(owners, append=n) != 0 if last else np.diff(owners, prepend=-1) != 0
        return PerStream.at(n, owners[edge], offsets[chunks[edge]], np.int64)

    has_content = (timeline.kind == KIND_FIRST) | (timeline.kind == KIND_CONTENT)  # as build_timeline found it
    content = np.flatnonzero(has_content)
    ttft = offset_of(np.flatnonzero(timeline.kind == KIND_FIRST))
    head_end = np.repeat(ttft.values + HEAD_WINDOW_US, lengths)
    in_head = has_content & (offsets <= head_end)

    itl_mask = timeline.kind == KIND_CONTENT
    stalled = itl_mask & stall.over_threshold(timeline.gap_us)
    at = np.flatnonzero(stalled)  # few: each stall's part past the head window, added up per stream
    ends = offsets[at]
    past_head = np.maximum(ends - np.maximum(ends - timeline.gap_us[at], head_end[at]), 0)
    rest_stalled: np.ndarray = np.zeros(n, np.uint64)
    np.add.at(rest_stalled, stream[at], past_head.astype(np.uint64))
    itl_gap = timeline.gap_us[itl_mask]
    count = per_stream_sum(itl_mask, np.int64)
    with_gaps = np.flatnonzero(count)
    sorted_gaps = _sorted_by_stream(itl_gap, count[with_gaps])
    count = count[with_gaps]

    def pick(index_in_stream: np.ndarray) -> PerStream:
        return PerStream.at(n, with_gaps, sorted_gaps(index_in_stream), np.uint32)

    quantiles = {q: pick(np.minimum((q * count).astype(np.int64), count - 1)) for q in QUANTILES}
    p50, p99 = quantiles[0.5].values[with_gaps], quantiles[0.99].values[with_gaps]
    rated = p50 > 0  # a ratio to a zero median is meaningless
    jitter = PerStream.at(n, with_gaps[rated], p99[rated] / p50[rated], np.float32)
    return StreamStats(
        content_chunks=per_stream_sum(has_content, np.uint32),
        tokens=per_stream_sum(tokens),
        content_bytes=per_stream_sum(content_bytes),
        wire_bytes=per_stream_sum(wire_bytes),
        first_chunk_us=PerStream.at(n, with_chunks, offsets[starts], np.int64),
        ttft_us=ttft,
        last_content_us=offset_of(content, last=True),
        head_tokens=per_stream_sum(tokens * in_head, np.uint32),
        gap_quantiles_us=quantiles,
        gap_max_us=pick(count - 1),
        jitter_ratio=jitter,
        stall_count=per_stream_sum(stalled, np.uint32),
        rest_stalled_us=rest_stalled,
        chunks_by_tokens=content_chunks_by_tokens(stream, timeline.kind, tokens, n),
    )


def _sorted_by_stream(gaps: np.ndarray, count: np.ndarray) -> Callable[[np.ndarray], np.ndarray]:
    """Each stream's gaps in order, read as ``sorted_gaps(i)``: the ``i[k]``-th smallest gap of the k-th stream.

    ``gaps`` lists each stream's ``count`` gaps one stream after another. As a table of a row per stream (padded
    with the largest gap) each row sorts on its own, many times faster than one sort of the flat array; streams of
    very unequal lengths would make that table huge, so they take one sort of (stream, gap) pairs packed in a
    uint64 instead.
    """
    begin = np.cumsum(count) - count
    width = int(count.max(initial=0))
    if count.size * width <= 2 * gaps.size + 4096:
        table = np.full((count.size, width), _U32_MAX, dtype=np.uint32)
        table[np.arange(width) < count[:, None]] = gaps  # a mask fills row by row: each row's first count cells
        table.sort(axis=1)
        return lambda index: table[np.arange(count.size), index]
    owner = np.repeat(np.arange(count.size, dtype=np.uint64), count)
    flat = np.sort((owner << np.uint64(32)) | gaps, kind="stable").astype(np.uint32)
    return lambda index: flat[begin + index]


def content_chunks_by_tokens(stream: np.ndarray, kind: np.ndarray, tokens: np.ndarray, streams: int) -> TokenHistograms:
    """Count each stream's content chunks (kinds first and content) by token count.

    Summed over streams, these counts give the exact median tokens per chunk of any set of streams without
    reading their chunks (streamscope_dashboards.panels.common.median_of). ``stream`` is each chunk's stream index, in
    any order.
    """
    content = (kind == KIND_FIRST) | (kind == KIND_CONTENT)
    owner, counts = stream[content].astype(np.int64), tokens[content].astype(np.int64)
    width = int(counts.max(initial=0)) + 1
    if streams * width <= 4 * owner.size + 1024:  # a dense (stream, token count) table: no sort
        table = np.bincount(owner * width + counts, minlength=streams * width)
        cells = np.flatnonzero(table)
        return TokenHistograms(
            sizes=np.bincount(cells // width, minlength=streams),
            tokens=(cells % width).astype(np.uint16),
            chunks=table[cells].astype(np.uint32),
        )
    # a few chunks with many tokens would make that table huge: sort (stream, token count) pairs instead
    pairs, chunks = np.unique((owner << 16) | counts, return_counts=True)
    return TokenHistograms(
        sizes=np.bincount(pairs >> 16, minlength=streams),
        tokens=(pairs & 0xFFFF).astype(np.uint16),
        chunks=chunks.astype(np.uint32),
    )
