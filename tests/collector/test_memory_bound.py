"""The collector's memory under many senders of large requests: bounded by its configuration, not the load.

Request bodies and their rows are held within the in-flight budget; parsing and decoding hold ``EXPANSION``
times a body while they run, within as much again, or one request alone when it needs more; the store (the
writer's insert, the embedded engine's inserts, merges and caches) holds its working set, and the attribution job
its pass. A sender past that is told to come back (429), and the collector's resident memory stays below the sum
over what it held once started, or below the ceiling it is given, however many senders there are
(docs/operations.md, "Pressure and limits").
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from unittest import mock

import httpx
import pytest

from benchmarks.ingest import CollectorProcess
from streamscope import env
from streamscope.errors import Overloaded
from streamscope_collector.admission import EXPANSION, ExpansionGate, InflightBudget
from streamscope_collector.memory import (
    ATTRIBUTION_BYTES_PER_CHUNK,
    ATTRIBUTION_PASS,
    AttributionInRoom,
    MemoryCeiling,
    memory_bound,
)
from streamscope_ingest.analysis.attribution_job import AttributionJob
from tests.support import PROTOBUF, metric, run, stream_span, trace_request, wait_until

MIB = 1 << 20
BUDGET_MIB = 128
BUDGET = BUDGET_MIB * MIB
SENDERS = 12


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


@contextmanager
def peak_rss(collector: CollectorProcess) -> Iterator[list[int]]:
    """The collector's peak VmRSS while the block runs, sampled every 20 ms from /proc: ``[peak]``."""
    peak, done = [collector.rss_bytes()], threading.Event()

    def sample() -> None:
        while not done.wait(0.02):
            peak[0] = max(peak[0], collector.rss_bytes())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        yield peak
    finally:
        done.set()
        sampler.join()


def bound_over(ready: int, largest_request: int) -> int:
    """The collector's RSS at most, over ``ready`` (what it held once started): docs/operations.md's formula."""
    return ready + memory_bound(BUDGET, max(BUDGET, EXPANSION * largest_request))


def test_many_senders_of_large_requests_stay_within_the_memory_bound(tmp_path):
    collector = CollectorProcess(tmp_path / "store", "--max-inflight-mib", str(BUDGET_MIB))
    first, *bodies = large_requests(1 + SENDERS)
    try:
        ready = collector.rss_bytes()

        def post(body: bytes) -> int:
            return httpx.post(f"{collector.url}/v1/traces", content=body, headers=PROTOBUF, timeout=600).status_code

        with peak_rss(collector) as peak:
            assert post(first) == 200
            wait_until(lambda: collector.scalar("SELECT count() FROM streams") == 100, "the first request stored")
            with ThreadPoolExecutor(SENDERS) as senders:
                answers = list(senders.map(post, bodies))
            accepted = answers.count(200)
            assert set(answers) <= {200, 429}, answers
            wait_until(
                lambda: collector.scalar("SELECT count() FROM streams") == 100 * (1 + accepted),
                "every acknowledged request stored",
                timeout_s=300,
            )
    finally:
        collector.stop()
    bound = bound_over(ready, len(first))
    print(
        f"{accepted} of {SENDERS} taken; RSS {ready / MIB:.0f}, peak {peak[0] / MIB:.0f}, bound {bound / MIB:.0f} MiB"
    )
    assert accepted >= 1
    assert peak[0] <= bound, f"RSS reached {peak[0] / MIB:.0f} MiB, past the bound of {bound / MIB:.0f} MiB"


SPANS = 400
"""Stream spans per request: with 480 to 820 chunks each, in OpenTelemetry's int-array form, 3.6 to 6.0 MB."""
CHUNKS = (820, 740, 820, 650, 560, 820, 480, 740)
PER_SENDER = 4
CEILING_ROOM = 640 * MIB
"""The ceiling given, over the collector's memory once started: below what it reached unbounded under this load
(720 to 950 MiB over it), above what it needs to take requests beside the store's reserve."""
ATTEMPTS = 40
"""Times a sender sends one request before it gives that one up (it was never acknowledged, so is not stored)."""
_ID = bytes.fromhex("9e3779b97f4a7c15")
"""The first half of every trace id in the templates, replaced by the request's number in each copy."""


