"""The clients' host load and the loop's watchdog, for real on a running loop: what each records as ground truth.

Bounds are wide on purpose: beside CPU burners on two cores the loop runs late anyway, so the tests check where a
window lies against what the test itself saw, never how long something took.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time

from streamscope_cli.workload.ground_truth import GroundTruth, MemorySink
from streamscope_cli.workload.host_load import HostActivity, block_times, busy_wait, uncovered
from streamscope_cli.workload.scenario import HostLoad

MS = 1_000_000  # ns


def by_source(records: list[GroundTruth], source: str) -> list[GroundTruth]:
    return [r for r in records if r.detail["source"] == source]


def host_level(record: GroundTruth) -> bool:
    return record.cause == "client_host" and record.node == "sim-client" and record.trace_id == ""


def test_an_injected_block_is_recorded_with_the_window_the_loop_did_not_run():
    sink = MemorySink()
    ticks: list[int] = []

    async def tick(stop: asyncio.Event) -> None:  # the test's own view of when the loop ran
        while not stop.is_set():
            ticks.append(time.time_ns())
            await asyncio.sleep(0.005)

    async def run() -> None:
        load = HostLoad("client", period_s=3600, busy_ms=300, start_s=0.2)
        async with HostActivity([load], seed=7, sink=sink, node="sim-client"):
            stop = asyncio.Event()
            ticker = asyncio.create_task(tick(stop))
            while not by_source(sink.snapshot(), "injected"):
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            stop.set()
            await ticker

    asyncio.run(asyncio.wait_for(run(), timeout=60))
    (block,) = by_source(sink.snapshot(), "injected")
    assert host_level(block) and block.magnitude == 0.3
    assert block.detail == {"target": "client", "source": "injected"}
    assert block.end_ns - block.start_ns >= 300 * MS
    before = max(t for t in ticks if t <= block.start_ns)
    after = min(t for t in ticks if t >= block.end_ns)
    assert not [t for t in ticks if block.start_ns < t < block.end_ns], "the loop ran no tick inside the block"
    assert before < block.start_ns < block.end_ns < after
    for late in by_source(sink.snapshot(), "watchdog"):  # the watchdog does not record the injected block again
        assert late.end_ns <= block.start_ns or late.start_ns >= block.end_ns


def test_the_watchdog_records_a_block_it_did_not_inject():
    sink = MemorySink()

    async def run() -> tuple[int, int]:
        async with HostActivity([], seed=7, sink=sink, node="sim-client"):
            await asyncio.sleep(0.1)
            start = time.time_ns()
            busy_wait(0.4)  # the application blocks its own loop
            end = time.time_ns()
            await asyncio.sleep(0.1)
        return start, end

    start, end = asyncio.run(asyncio.wait_for(run(), timeout=60))
    records = sink.snapshot()
    assert all(host_level(r) for r in records) and not by_source(records, "injected")
    (late,) = [r for r in by_source(records, "watchdog") if r.start_ns < end and r.end_ns > start]
    # it was due at most one heartbeat after the block began, and woke after the block ended
    assert late.start_ns <= start + 20 * MS and late.end_ns >= end - 5 * MS
    assert late.magnitude * 1e9 == late.end_ns - late.start_ns
    assert late.detail == {"target": "client", "source": "watchdog"}


def test_without_a_sink_the_loads_still_run():
    async def run() -> float:
        started = time.monotonic()
        async with HostActivity([HostLoad("client", 3600, 250, start_s=0.0)], seed=1, sink=None, node="c"):
            await asyncio.sleep(0.05)
        return time.monotonic() - started

    assert asyncio.run(run()) >= 0.25


def test_machine_load_spins_child_processes_for_the_run_and_stops_them():
    load = HostLoad("machine", period_s=0.5, busy_ms=500, processes=2)
    before = os.times()

    async def run() -> list[int | None]:
        activity = HostActivity([load], seed=3, sink=MemorySink(), node="sim-client")
        async with activity:
            await asyncio.sleep(1.5)
            alive = [burner.poll() for burner in activity._burners]
        return alive

    assert asyncio.run(run()) == [None, None]
    after = os.times()
    spent = (after.children_user + after.children_system) - (before.children_user + before.children_system)
    assert spent >= 0.3, f"two always-on burners spent {spent:.2f} s of CPU in 1.5 s"


def test_block_times_come_from_the_seed_and_keep_blocks_apart():
    load = HostLoad("client", period_s=2.2, busy_ms=350, jitter=0.6)
    times = list(itertools.islice(block_times(load, 5, 0), 200))
    assert times == list(itertools.islice(block_times(load, 5, 0), 200))
    assert times != list(itertools.islice(block_times(load, 6, 0), 200))
    assert 0 <= times[0] < 2.2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.35 and abs(sum(gaps) / len(gaps) - 2.2) < 0.01
    assert list(itertools.islice(block_times(HostLoad("client", 3, 450, start_s=1.5), 5, 0), 3)) == [1.5, 4.5, 7.5]


def test_uncovered_leaves_out_what_the_windows_cover():
    assert uncovered(0, 100, []) == [(0, 100)]
    assert uncovered(0, 100, [(10, 20), (15, 30), (90, 200)]) == [(0, 10), (30, 90)]
    assert uncovered(0, 100, [(-5, 100)]) == []
