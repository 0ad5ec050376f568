"""The vectorised timeline maths against a plain per-stream implementation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope_ingest.blocks.columns import CHUNK_KINDS
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.decode.timeline import HEAD_WINDOW_US, build_timeline, content_chunks_by_tokens, stream_stats

chunk = st.tuples(st.integers(0, 2_000_000), st.integers(0, 3))  # (wait µs, content bytes)
stream = st.lists(chunk, max_size=40)


def reference(chunks: list[tuple[int, int]], threshold: int):
    offsets = np.cumsum([w for w, _ in chunks]).tolist() if chunks else []
    kinds, gaps, itl, last, seen = [], [], [], 0, 0
    for offset, (_, size) in zip(offsets, chunks):
        if size:
            kinds.append("first" if not seen else "content")
            gaps.append(offset - last)
            if seen:
                itl.append(offset - last)
            last, seen = offset, seen + 1
        else:
            kinds.append("lead" if not seen else "aside")
            gaps.append(offset - last)
    ordered = sorted(itl)

    def q(level: float):
        return ordered[min(int(level * len(ordered)), len(ordered) - 1)] if ordered else None

    ttft = next((o for o, (_, s) in zip(offsets, chunks) if s), None)
    content_offsets = [o for o, (_, s) in zip(offsets, chunks) if s]
    stats = {
        "last_content": content_offsets[-1] if content_offsets else None,
        "head_tokens": sum(1 for o in content_offsets if o <= ttft + HEAD_WINDOW_US),
        "p50": q(0.5),
        "p95": q(0.95),
        "p99": q(0.99),
        "max": max(itl) if itl else None,
        "stalls": sum(g > threshold for g in itl),
        "ttft": ttft,
        "first_chunk": offsets[0] if offsets else None,
        "jitter": q(0.99) / q(0.5) if ordered and q(0.5) else None,
        "content": sum(1 for _, s in chunks if s),
    }
    return offsets, kinds, gaps, stats


def value(per_stream, i):
    return int(per_stream.values[i]) if per_stream.present[i] else None


@settings(max_examples=200)
@given(st.lists(stream, max_size=8), st.integers(1, 1_000_000))
def test_vectorised_timeline_equals_reference(streams, threshold):
    lengths = np.array([len(s) for s in streams], dtype=np.int64)
    refs = [reference(s, threshold) for s in streams]
    offsets = np.array([o for r in refs for o in r[0]], dtype=np.int64)
    content = np.array([size for s in streams for _, size in s], dtype=np.int64)
    ones = np.ones(offsets.size, dtype=np.int64)
    timeline = build_timeline(lengths, offsets, content)
    stats = stream_stats(lengths, offsets, ones, content, ones, timeline, StallRule(threshold))
    assert [CHUNK_KINDS[k] for k in timeline.kind] == [k for r in refs for k in r[1]]
    assert timeline.gap_us.tolist() == [g for r in refs for g in r[2]]
    for i, (_, _, _, expected) in enumerate(refs):
        assert value(stats.gap_quantiles_us[0.5], i) == expected["p50"]
        assert value(stats.gap_quantiles_us[0.95], i) == expected["p95"]
        assert value(stats.gap_quantiles_us[0.99], i) == expected["p99"]
        assert value(stats.gap_max_us, i) == expected["max"]
        assert value(stats.ttft_us, i) == expected["ttft"]
        assert value(stats.first_chunk_us, i) == expected["first_chunk"]
        jitter = stats.jitter_ratio
        assert jitter.present[i] == (expected["jitter"] is not None)
        if expected["jitter"] is not None:
            assert float(jitter.values[i]) == pytest.approx(expected["jitter"], rel=1e-6)
        assert int(stats.stall_count[i]) == expected["stalls"]
        assert int(stats.content_chunks[i]) == expected["content"]
        assert value(stats.last_content_us, i) == expected["last_content"]
        assert int(stats.head_tokens[i]) == expected["head_tokens"]
        assert int(stats.tokens[i]) == len(streams[i])
        assert int(stats.content_bytes[i]) == sum(size for _, size in streams[i])


def test_gap_quantiles_of_streams_of_very_unequal_lengths():
    """One long stream beside many short ones: the gaps are sorted another way (a row per stream would not fit)."""
    rng = np.random.default_rng(7)
    streams = [[(int(w), int(s)) for w, s in zip(rng.integers(0, 90_000, n), rng.integers(0, 3, n))]
               for n in (6_000, *rng.integers(0, 12, 60))]  # fmt: skip
    lengths = np.array([len(s) for s in streams], dtype=np.int64)
    refs = [reference(s, 50_000) for s in streams]
    offsets = np.array([o for r in refs for o in r[0]], dtype=np.int64)
    content = np.array([size for s in streams for _, size in s], dtype=np.int64)
    ones = np.ones(offsets.size, dtype=np.int64)
    timeline = build_timeline(lengths, offsets, content)
    stats = stream_stats(lengths, offsets, ones, content, ones, timeline, StallRule(50_000))
    for level, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99")):
        assert [value(stats.gap_quantiles_us[level], i) for i in range(len(streams))] == [r[3][name] for r in refs]
    assert [value(stats.gap_max_us, i) for i in range(len(streams))] == [r[3]["max"] for r in refs]


tokens_chunk = st.tuples(st.sampled_from(CHUNK_KINDS), st.one_of(st.integers(0, 8), st.integers(0, 65_535)))


@settings(max_examples=200, deadline=None)  # the first example pays for Arrow's map type
@given(st.lists(st.lists(tokens_chunk, max_size=30), max_size=8), st.randoms(use_true_random=False))
def test_content_chunks_by_tokens_counts_each_streams_content_chunks(streams, shuffle):
    """Against a Counter per stream, with chunks in any order: small token counts take the dense table, a chunk
    with tens of thousands of tokens the sort."""
    rows = [(i, CHUNK_KINDS.index(kind), tokens) for i, chunks in enumerate(streams) for kind, tokens in chunks]
    shuffle.shuffle(rows)
    stream, kind, tokens = (
        (np.array(column, dtype=np.int64).reshape(-1) for column in zip(*rows)) if rows else [np.empty(0, np.int64)] * 3
    )
    histograms = content_chunks_by_tokens(stream, kind.astype(np.int8), tokens, len(streams))
    maps = histograms.map_array().to_pylist()
    for chunks, counted in zip(streams, maps, strict=True):
        expected = Counter(tokens for kind, tokens in chunks if kind in ("first", "content"))
        assert counted == sorted(expected.items())
