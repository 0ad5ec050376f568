"""Per-stream streaming quality indices from the literature, computed from a chunk timeline.

Both are sequential over the stream (slack carried from token to token; a display paced at reading speed),
which SQL expresses poorly, so they are plain functions over arrays. Each chunk's tokens count as arriving
together at the chunk's time. Times are microseconds from the request.

- ``fluidity_index`` (Etalon, Agrawal et al. 2024): every token has a deadline, the first ``first_deadline``
  after the request and each later one ``token_deadline`` after its predecessor, plus the slack that early
  tokens banked. A late token is charged for every deadline its gap spans; the index is
  1 - missed / total, so an early stall costs more than the same stall late in the stream.
- ``andes_qoe`` (Andes, Liu et al. 2024): the reader expects nothing until ``expected_ttft`` and then tokens at
  ``reading_tokens_per_s``; tokens shown faster than that are buffered, so they add nothing. QoE is
  1 - (area by which the shown curve falls behind the expected one) / (area under the expected one).
"""

from __future__ import annotations

import math

import numpy as np


def _token_arrivals(offsets_us: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    return np.repeat(np.asarray(offsets_us, dtype=np.float64), np.asarray(tokens, dtype=np.int64))


def fluidity_index(
    offsets_us: np.ndarray, tokens: np.ndarray, first_deadline_us: float, token_deadline_us: float
) -> float | None:
    """Etalon's fluidity-index in [0, 1]; None for a stream without tokens."""
    arrivals = _token_arrivals(offsets_us, tokens)
    if arrivals.size == 0:
        return None
    missed = total = 0
    slack = 0.0
    previous = 0.0
    for i, arrival in enumerate(arrivals):
        budget = first_deadline_us if i == 0 else token_deadline_us
        taken = arrival - previous
        if taken <= budget + slack:
            slack += budget - taken
            total += 1
        else:
            misses = math.floor((taken - slack - budget) / token_deadline_us) + 1
            missed += misses
            total += misses
            slack = 0.0
        previous = arrival
    return 1.0 - missed / total


def andes_qoe(
    offsets_us: np.ndarray,
    tokens: np.ndarray,
    expected_ttft_us: float,
    reading_tokens_per_s: float,
    step_us: float = 1_000.0,
) -> float | None:
    """Andes-style QoE in [0, 1] (1: never behind what the reader expected); None without tokens."""
    arrivals = _token_arrivals(offsets_us, tokens)
    n = arrivals.size
    if n == 0:
        return None
    pace = 1e6 / reading_tokens_per_s  # µs per token at reading speed
    shown = np.empty(n)
    shown[0] = arrivals[0]
    for i in range(1, n):  # a token is shown when it has arrived and the reader is ready for it
        shown[i] = max(arrivals[i], shown[i - 1] + pace)
    end = max(shown[-1], expected_ttft_us + n * pace)
    grid = np.arange(0.0, end + step_us, step_us)
    expected = np.clip((grid - expected_ttft_us) / pace, 0, n)
    actual = np.searchsorted(shown, grid, side="right").astype(np.float64)
    whole = expected.sum()
    behind = np.clip(expected - actual, 0, None).sum()
    return float(1.0 - behind / whole) if whole > 0 else None
