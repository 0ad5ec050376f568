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
    """Etalon's fluidity-index in [0, 1]; None for a stream without tokens.

    Walks chunks, not tokens: a chunk's later tokens arrive 0 µs after its first, always on time, so each of
    them only banks a deadline of slack.
    """
    missed = total = 0
    slack = 0.0
    previous = 0.0
    for arrival, count in zip(np.asarray(offsets_us, dtype=np.float64).tolist(), np.asarray(tokens).tolist()):
        if count <= 0:
            continue
        budget = first_deadline_us if total == 0 else token_deadline_us
        taken = arrival - previous
        if taken <= budget + slack:
            slack += budget - taken
            total += 1
        else:
            misses = math.floor((taken - slack - budget) / token_deadline_us) + 1
            missed += misses
            total += misses
            slack = 0.0
        slack += (count - 1) * token_deadline_us
        total += count - 1
        previous = arrival
    return 1.0 - missed / total if total else None


def andes_qoe(
    offsets_us: np.ndarray, tokens: np.ndarray, expected_ttft_us: float, reading_tokens_per_s: float
) -> float | None:
    """Andes-style QoE in [0, 1] (1: never behind what the reader expected); None without tokens.

    The areas are exact: the expected curve is a ramp and the shown curve a step function, so between
    consecutive breakpoints (a token shown, the ramp reaching a whole token) their difference is linear and
    of one sign, and the trapezoid rule integrates it without error.
    """
    arrivals = _token_arrivals(offsets_us, tokens)
    n = arrivals.size
    if n == 0:
        return None
    pace = 1e6 / reading_tokens_per_s  # µs per token at reading speed
    ready = np.arange(n) * pace
    # a token is shown when it has arrived and the reader is ready for it: shown[i] = max(arrival[i], shown[i-1] + pace)
    shown = np.maximum.accumulate(arrivals - ready) + ready
    ramp_end = expected_ttft_us + n * pace
    end = max(float(shown[-1]), ramp_end)
    whole = n * n * pace / 2 + n * (end - ramp_end)
    points = np.concatenate(([0.0, end], shown, expected_ttft_us + np.arange(n + 1) * pace))
    points = np.unique(np.clip(points, 0.0, end))
    left, right = points[:-1], points[1:]
    actual = np.searchsorted(shown, left, side="right")
    expected_left = np.clip((left - expected_ttft_us) / pace, 0, n)
    expected_right = np.clip((right - expected_ttft_us) / pace, 0, n)
    behind = np.maximum((expected_left + expected_right) / 2 - actual, 0.0) * (right - left)
    return float(1.0 - behind.sum() / whole) if whole > 0 else None
