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

import numpy as np


def fluidity_index(
    offsets_us: np.ndarray, tokens: np.ndarray, first_deadline_us: float, token_deadline_us: float
) -> float | None:
    """Etalon's fluidity-index in [0, 1]; None for a stream without tokens."""
    return of_row(fluidity_indices(np.asarray(offsets_us)[np.newaxis], tokens, first_deadline_us, token_deadline_us), 0)


def fluidity_indices(
    offsets_us: np.ndarray, tokens: np.ndarray, first_deadline_us: float, token_deadline_us: float
) -> np.ndarray | None:
    """``fluidity_index`` of each row of ``offsets_us``: one stream's chunks (``tokens`` each) at other times, as
    a smoothing buffer would show them, computed together; None for a stream without tokens.

    Walks chunks, not tokens: a chunk's later tokens arrive 0 µs after its first, always on time, so each of
    them only banks a deadline of slack. The walk carries slack from chunk to chunk, reset to 0 by a miss: with
    each chunk's margin (slack + deadline - time taken), the slack after a check is max(margin, 0), a Lindley
    recursion, so every margin is a running sum less its running minimum, computed for all chunks at once.
    """
    counts = np.asarray(tokens, dtype=np.int64)
    carrying = counts > 0
    counts = counts[carrying]
    if counts.size == 0:
        return None
    rows = np.asarray(offsets_us, dtype=np.float64)[:, carrying]
    taken = np.diff(rows, prepend=0.0, axis=1)
    budget = np.full(counts.size, float(token_deadline_us))
    budget[0] = first_deadline_us
    banked = (counts - 1) * float(token_deadline_us)  # the slack a chunk's later tokens bank
    # margin[i] = max(margin[i-1], 0) + banked[i-1] + budget[i] - taken[i], margin[-1] = 0
    running = np.cumsum(budget - taken + np.concatenate(([0.0], banked[:-1])), axis=1)
    before = np.concatenate((np.zeros((rows.shape[0], 1)), running[:, :-1]), axis=1)
    margin = running - np.minimum.accumulate(before, axis=1)
    late = margin < 0
    # every deadline a late chunk's gap spans (whole numbers: their sum is exact)
    missed = np.where(late, np.floor(-margin / token_deadline_us) + 1, 0.0).sum(axis=1).astype(np.int64)
    total = int(counts.sum()) - late.sum(axis=1) + missed
    return 1.0 - missed / total


def andes_qoe(
    offsets_us: np.ndarray, tokens: np.ndarray, expected_ttft_us: float, reading_tokens_per_s: float
) -> float | None:
    """Andes-style QoE in [0, 1] (1: never behind what the reader expected); None without tokens."""
    return of_row(andes_qoes(np.asarray(offsets_us)[np.newaxis], tokens, expected_ttft_us, reading_tokens_per_s), 0)


def andes_qoes(
    offsets_us: np.ndarray, tokens: np.ndarray, expected_ttft_us: float, reading_tokens_per_s: float
) -> np.ndarray | None:
    """``andes_qoe`` of each row of ``offsets_us`` (as ``fluidity_indices``); None without tokens, NaN for a row
    with nothing expected of it.

    The area is exact, token by token: the expected curve is a ramp (``expected_ttft_us`` ≥ 0), token i's share
    of it rising from 0 to 1 over one reading pace from ``expected_ttft + i * pace``, and the shown curve counts
    the tokens shown. Whenever the shown curve is behind, each token is either shown or not yet due in full, so
    the area behind is the sum, over tokens, of token i's share of the ramp until it was shown.
    """
    arrivals = np.repeat(np.asarray(offsets_us, dtype=np.float64), np.asarray(tokens, dtype=np.int64), axis=1)
    n = arrivals.shape[1]
    if n == 0:
        return None
    pace = 1e6 / reading_tokens_per_s  # µs per token at reading speed
    ready = np.arange(n) * pace
    # a token is shown when it has arrived and the reader is ready for it: shown[i] = max(arrival[i], shown[i-1] + pace)
    shown = np.maximum.accumulate(arrivals - ready, axis=1) + ready
    ramp_end = expected_ttft_us + n * pace
    end = np.maximum(shown[:, -1], ramp_end)
    whole = n * n * pace / 2 + n * (end - ramp_end)
    late = (shown - ready - expected_ttft_us).clip(min=0.0)  # since token i's share of the ramp began
    behind = np.where(late <= pace, late * late / (2 * pace), late - pace / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(whole > 0, 1.0 - behind.sum(axis=1) / whole, np.nan)


def of_row(indices: np.ndarray | None, row: int) -> float | None:
    """One row's index from ``fluidity_indices`` or ``andes_qoes``; None where the row has none."""
    return None if indices is None or np.isnan(indices[row]) else float(indices[row])
