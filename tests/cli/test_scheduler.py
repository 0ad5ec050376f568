"""Scheduler invariants over random workloads."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from streamscope_cli.engine.scheduler import Scheduler, SchedulerConfig, Sequence, SpecDecodeConfig

request = st.tuples(st.integers(1, 400), st.integers(1, 120), st.sampled_from([None, "a", "b"]), st.booleans())


@settings(max_examples=60, deadline=None)
@given(
    requests=st.lists(request, min_size=1, max_size=25),
    num_blocks=st.integers(40, 200),
    chunked=st.booleans(),
    spec=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_blocks_stay_in_budget_and_every_request_gets_exactly_its_tokens(requests, num_blocks, chunked, spec, seed):
    config = SchedulerConfig(
        block_size=16,
        num_blocks=num_blocks,
        max_running=8,
        max_step_tokens=512,
        chunked_prefill=chunked,
        spec_decode=SpecDecodeConfig() if spec else None,
    )
    scheduler = Scheduler(config, random.Random(seed))
    wanted = {}
    for i, (prompt, output, prefix, collapse) in enumerate(requests):
        sequence = Sequence(
            f"r{i}",
            prompt,
            output,
            prefix_key=prefix,
            prefix_tokens=prompt // 2,
            spec_collapse=(0, output) if collapse else None,
        )
        try:
            scheduler.add(sequence)
        except ValueError:
            continue  # can never fit: refused up front
        wanted[sequence.request_id] = output
    emitted: dict[str, int] = {}
    preempted: set[str] = set()
    for _ in range(20_000):
        if not scheduler.has_work:
            break
        step = scheduler.step()
        assert 0 <= scheduler.free_blocks <= num_blocks
        assert scheduler.used_blocks == sum(s.blocks for s in scheduler.running)
        assert len(scheduler.running) <= config.max_running
        assert step.scheduled_tokens <= config.max_step_tokens or not chunked
        assert step.duration_s > 0
        preempted.update(step.preempted)
        for request_id, tokens in step.emitted.items():
            assert tokens >= 1
            emitted[request_id] = emitted.get(request_id, 0) + tokens
    assert not scheduler.has_work, "the workload must drain"
    assert emitted == wanted  # preempted sequences resumed and finished too
    assert scheduler.free_blocks == num_blocks
    assert preempted <= set(wanted)


def test_a_large_prefill_lengthens_the_step_of_everyone_decoding():
    scheduler = Scheduler(SchedulerConfig(chunked_prefill=False, max_step_tokens=8192))
    for i in range(4):
        scheduler.add(Sequence(f"d{i}", 32, 500))
    while scheduler.step().prefill_tokens:
        pass
    decode_only = scheduler.step()
    scheduler.add(Sequence("big", 8000, 10))
    mixed = scheduler.step()
    assert set(mixed.decoded) == {f"d{i}" for i in range(4)}
    assert mixed.prefill_tokens == 8000
    assert mixed.duration_s - decode_only.duration_s == pytest.approx(mixed.prefill_s)
    assert mixed.prefill_s == pytest.approx(8000 * SchedulerConfig().prefill_ms_per_token / 1000)


def test_chunked_prefill_spreads_a_prompt_over_steps_within_the_budget():
    scheduler = Scheduler(SchedulerConfig(chunked_prefill=True, max_step_tokens=1000))
    scheduler.add(Sequence("big", 3500, 5))
    chunks = []
    while not (step := scheduler.step()).emitted:
        chunks.append(step.prefill_tokens)
    assert chunks == [1000, 1000, 1000] and step.prefill_tokens == 500


def test_prefix_cache_skips_the_shared_prefix_once_computed():
    scheduler = Scheduler(SchedulerConfig(block_size=16))
    scheduler.add(Sequence("first", 500, 2, prefix_key="sys", prefix_tokens=400))
    while scheduler.has_work:
        first = scheduler.step()
        if first.prefill_tokens:
            assert first.prefill_tokens == 500 and first.prefix_hits == 0
    scheduler.add(Sequence("second", 500, 2, prefix_key="sys", prefix_tokens=400))
    second = scheduler.step()
    assert second.prefix_hits == 400 and second.prefill_tokens == 100


def test_collapsed_acceptance_yields_fewer_tokens_per_step():
    def tokens_per_step(collapse):
        scheduler = Scheduler(SchedulerConfig(spec_decode=SpecDecodeConfig(draft_tokens=4)), random.Random(3))
        scheduler.add(Sequence("r", 16, 2000, spec_collapse=collapse))
        steps = [scheduler.step() for _ in range(200)]
        decode = [s for s in steps if s.decoded]
        return sum(s.emitted["r"] for s in decode) / len(decode), sum(bool(s.collapsed) for s in decode)

    normal, collapsed_steps = tokens_per_step(None)
    slow, all_collapsed = tokens_per_step((0, 10_000))
    assert collapsed_steps == 0 and all_collapsed > 0
    assert normal > 2.5 and slow < 1.2


def test_preemption_under_kv_pressure_recomputes_and_resumes():
    scheduler = Scheduler(SchedulerConfig(block_size=16, num_blocks=30, max_running=4))
    for i in range(3):
        scheduler.add(Sequence(f"r{i}", 100, 200))
    preempted, recomputed = [], 0
    while scheduler.has_work:
        step = scheduler.step()
        preempted += step.preempted
        if preempted and step.prefill_tokens:
            recomputed += step.prefill_tokens
    assert preempted, "30 blocks cannot hold three 300-token sequences"
    assert recomputed > 100  # prompt and already generated tokens are prefilled again


def test_abort_frees_blocks_and_forgets_the_request():
    scheduler = Scheduler(SchedulerConfig(num_blocks=100))
    scheduler.add(Sequence("r", 200, 50))
    scheduler.step()
    assert scheduler.free_blocks < 100
    scheduler.abort("r")
    assert scheduler.free_blocks == 100 and not scheduler.has_work


def test_a_request_waiting_for_kv_blocks_stays_waiting_for_its_first_admission():
    """A request whose prompt finds too few free blocks waits, step after step, as never admitted (its wait is
    the queue's: ``left_waiting``), and counts as admitted once, when it is: a cached prefix it looked up does
    not make it look computed while it waits."""
    scheduler = Scheduler(SchedulerConfig(block_size=16, num_blocks=100, max_step_tokens=4096))
    scheduler.add(Sequence("warm", 320, 1, prefix_key="sys", prefix_tokens=320))
    while scheduler.has_work:
        scheduler.step()
    scheduler.add(Sequence("holder", 1000, 40))
    scheduler.step()
    scheduler.add(Sequence("late", 1000, 2, prefix_key="sys", prefix_tokens=320))
    waiting_steps, admitted = 0, []
    while scheduler.has_work:
        step = scheduler.step()
        waiting_steps += "late" in step.left_waiting
        admitted += step.admitted
        if "late" in step.admitted:
            assert step.new_cached_tokens == 320 and step.new_prompt_tokens == 1000
    assert admitted == ["late"]
    assert waiting_steps >= 38  # every step until the holder finished and freed its blocks