def packed_requests(count: int) -> dict[int, bytes]:
    """``count`` requests of ``SPANS`` stream spans each, by number: request ``n``'s trace ids start with ``n``."""
    templates = {
        chunks: trace_request(
            [
                stream_span(1, span + 1, side="client", offsets_ms=range(chunks), tokens=[1] * chunks)
                for span in range(SPANS)
            ]
        )
        for chunks in set(CHUNKS)
    }
    for request in templates.values():
        for number, span in enumerate(request.resource_spans[0].scope_spans[0].spans):
            span.trace_id = _ID + number.to_bytes(8, "big")
    bodies = {chunks: request.SerializeToString() for chunks, request in templates.items()}
    sizes = itertools.islice(itertools.cycle(CHUNKS), count)
    return {n: bodies[chunks].replace(_ID, n.to_bytes(8, "big")) for n, chunks in enumerate(sizes, start=1)}


def send_until_taken(url: str, bodies: dict[int, bytes]) -> list[tuple[int, int, str | None]]:
    """Each body sent until it is answered other than 429 or 503, or ``ATTEMPTS`` times: every answer's status, the
    body's number, and its Retry-After. The pause between attempts is shorter than Retry-After, to keep the load on."""
    answers = []
    with httpx.Client(timeout=600) as client:
        for number, body in bodies.items():
            for _ in range(ATTEMPTS):
                response = client.post(f"{url}/v1/traces", content=body, headers=PROTOBUF)
                answers.append((response.status_code, number, response.headers.get("retry-after")))
                if response.status_code not in (429, 503):
                    break
                time.sleep(0.2)
    return answers


