"""What a smoothing buffer would have shown: a counterfactual replay of a recorded stream's timeline.

A client-side smoothing buffer holds what arrives and reveals it at a steady pace: it shows nothing until
``depth`` after the first content chunk arrived, then at most one chunk per ``rate``; a chunk that arrives after
its turn (the buffer ran dry) is shown as it arrives, and the pace goes on from there. So, with arrivals ``t``:

    r[0] = t[0] + depth        r[i] = max(t[i], r[i-1] + rate)

which unrolls to ``r[i] = i * rate + max(t[0] + depth, max over j <= i of (t[j] - j * rate))``: a running
maximum, computed for the whole stream at once. The trade it buys is read off both timelines with the same
measures: the first chunk comes ``depth`` later and the last one later still when the pace is slower than the
stream; a stall the backlog covered is no longer seen; the quality indices move with both.

The pace defaults to the stream's own median gap between content chunks (what a reader of that stream is used
to), so the buffer smooths the stream's rhythm without slowing it down.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from streamscope_ingest.analysis.attribution import StallRules, Timeline
from streamscope_ingest.analysis.quality import andes_qoes, fluidity_indices, of_row

DEPTHS_MS = (100, 250, 500)
"""The buffer depths the attribution job replays every stream behind, for the dashboards' side-by-side panel."""


@dataclass(frozen=True)
class Buffer:
    """A smoothing buffer: how long it holds the first chunk back, and how fast it reveals the rest (None: at
    the stream's own median gap)."""

    depth_ms: float
    rate_ms: float | None = None

    @classmethod
    def parse(cls, text: str) -> Buffer:
        """``DEPTH_MS`` or ``DEPTH_MS,RATE_MS`` (milliseconds, e.g. ``250`` or ``250,33``)."""
        parts = [part.strip() for part in text.split(",")]
        if len(parts) > 2 or not all(parts):
            raise ValueError(f"{text!r}: expected DEPTH_MS or DEPTH_MS,RATE_MS")
        try:
            depth, *rate = (float(part) for part in parts)
        except ValueError:
            raise ValueError(f"{text!r}: milliseconds must be numbers") from None
        if depth < 0 or (rate and rate[0] <= 0):
            raise ValueError(f"{text!r}: the depth must be 0 or more and the rate more than 0")
        return cls(depth, rate[0] if rate else None)


@dataclass(frozen=True)
class Targets:
    """What a reader expects, for the quality indices (the attribution job's ``QualityTargets``, in µs)."""

    first_deadline_us: float
    token_deadline_us: float
    expected_ttft_us: float
    reading_tokens_per_s: float


@dataclass(frozen=True)
class Smoothed:
    """One stream before and after a buffer. Times are µs; ``None`` where a stream cannot give the figure."""

    depth_ms: float
    rate_ms: float
    """The pace used, in ms per chunk (the stream's own median gap when the buffer named none)."""
    added_ttft_us: int
    added_end_us: int
    """How much later the last chunk was shown."""
    stalls_before: int
    stalls_after: int
    longest_gap_before_us: int
    longest_gap_after_us: int
    fluidity_before: float | None
    fluidity_after: float | None
    andes_before: float | None
    andes_after: float | None


def reveal_times(arrivals_us: np.ndarray, depth_us: float | np.ndarray, rate_us: float | np.ndarray) -> np.ndarray:
    """When each chunk arriving at ``arrivals_us`` (sorted) is shown behind the buffer (see the module); a row per
    buffer when ``depth_us`` and ``rate_us`` are columns of several."""
    arrivals = np.asarray(arrivals_us, dtype=np.float64)
    if arrivals.size == 0:
        return arrivals
    steps = np.arange(arrivals.size) * np.asarray(rate_us)
    return steps + np.maximum(arrivals[0] + np.asarray(depth_us), np.maximum.accumulate(arrivals - steps, axis=-1))


def smooth(
    timeline: Timeline, tokens: np.ndarray, buffer: Buffer, rules: StallRules, targets: Targets
) -> Smoothed | None:
    """``timeline`` as its reader saw it and as it would have seen it behind ``buffer``; None without two
    content chunks (nothing to smooth). ``tokens`` counts each chunk's tokens."""
    smoothed = smooth_each(timeline, tokens, (buffer,), rules, targets)
    return smoothed[0] if smoothed else None


def smooth_each(
    timeline: Timeline, tokens: np.ndarray, buffers: Sequence[Buffer], rules: StallRules, targets: Targets
) -> list[Smoothed]:
    """``smooth`` behind each of ``buffers``, the stream as its reader saw it measured once; empty without two
    content chunks."""
    index, _, shown = timeline.shown()
    if index.size < 2 or not buffers:
        return []
    counts = np.asarray(tokens, dtype=np.int64)[index]
    seen = np.asarray(shown, dtype=np.int64)
    median_us = float(np.median(np.diff(seen)))
    rates_us = np.array([[b.rate_ms * 1000 if b.rate_ms is not None else max(median_us, 1.0)] for b in buffers])
    depths_us = np.array([[b.depth_ms * 1000] for b in buffers])
    revealed = np.rint(reveal_times(seen, depths_us, rates_us)).astype(np.int64)
    # the stream as seen, then behind each buffer: a row each, measured together
    shown_as = np.vstack((seen, revealed))
    fluidity = fluidity_indices(shown_as, counts, targets.first_deadline_us, targets.token_deadline_us)
    andes = andes_qoes(shown_as, counts, targets.expected_ttft_us, targets.reading_tokens_per_s)
    gaps_as = np.diff(shown_as, axis=1)
    medians = np.vstack(([[median_us]], np.median(gaps_as[1:], axis=1, keepdims=True)))  # the seen one known
    stalls = rules.stall.stalls_among(gaps_as, medians).sum(axis=1)
    longest = gaps_as.max(axis=1)
    return [
        Smoothed(
            depth_ms=buffer.depth_ms,
            rate_ms=float(rates_us[row - 1, 0]) / 1000,
            added_ttft_us=int(shown_as[row, 0] - seen[0]),
            added_end_us=int(shown_as[row, -1] - seen[-1]),
            stalls_before=int(stalls[0]),
            stalls_after=int(stalls[row]),
            longest_gap_before_us=int(longest[0]),
            longest_gap_after_us=int(longest[row]),
            fluidity_before=of_row(fluidity, 0),
            fluidity_after=of_row(fluidity, row),
            andes_before=of_row(andes, 0),
            andes_after=of_row(andes, row),
        )
        for row, buffer in enumerate(buffers, start=1)
    ]
