"""Quality indices on streams worked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from streamscope_ingest.analysis.quality import andes_qoe, andes_qoes, fluidity_index, fluidity_indices

MS = 1000


def one_token_chunks(gaps_ms: list[float], ttft_ms: float) -> tuple[np.ndarray, np.ndarray]:
    offsets = np.cumsum([ttft_ms * MS] + [g * MS for g in gaps_ms])
    return offsets, np.ones(offsets.size, dtype=np.int64)


def test_a_steady_stream_within_its_deadlines_is_perfectly_fluid():
    offsets, tokens = one_token_chunks([40] * 19, ttft_ms=200)
    assert fluidity_index(offsets, tokens, 300 * MS, 50 * MS) == 1.0


def test_a_stall_is_charged_for_every_deadline_it_spans_after_banked_slack():
    # 20 tokens: TTFT 200 (deadline 300: +100 ms slack), eight 40 ms gaps (+10 each: slack 180 ms),
    # then a 300 ms stall: late by 300 - 180 - 50 = 70 ms -> floor(70 / 50) + 1 = 2 misses, slack reset.
    # Then ten 40 ms gaps on time. Total = 1 + 8 + 2 + 10 = 21, missed = 2.
    offsets, tokens = one_token_chunks([40] * 8 + [300] + [40] * 10, ttft_ms=200)
    assert fluidity_index(offsets, tokens, 300 * MS, 50 * MS) == pytest.approx(1 - 2 / 21)


def test_an_early_stall_costs_more_than_the_same_stall_late():
    early, tokens = one_token_chunks([300] + [40] * 18, ttft_ms=290)
    late, _ = one_token_chunks([40] * 18 + [300], ttft_ms=290)
    # early: slack 10 ms when it hits -> floor((300 - 10 - 50) / 50) + 1 = 5 misses; late: slack 190 -> 2 misses
    assert fluidity_index(early, tokens, 300 * MS, 50 * MS) == pytest.approx(1 - 5 / 24)
    assert fluidity_index(late, tokens, 300 * MS, 50 * MS) == pytest.approx(1 - 2 / 21)


def test_chunked_tokens_arrive_together():
    offsets = np.array([100 * MS, 300 * MS])
    # 4 tokens at 100 ms (first on time, three with 0 ms gaps bank 50 ms each), 4 at 300 ms: the first of those
    # waited 200 ms against 50 + 150 slack: on time
    assert fluidity_index(offsets, np.array([4, 4]), 150 * MS, 50 * MS) == 1.0


def test_andes_qoe_is_one_when_the_reader_is_never_kept_waiting():
    offsets, tokens = one_token_chunks([50] * 29, ttft_ms=100)  # 20 tokens/s, the reader reads 10/s
    assert andes_qoe(offsets, tokens, expected_ttft_us=500 * MS, reading_tokens_per_s=10) == 1.0


def test_andes_qoe_of_a_late_start_by_hand():
    # one token, expected at 0 s (reader pace 1 token/s, so the expected curve reaches 1 at t = 1 s),
    # delivered at 1 s: behind by the whole ramp, a triangle of area 0.5; the expected area over [0, 1] s is
    # that same 0.5 -> QoE 0.
    assert andes_qoe(np.array([1_000 * MS]), np.array([1]), 0, 1) == pytest.approx(0.0, abs=1e-12)


def test_a_stall_lowers_andes_qoe_and_bursts_do_not_make_up_for_it():
    steady, tokens = one_token_chunks([100] * 39, ttft_ms=200)
    stalled, _ = one_token_chunks([100] * 9 + [2000] + [0] * 29, ttft_ms=200)  # then everything at once
    q_steady = andes_qoe(steady, tokens, 300 * MS, 10)
    q_stalled = andes_qoe(stalled, tokens, 300 * MS, 10)
    assert q_steady == 1.0 and 0.5 < q_stalled < 0.95


def test_no_tokens_no_index():
    empty = np.array([], dtype=np.int64)
    assert fluidity_index(empty, empty, 1, 1) is None and andes_qoe(empty, empty, 1, 1) is None


def fluidity_token_by_token(offsets_us, tokens, first_deadline_us, token_deadline_us):
    """Etalon's definition as written: each token's deadline, slack carried, a miss per deadline a gap spans."""
    missed = total = 0
    slack = previous = 0.0
    for arrival in np.repeat(offsets_us, tokens).tolist():
        budget = first_deadline_us if total == 0 else token_deadline_us
        taken = arrival - previous
        if taken <= budget + slack:
            slack += budget - taken
            total += 1
        else:
            misses = int((taken - slack - budget) // token_deadline_us) + 1
            missed, total, slack = missed + misses, total + misses, 0.0
        previous = arrival
    return 1.0 - missed / total if total else None


def andes_by_breakpoints(offsets_us, tokens, expected_ttft_us, reading_tokens_per_s):
    """Andes' QoE integrated piece by piece: between consecutive breakpoints (a token shown, the ramp reaching a
    whole token) both curves are linear, so the trapezoid rule is exact."""
    arrivals = np.repeat(np.asarray(offsets_us, dtype=np.float64), tokens)
    n, pace = arrivals.size, 1e6 / reading_tokens_per_s
    shown = np.maximum.accumulate(arrivals - np.arange(n) * pace) + np.arange(n) * pace
    ramp_end = expected_ttft_us + n * pace
    end = max(float(shown[-1]), ramp_end)
    points = np.unique(np.clip(np.concatenate(([0.0, end], shown, expected_ttft_us + np.arange(n + 1) * pace)), 0, end))
    left, right = points[:-1], points[1:]
    expected = (np.clip((left - expected_ttft_us) / pace, 0, n) + np.clip((right - expected_ttft_us) / pace, 0, n)) / 2
    behind = np.maximum(expected - np.searchsorted(shown, left, side="right"), 0.0) * (right - left)
    return 1.0 - behind.sum() / (n * n * pace / 2 + n * (end - ramp_end))


@pytest.mark.parametrize("seed", range(20))
def test_the_indices_agree_with_their_definitions_on_random_streams(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(1, 300))
    gaps = rng.lognormal(np.log(40 * MS), 1.0, size).astype(np.int64)
    gaps[rng.random(size) < 0.05] = 0  # chunks arriving together
    offsets = np.cumsum(gaps) + int(rng.integers(0, 2_000 * MS))
    tokens = rng.choice([0, 1, 1, 2, 5], size=size)
    tokens[0] = 1
    first, token = float(rng.integers(100, 1_500) * MS), float(rng.integers(10, 150) * MS)
    assert fluidity_index(offsets, tokens, first, token) == pytest.approx(
        fluidity_token_by_token(offsets, tokens, first, token), abs=1e-12
    )
    ttft, rate = float(rng.integers(0, 1_500) * MS), float(rng.uniform(2, 40))
    assert andes_qoe(offsets, tokens, ttft, rate) == pytest.approx(
        andes_by_breakpoints(offsets, tokens, ttft, rate), abs=1e-9
    )


@pytest.mark.parametrize("seed", range(5))
def test_each_row_of_a_stream_shown_several_ways_gets_its_own_indices(seed):
    rng = np.random.default_rng(seed)
    size = int(rng.integers(20, 200))
    offsets = np.cumsum(rng.lognormal(np.log(40 * MS), 1.0, size).astype(np.int64)) + 300 * MS
    tokens = rng.choice([0, 1, 1, 2], size=size)
    tokens[0] = 1
    stalled = offsets + np.where(np.arange(size) >= size // 2, 2_000 * MS, 0)
    rows = np.vstack((offsets, stalled, offsets + 250 * MS))
    fluidity = fluidity_indices(rows, tokens, 500 * MS, 20 * MS)
    andes = andes_qoes(rows, tokens, 500 * MS, 100.0)
    assert fluidity is not None and andes is not None
    for row, fluid, qoe in zip(rows, fluidity, andes, strict=True):
        assert fluid == pytest.approx(fluidity_token_by_token(row, tokens, 500 * MS, 20 * MS), abs=1e-12)
        assert qoe == pytest.approx(andes_by_breakpoints(row, tokens, 500 * MS, 100.0), abs=1e-9)
    assert fluidity[1] < fluidity[0] and andes[1] < andes[0]  # the rows differ: each was measured on its own