def test_twelve_senders_of_packed_requests_keep_the_rss_under_its_ceiling_losing_nothing_acknowledged(
    tmp_path, monkeypatch
):
    """The bodies never fill the in-flight budget: what took the RSS past the ceiling was the store's working set,
    the decode's buffers and the attribution job's pass, and the collector now refuses before its RSS gets there."""
    bodies = packed_requests(SENDERS * PER_SENDER)
    probe = CollectorProcess(tmp_path / "store", "--max-inflight-mib", str(BUDGET_MIB))
    ready = probe.rss_bytes()  # the collector's memory once started, for the ceiling it is given
    probe.stop()
    ceiling = ready + CEILING_ROOM
    monkeypatch.setenv(env.STREAMSCOPE_MAX_MEMORY_MIB, str(ceiling // MIB))
    collector = CollectorProcess(tmp_path / "store", "--max-inflight-mib", str(BUDGET_MIB))
    try:
        with peak_rss(collector) as peak:
            shares = [{n: body for n, body in bodies.items() if n % SENDERS == i} for i in range(SENDERS)]
            with ThreadPoolExecutor(SENDERS) as senders:
                answers = [
                    a for share in senders.map(send_until_taken, [collector.url] * SENDERS, shares) for a in share
                ]
            taken = [number for status, number, _ in answers if status == 200]
            numbers = ", ".join(f"'{number:016x}'" for number in taken) or "''"
            stored_taken = f"SELECT count() FROM streams WHERE substring(trace_id, 1, 16) IN ({numbers})"
            wait_until(
                lambda: collector.scalar(stored_taken) == SPANS * len(taken),
                "every acknowledged request stored",
                timeout_s=300,
            )
            stored = collector.scalar("SELECT count() FROM streams")
    finally:
        collector.stop()
    refusals = [(status, retry_after) for status, _, retry_after in answers if status != 200]
    # a request that needs more than the decode budget is decoded in all of it, and may take the rest beyond
    bound = ceiling + max(0, EXPANSION * max(map(len, bodies.values())) - BUDGET)
    print(
        f"{len(taken)} of {len(bodies)} requests taken, {len(refusals)} refusals; RSS {ready / MIB:.0f} MiB once "
        f"started, ceiling {ceiling / MIB:.0f}, peak {peak[0] / MIB:.0f}, bound {bound / MIB:.0f} MiB"
    )
    assert taken, "no request was taken"
    assert stored == SPANS * len(taken)  # and nothing it refused
    assert all(status in (429, 503) and retry_after for status, retry_after in refusals), set(refusals)
    assert peak[0] <= bound, f"RSS reached {peak[0] / MIB:.0f} MiB, past the bound of {bound / MIB:.0f} MiB"


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


class Resident:
    """A process's resident memory as a test sets it, for a ceiling to read."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __call__(self) -> int:
        return self.size


def test_past_the_ceiling_a_request_is_refused_even_alone_but_its_decoded_rows_are_not():
    resident = Resident(900)
    budget = InflightBudget(max_bytes=1000, memory=MemoryCeiling(1000, reserve=50, resident=resident))
    with budget.reserve() as request:
        request.take(50)
        resident.size += 50  # what it took, read and resident: 950, and 50 kept for the store
        with pytest.raises(Overloaded, match="resident memory"):
            request.take(1)  # no room, though it is alone in the budget
        request.take(200, resident=True)  # rows decoded within the decode's turn: resident already
        resident.size = 800  # memory given back
        request.take(100)
    assert budget.used == 0


def test_a_decode_waits_its_turn_until_the_memory_it_needs_is_free_or_is_refused_for_memory():
    resident = Resident(600)
    memory = MemoryCeiling(1000, reserve=100, resident=resident)
    gate = ExpansionGate(max_bytes=100 * EXPANSION, wait_s=0.3, memory=memory)
    with pytest.raises(Overloaded, match="resident memory"), gate.parsing(15):  # needs 360; 300 free
        pass
    gate.wait_s = 10
    turns: list[int] = []
    release = threading.Event()
    waiting = threading.Thread(target=queue_one, args=(gate, 15, turns, release), daemon=True)
    waiting.start()
    wait_until(lambda: gate.waiting == 1, "the request waiting", 10)
    time.sleep(0.2)
    assert turns == []
    resident.size = 500  # memory given back: nothing signals it, the request looks again
    wait_until(lambda: turns == [15], "the request's turn", 5)
    assert memory.promised == EXPANSION * 15  # what the decode may still take, for the others to leave
    release.set()
    waiting.join(5)
    assert memory.promised == 0


def test_an_attribution_pass_is_put_off_without_room_and_reads_as_many_streams_as_fit(store_client):
    resident = Resident(0)
    memory = MemoryCeiling(ATTRIBUTION_PASS, reserve=0, resident=resident)
    job = AttributionInRoom(memory, lambda: 1000.0, store_client, settle_s=0)
    assert job.run_pass() == (0, True)  # an empty store: nothing to attribute, and room for it
    assert job.pass_streams == ATTRIBUTION_PASS // (ATTRIBUTION_BYTES_PER_CHUNK * 1000)
    resident.size = 1
    with mock.patch.object(AttributionJob, "run_pass") as run_pass:
        assert job.run_pass() == (0, True)  # no room: put off to the next tick
    run_pass.assert_not_called()


def test_a_ceiling_below_what_the_collector_needs_ends_its_start_in_one_line(tmp_path):
    store = f"chdb://{tmp_path / 'store'}"
    started = run("collector", "--storage", store, "--max-memory-mib", "64", "--no-grpc", "--http-port", "0")
    assert started.returncode == 1
    assert "the memory ceiling (64 MiB) leaves no room for requests" in started.stderr
    assert "Traceback" not in started.stderr
