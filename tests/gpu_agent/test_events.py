"""Event derivation on synthetic series whose events are known."""

from __future__ import annotations

import pytest

from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.events import EventDeriver, Thresholds
from streamscope_gpu_agent.samples import Sample, XidEvent

SECOND = 1_000_000_000


def series(metric: str, values: list[float], source: str = "engine", **identity) -> list[list[Sample]]:
    """One scrape per second, starting at t = 1 s."""
    return [[Sample((i + 1) * SECOND, source, metric, v, **identity)] for i, v in enumerate(values)]


def run(batches: list[list[Sample]], thresholds: Thresholds | None = None):
    deriver = EventDeriver(thresholds or Thresholds())
    events, previous = [], 0
    for batch in batches:
        events += deriver.observe(batch, previous)
        previous = batch[0].time_ns
    return events, deriver


def test_preemptions_become_events_over_the_interval_they_happened_in():
    events, _ = run(series(m.ENGINE_PREEMPTIONS, [0, 0, 3, 0, 1], engine="vllm"))
    assert [(e.kind, e.start_ns, e.end_ns, e.magnitude, e.engine) for e in events] == [
        ("preemption", 2 * SECOND, 3 * SECOND, 3, "vllm"),
        ("preemption", 4 * SECOND, 5 * SECOND, 1, "vllm"),
    ]


def test_kv_high_water_has_hysteresis_and_reports_its_peak():
    # crosses 0.9 at t=3, hovers around it without reaching 0.8 until t=7
    events, deriver = run(series(m.ENGINE_KV_USAGE, [0.5, 0.85, 0.91, 0.88, 0.97, 0.89, 0.75, 0.95]))
    assert [(e.kind, e.start_ns, e.end_ns, e.magnitude) for e in events] == [
        ("kv_high_water", 3 * SECOND, 7 * SECOND, 0.97)
    ]
    (still_open,) = deriver.close_all()
    assert (still_open.start_ns, still_open.end_ns, still_open.magnitude) == (8 * SECOND, 8 * SECOND, 0.95)


def test_prefill_burst_from_prompt_tokens_or_step_size_once_per_interval():
    batches = series(m.ENGINE_PROMPT_TOKENS, [300, 9000, 200])
    batches[1].append(Sample(2 * SECOND, "engine", m.ENGINE_STEP_TOKENS_MAX, 16384))
    events, _ = run(batches)
    assert [(e.kind, e.start_ns, e.end_ns, e.magnitude) for e in events] == [
        ("prefill_burst", 1 * SECOND, 2 * SECOND, 16384)
    ]


def test_only_computed_prompt_tokens_make_a_burst_where_the_engine_tells_them_from_cached_ones():
    batches = series(m.ENGINE_PROMPT_TOKENS, [6000, 6000, 300])
    batches[0].append(Sample(1 * SECOND, "engine", m.ENGINE_PROMPT_TOKENS_COMPUTED, 200))  # 5,800 cache hits
    batches[2].append(Sample(3 * SECOND, "engine", m.ENGINE_PROMPT_TOKENS_COMPUTED, 5000))  # recomputed after all
    events, _ = run(batches)
    # the second interval's engine does not say (TGI): its prompt tokens are all there is to go by
    assert [(e.kind, e.start_ns, e.magnitude) for e in events] == [
        ("prefill_burst", 1 * SECOND, 6000),
        ("prefill_burst", 2 * SECOND, 5000),
    ]


def test_spec_acceptance_drop_opens_low_and_closes_on_recovery():
    events, _ = run(series(m.ENGINE_SPEC_ACCEPTANCE, [0.8, 0.35, 0.2, 0.5, 0.6, 0.3]))
    assert [(e.kind, e.start_ns, e.end_ns, e.magnitude) for e in events] == [
        ("spec_acceptance_drop", 2 * SECOND, 5 * SECOND, 0.2)
    ]


def test_queue_spike_and_throttle():
    queue, _ = run(series(m.ENGINE_REQUESTS_WAITING, [0, 3, 9, 14, 4, 1]))
    assert [(e.kind, e.start_ns, e.end_ns, e.magnitude) for e in queue] == [("queue_spike", 3 * SECOND, 6 * SECOND, 14)]
    throttle, _ = run(series(m.GPU_CLOCK_EVENT_REASONS, [0, 4, 4, 0], source="gpu", gpu_uuid="GPU-1"))
    assert [(e.kind, e.start_ns, e.end_ns, e.gpu_uuid) for e in throttle] == [
        ("throttle", 2 * SECOND, 4 * SECOND, "GPU-1")
    ]


def test_a_lost_gpu_is_an_event_from_when_it_was_lost_until_it_answered():
    events, _ = run(series(m.GPU_LOST, [1, 1, 0], source="gpu", gpu_uuid="GPU-a"))
    assert [(e.kind, e.gpu_uuid, e.start_ns, e.end_ns) for e in events] == [("gpu_lost", "GPU-a", SECOND, 3 * SECOND)]


def test_levels_are_tracked_per_engine_and_per_gpu():
    batches = [
        [
            Sample(SECOND, "engine", m.ENGINE_KV_USAGE, 0.95, engine="vllm/0"),
            Sample(SECOND, "engine", m.ENGINE_KV_USAGE, 0.10, engine="vllm/1"),
        ],
        [
            Sample(2 * SECOND, "engine", m.ENGINE_KV_USAGE, 0.10, engine="vllm/0"),
            Sample(2 * SECOND, "engine", m.ENGINE_KV_USAGE, 0.10, engine="vllm/1"),
        ],
    ]
    events, _ = run(batches)
    assert [(e.kind, e.engine) for e in events] == [("kv_high_water", "vllm/0")]


def test_quiet_series_make_no_events():
    batches = [
        [
            Sample(t * SECOND, "engine", m.ENGINE_KV_USAGE, 0.4),
            Sample(t * SECOND, "engine", m.ENGINE_PREEMPTIONS, 0),
            Sample(t * SECOND, "engine", m.ENGINE_REQUESTS_WAITING, 1),
            Sample(t * SECOND, "engine", m.ENGINE_PROMPT_TOKENS, 800),
        ]
        for t in range(1, 20)
    ]
    events, deriver = run(batches)
    assert events == [] and deriver.close_all() == []


def test_restart_and_xid_are_instant_events():
    deriver = EventDeriver()
    assert deriver.restarted("sglang", 5).kind == "engine_restart"
    xid = deriver.xid(XidEvent(7, "GPU-2", 2, 79))
    assert (xid.kind, xid.start_ns, xid.end_ns, xid.xid, xid.gpu_uuid) == ("xid", 7, 7, 79, "GPU-2")


def test_thresholds_must_leave_room_for_hysteresis():
    with pytest.raises(ValueError, match="calm side"):
        Thresholds(kv_high=0.8, kv_low=0.9)
