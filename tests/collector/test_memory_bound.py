"""The collector's memory under many senders of large requests: bounded by its configuration, not the load.

Request bodies and their rows are held within the in-flight budget; parsing and decoding hold ``EXPANSION``
times a body while they run, within as much again, or one request alone when it needs more; the writer holds
one insert. A sender past that is told to come back (429), and the collector's resident memory stays below
the sum, however many senders there are.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from benchmarks.ingest import CollectorProcess
from streamscope.errors import Overloaded
from streamscope_collector.admission import EXPANSION, ExpansionGate
from streamscope_ingest.durability.group_commit import GroupCommitConfig
from tests.support import PROTOBUF, metric, stream_span, trace_request, wait_until

MIB = 1 << 20
BUDGET_MIB = 128
SENDERS = 12
INSERT_WORKING_SET = 4 * GroupCommitConfig().max_insert_bytes
"""The engine's memory for one insert of spooled segments: Arrow tables, the native blocks made of them, and
the parts written; measured at about three times the segments' size."""


def large_requests(count: int, chunks: int = 10_000, spans: int = 100) -> list[bytes]:
    """Requests of about 18 MiB of stream spans each (long timelines, in OpenTelemetry's own form of an int array),
    each with spans of its own."""
    offsets = list(range(chunks))
    request = trace_request(
        [stream_span(1, s + 1, side="client", offsets_ms=offsets, tokens=[1] * chunks) for s in range(spans)]
    )
    bodies = []
    for number in range(count):
        for span in request.resource_spans[0].scope_spans[0].spans:
            span.trace_id = number.to_bytes(8, "big") + span.trace_id[8:]
        bodies.append(request.SerializeToString())
    return bodies


def test_many_senders_of_large_requests_stay_within_the_memory_bound(tmp_path):
    collector = CollectorProcess(tmp_path / "store", "--max-inflight-mib", str(BUDGET_MIB))
    first, *bodies = large_requests(1 + SENDERS)
    try:

        def post(body: bytes) -> int:
            return httpx.post(f"{collector.url}/v1/traces", content=body, headers=PROTOBUF, timeout=600).status_code

        assert post(first) == 200  # the engine's caches and first parts: the baseline's, not the load's
        wait_until(lambda: collector.scalar("SELECT count() FROM streams") == 100, "the first request stored")
        base = collector.rss_bytes()
        peak, done = [base], threading.Event()

        def sample() -> None:
            while not done.is_set():
                peak[0] = max(peak[0], collector.rss_bytes())
                time.sleep(0.02)

        sampler = threading.Thread(target=sample)
        sampler.start()
        with ThreadPoolExecutor(SENDERS) as senders:
            answers = list(senders.map(post, bodies))
        done.set()
        sampler.join()
        accepted = answers.count(200)
        assert set(answers) <= {200, 429}, answers
        wait_until(
            lambda: collector.scalar("SELECT count() FROM streams") == 100 * (1 + accepted),
            "every acknowledged request stored",
            timeout_s=300,
        )
    finally:
        collector.stop()
    budget = BUDGET_MIB * MIB
    bound = budget + max(budget, EXPANSION * len(first)) + INSERT_WORKING_SET
    grown = peak[0] - base
    print(
        f"{accepted} of {SENDERS} accepted; RSS {base / MIB:.0f} MiB, then +{grown / MIB:.0f} (bound {bound / MIB:.0f})"
    )
    assert accepted >= 1
    assert grown <= bound, f"RSS grew {grown / MIB:.0f} MiB, past the bound of {bound / MIB:.0f} MiB"


def test_a_request_needing_more_than_the_whole_parsing_budget_parses_alone_in_its_turn():
    gate = ExpansionGate(max_bytes=100 * EXPANSION, slots=2, wait_s=0.2)
    with gate.parsing(10), pytest.raises(Overloaded, match="being decoded"), gate.parsing(1000):
        pass  # another request is being parsed: no turn within wait_s
    with gate.parsing(1000):  # alone: it takes all of the budget, and no more
        assert gate.used == gate.max_bytes
        with pytest.raises(Overloaded), gate.parsing(1):
            pass
    assert gate.used == 0


def test_requests_take_their_turns_in_the_order_they_came_so_a_large_one_is_not_starved():
    gate = ExpansionGate(max_bytes=100 * EXPANSION, slots=2, wait_s=5)
    turns: list[int] = []
    release_large, release_small = threading.Event(), threading.Event()
    with gate.parsing(50):  # half the budget
        large = threading.Thread(target=queue_one, args=(gate, 100, turns, release_large), daemon=True)
        large.start()
        wait_until(lambda: gate.waiting == 1, "the large request waiting", 10)
        small = threading.Thread(target=queue_one, args=(gate, 10, turns, release_small), daemon=True)
        small.start()
        wait_until(lambda: gate.waiting == 2, "both waiting", 10)
        time.sleep(0.1)
        assert turns == []  # the small one fits beside the held turn, but the large one came first
    wait_until(lambda: turns == [100], "the large request's turn", 10)
    release_large.set()
    wait_until(lambda: turns == [100, 10], "the small request's turn", 10)
    release_small.set()
    for thread in (large, small):
        thread.join(5)
    assert gate.used == 0 and gate.waiting == 0


def test_a_request_that_gives_up_waiting_lets_the_one_behind_it_go_on():
    gate = ExpansionGate(max_bytes=100 * EXPANSION, slots=2, wait_s=0.3)
    turns: list[int] = []
    release = threading.Event()
    refused: list[BaseException] = []
    with gate.parsing(50):
        large = threading.Thread(target=lambda: refused.extend(overloaded(gate, 100)), daemon=True)
        large.start()
        wait_until(lambda: gate.waiting == 1, "the large request waiting", 10)
        gate.wait_s = 5  # the one behind waits longer than the large one does
        small = threading.Thread(target=queue_one, args=(gate, 10, turns, release), daemon=True)
        small.start()
        # once the large one gave up, not after its own wait
        wait_until(lambda: turns == [10], "the small request's turn", 3)
        assert len(refused) == 1 and isinstance(refused[0], Overloaded)
        release.set()
    for thread in (large, small):
        thread.join(5)
    assert gate.used == 0 and gate.waiting == 0


def queue_one(gate: ExpansionGate, inflated_bytes: int, turns: list[int], release: threading.Event) -> None:
    with gate.parsing(inflated_bytes):
        turns.append(inflated_bytes)
        release.wait(5)


def overloaded(gate: ExpansionGate, inflated_bytes: int) -> list[BaseException]:
    try:
        with gate.parsing(inflated_bytes):
            return []
    except Overloaded as refusal:
        return [refusal]


def test_the_memory_counted_for_parsing_is_a_gauge(collector):
    with collector.admission.expansion.parsing(1000):
        assert metric(collector.http_url, "streamscope_collector_parsing_bytes") == EXPANSION * 1000
    assert metric(collector.http_url, "streamscope_collector_parsing_bytes") == 0
