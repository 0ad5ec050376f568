"""`streamscope eval` on llama.cpp's real server: the engine, the gateway, the agent, the proxy and the clients each
in a process of their own, the ground truth from the injector, the proxy and the clients' watchdog.

The floor here is loose on purpose: it holds on a loaded machine with a shortened run, and still fails when a part
of the chain is missing (stalls behind a gateway judged with no engine side: prefill recall 0). The accuracy claims
come from ``benchmarks/attribution_accuracy.py --set llama`` at full size, quiet and loaded.
"""

from __future__ import annotations

from pathlib import Path

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_cli.workload.evaluate import evaluate_named, render
from streamscope_cli.workload.llama_clients import Received, first_token_truths, prefill_truths

MS = 1_000_000
INJECTED = (Cause.PREFILL_INTERFERENCE, Cause.NETWORK_BUFFERING, Cause.CONNECTION, Cause.CLIENT_HOST)
FLOOR = 0.7
FLOORS = {Cause.NETWORK_BUFFERING: 0.5}
"""Below FLOOR where the product falls short of its target (docs/benchmarks.md, Targets): the proxy's buffering is
found 0.75-0.89 of the time quiet on llama-server, so a run of 15-20 such stalls can fall under 0.7 while the
chain works (a missing part gives 0)."""


def stream(trace: str, arrivals_ms: list[int], content: list[bool] | None = None, sent_ms: int = 0) -> Received:
    return Received(trace, [t * MS for t in arrivals_ms], content or [True] * len(arrivals_ms), sent_ms * MS)


def test_a_prefill_is_the_truth_of_every_stream_mid_answer_across_it_and_names_the_events_it_delayed():
    mid = stream("a" * 32, [0, 10, 20, 30, 520, 530], [False, True, True, True, True, True])
    ended_before = stream("c" * 32, [0, 10, 20])
    role_only_before = stream("d" * 32, [0, 530, 540], [False, True, True])
    started_after = stream("b" * 32, [530, 540, 550])
    truths = prefill_truths("llama-0", [(25 * MS, 515 * MS)], [mid, started_after, ended_before, role_only_before])
    assert [t.trace_id for t in truths] == ["a" * 32]
    (truth,) = truths
    assert (truth.cause, truth.node, truth.start_ns, truth.end_ns) == (
        Cause.PREFILL_INTERFERENCE,
        "llama-0",
        25 * MS,
        515 * MS,
    )
    assert truth.chunk_indices == (4, 5)  # 0-2 came before it was sent, 3 before the prefill held it; 4, 5 after
    assert truth.magnitude == 0.49  # the wait from event 3 to event 4


def test_a_stream_whose_first_content_beats_the_prefill_after_it_was_sent_is_held_by_it():
    # the long prompt is sent, the gateway and the engine's scheduler take a while to start its prefill: a stream
    # sent a moment before gets its first tokens out in between, then waits for the prefill like every other
    first_in_window = stream("f" * 32, [100, 130, 520, 530], [False, True, True, True])
    (truth,) = prefill_truths("llama-0", [(25 * MS, 515 * MS)], [first_in_window])
    assert (truth.trace_id, truth.chunk_indices, truth.magnitude) == ("f" * 32, (2, 3), 0.39)


def test_a_stream_whose_last_content_comes_before_the_prefill_is_seen_answered_is_still_held_by_it():
    # the injector's clock of "answered" runs late when its host is held: the stream's last event can beat it
    last_within = stream("e" * 32, [0, 10, 20, 480])
    (truth,) = prefill_truths("llama-0", [(25 * MS, 515 * MS)], [last_within])
    assert (truth.trace_id, truth.chunk_indices, truth.magnitude) == ("e" * 32, (3,), 0.46)


def test_attribution_on_llama_server_finds_each_injected_cause(storage_dsn: str, llama_server_binary: Path) -> None:
    result = evaluate_named("llama-mixed", storage_dsn, streams=64)
    report = render("llama-mixed", result)
    for cause in INJECTED:
        assert result.support(cause) >= 5, report
        assert (result.f1(cause) or 0.0) >= FLOORS.get(cause, FLOOR), report
    assert result.blamed_on_injected() <= 2, report  # a stall no record explains is rarely put on the engine or path


def test_a_stream_sent_while_every_slot_ran_waited_in_the_queue_for_its_first_token():
    busy = [(0, 3_000 * MS), (10 * MS, 3_100 * MS), (20 * MS, 2_500 * MS), (900 * MS, 1_200 * MS)]
    queued = stream("a" * 32, [2_520, 2_530, 2_540], [False, True, True], sent_ms=100)  # three of three running
    free = stream("b" * 32, [2_610, 2_620], sent_ms=2_600)  # two running
    prefilled = stream("c" * 32, [3_820, 3_830], sent_ms=3_500)  # sent during a long prompt's prefill
    before = stream("d" * 32, [3_810, 3_830], sent_ms=3_390)  # sent just before it, its first token not out yet
    done_before = stream("e" * 32, [3_395, 3_830], sent_ms=3_380)  # its first token out before the prompt came
    streams = [queued, free, prefilled, before, done_before]
    truths = first_token_truths("llama-0", 3, busy, [(3_400 * MS, 3_800 * MS)], streams)
    assert [(t.trace_id, t.cause, t.start_ns, t.end_ns, t.chunk_indices, t.magnitude) for t in truths] == [
        ("a" * 32, Cause.QUEUE, 100 * MS, 2_530 * MS, (1,), 2.43),
        ("c" * 32, Cause.PREFILL_INTERFERENCE, 3_500 * MS, 3_800 * MS, (0,), 0.32),
        ("d" * 32, Cause.PREFILL_INTERFERENCE, 3_400 * MS, 3_800 * MS, (0,), 0.42),
    ]
    assert all(t.detail["kind"] == "first_token" for t in truths)


def test_attribution_on_llama_server_finds_streams_queued_for_a_slot(storage_dsn: str, llama_server_binary: Path):
    result = evaluate_named("llama-queue", storage_dsn, streams=32)
    report = render("llama-queue", result)
    assert result.support(Cause.QUEUE) >= 5, report
    assert (result.f1(Cause.QUEUE) or 0.0) >= FLOOR, report
    assert result.blamed_on_injected() == 0, report
