"""The smoothing counterfactual on streams worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from streamscope_ingest.analysis.attribution import StallRules, Timeline
from streamscope_ingest.analysis.quality import andes_qoe
from streamscope_ingest.analysis.smoothing import Buffer, Targets, reveal_times, smooth, smooth_each

MS = 1000
TIGHT = Targets(
    first_deadline_us=300 * MS, token_deadline_us=50 * MS, expected_ttft_us=300 * MS, reading_tokens_per_s=20
)
# one token per chunk: TTFT 200 ms, four 50 ms gaps, a 500 ms freeze, two 50 ms gaps
ARRIVALS_MS = [200, 250, 300, 350, 400, 900, 950, 1000]


def stream(arrivals_ms: list[float]) -> tuple[Timeline, np.ndarray]:
    offsets = np.array([a * MS for a in arrivals_ms], dtype=np.int64)
    ones = np.ones(offsets.size, dtype=np.int64)
    return Timeline(1_000_000_000, offsets, ones * 5), ones


def test_a_deep_enough_buffer_hides_the_freeze_for_a_later_first_chunk():
    timeline, tokens = stream(ARRIVALS_MS)
    smoothed = smooth(timeline, tokens, Buffer(500), StallRules(), TIGHT)
    assert smoothed is not None
    # paced at the stream's median gap (50 ms) from 700 ms: 700 750 800 850 900, then 950 (the chunk that
    # arrived at 900 waits its turn), 1000, 1050: no gap over 50 ms, the last chunk 50 ms later
    assert np.array_equal(reveal_times(timeline.offsets_us, 500 * MS, 50 * MS) / MS, np.arange(700, 1051, 50))
    assert smoothed.rate_ms == 50
    assert (smoothed.added_ttft_us, smoothed.added_end_us) == (500 * MS, 50 * MS)
    assert (smoothed.stalls_before, smoothed.stalls_after) == (1, 0)
    assert (smoothed.longest_gap_before_us, smoothed.longest_gap_after_us) == (500 * MS, 50 * MS)
    # fluidity with a 300 ms first deadline and 50 ms per token: before, 100 ms of slack at the first token, the
    # freeze late by 500 - 100 - 50 = 350 ms: 8 misses of 15; after, the first token late by 400 ms: 9 of 16,
    # every later one on time. Against deadlines this tight the buffer costs more than it hides.
    assert smoothed.fluidity_before == pytest.approx(1 - 8 / 15)
    assert smoothed.fluidity_after == pytest.approx(1 - 9 / 16)
    revealed = np.arange(700, 1051, 50) * MS
    assert smoothed.andes_after == pytest.approx(andes_qoe(revealed, tokens, 300 * MS, 20))


def test_a_shallow_buffer_only_shortens_the_freeze():
    timeline, tokens = stream(ARRIVALS_MS)
    smoothed = smooth(timeline, tokens, Buffer(250), StallRules(), TIGHT)
    assert smoothed is not None
    # 450 500 550 600 650, then the buffer is dry until 900: a 250 ms gap, still three median gaps and more
    assert (smoothed.stalls_before, smoothed.stalls_after) == (1, 1)
    assert smoothed.longest_gap_after_us == 250 * MS
    assert smoothed.added_end_us == 0


def test_a_pace_slower_than_the_stream_delays_its_end():
    timeline, tokens = stream(ARRIVALS_MS)
    smoothed = smooth(timeline, tokens, Buffer(0, 100), StallRules(), TIGHT)
    assert smoothed is not None
    # 200 300 400 500 600, 900 (arrived after its turn), 1000 1100
    assert np.array_equal(
        reveal_times(timeline.offsets_us, 0, 100 * MS) / MS, [200, 300, 400, 500, 600, 900, 1000, 1100]
    )
    assert (smoothed.rate_ms, smoothed.added_ttft_us, smoothed.added_end_us) == (100, 0, 100 * MS)
    assert smoothed.longest_gap_after_us == 300 * MS


def test_a_browser_is_smoothed_from_what_it_painted():
    offsets = np.array([200, 250, 300], dtype=np.int64) * MS
    painted = Timeline(0, offsets, np.ones(3, dtype=np.int64), paint_delay_us=np.array([0, 0, 400 * MS]))
    smoothed = smooth(painted, np.ones(3, dtype=np.int64), Buffer(0, 50), StallRules(), TIGHT)
    assert smoothed is not None
    assert smoothed.longest_gap_before_us == 450 * MS  # shown at 200, 250, 700


def test_a_stream_without_two_content_chunks_has_nothing_to_smooth():
    timeline = Timeline(0, np.array([100, 200]), np.array([0, 7]))
    assert smooth(timeline, np.array([0, 2]), Buffer(250), StallRules(), TIGHT) is None


def test_several_buffers_at_once_are_each_buffer_alone():
    timeline, tokens = stream(ARRIVALS_MS)
    buffers = [Buffer(100), Buffer(500), Buffer(250, 80), Buffer(0, 400)]
    together = smooth_each(timeline, tokens, buffers, StallRules(), TIGHT)
    assert together == [smooth(timeline, tokens, buffer, StallRules(), TIGHT) for buffer in buffers]
    assert len({(s.added_end_us, s.stalls_after, s.andes_after) for s in together}) == len(buffers)


def test_no_buffers_nothing_to_report():
    timeline, tokens = stream(ARRIVALS_MS)
    assert smooth_each(timeline, tokens, (), StallRules(), TIGHT) == []


@given(
    st.lists(st.integers(0, 2_000_000), min_size=1, max_size=60),
    st.integers(0, 1_000_000),
    st.integers(1, 200_000),
)
def test_the_closed_form_is_the_buffer_step_by_step(gaps: list[int], depth: int, rate: int):
    arrivals = np.cumsum(gaps)
    expected = [arrivals[0] + depth]
    for t in arrivals[1:]:
        expected.append(max(t, expected[-1] + rate))
    assert np.allclose(reveal_times(arrivals, depth, rate), expected)


@pytest.mark.parametrize(
    ("text", "buffer"), [("250", Buffer(250)), ("250,33", Buffer(250, 33)), (" 0 , 40 ", Buffer(0, 40))]
)
def test_a_buffer_is_written_depth_then_rate(text: str, buffer: Buffer):
    assert Buffer.parse(text) == buffer


@pytest.mark.parametrize("text", ["", "fast", "250,", "1,2,3", "-5", "250,0"])
def test_a_buffer_that_cannot_be_is_refused_with_the_reason(text: str):
    with pytest.raises(ValueError, match=r"DEPTH_MS|numbers|depth must be"):
        Buffer.parse(text)
