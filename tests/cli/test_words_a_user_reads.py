"""What `streamscope eval` and the workload print: whole labels, every figure saying what it counts, words not dicts."""

from __future__ import annotations

from collections import Counter

from streamscope_cli.workload.evaluate import render
from streamscope_ingest.analysis.evaluation import Score


def test_the_eval_table_shows_whole_labels_and_explains_its_footnotes():
    score = Score(
        confusion=Counter({("network_buffering", "network_buffering"): 9, ("none", "prefill_interference"): 1}),
        undetected=Counter({"connection": 2}),
        secondary_named=3,
        secondary_right=2,
    )
    table = render("s", score)
    lines = table.splitlines()
    rows = {line.split()[0]: line.split()[1:] for line in lines[2 : lines.index("")]}
    assert rows["network_buffering"][:5] == ["1.00", "1.00", "1.00", "9", "9"]
    assert rows["prefill_interference"][:5] == ["0.00", "-", "-", "0", "1"]  # one attributed, none injected
    header = next(line for line in table.splitlines() if line.startswith(" " * 22))
    assert header.split() == ["network_buffering", "none", "prefill_interference"]
    assert "injected, no stall or slow start found: connection 2" in table
    assert "slow starts" not in table  # none scored: not a word about them

    score.slow_start_labels = Counter({"network_buffering": 4})
    assert "scored: 6 stalls and 4 slow starts" in render("s", score)
    assert "a second cause named in the evidence: 3 stalls; another injected record of that cause overlapped 2" in table


def test_a_running_workload_is_described_in_words_not_as_a_dict():
    from streamscope_cli.workload.load import RunningWorkload, describe

    workload = RunningWorkload(urls={"node-0": "http://127.0.0.1:8001"}, proxy_url="http://127.0.0.1:8002")
    assert describe(workload) == "engines node-0 http://127.0.0.1:8001 · proxy http://127.0.0.1:8002"


def test_a_busy_machine_is_named_as_itself_not_as_an_injection():
    """Stalls the machine's own pauses made (its watchdog's client_host records, no host load injected) are what it
    did, not an injected cause: named so in the table, and said at the top when they are many."""
    confusion = Counter({("client_host", "client_host"): 30, ("network_buffering", "network_buffering"): 9})
    own = Score(confusion=confusion, host_records=Counter({("client_host", False): 40}))
    table = render("steady", own)
    assert table.splitlines()[1] == (
        "this machine was busy: 30 of 39 stalls were its own (its host held the clients or an engine's serving "
        "loop), not an injected cause"
    )
    assert any(line.startswith("client_host (this machine) ") for line in table.splitlines())

    injected = Score(confusion=confusion, host_records=Counter({("client_host", True): 5, ("client_host", False): 2}))
    table = render("client-host", injected)
    assert "this machine was busy" not in table and "(this machine)" not in table
    few = Score(confusion=Counter({("client_host", "client_host"): 1, ("connection", "connection"): 20}),
                host_records=Counter({("client_host", False): 1}))  # fmt: skip
    assert "this machine was busy" not in render("s", few)  # one stall in 21: not worth a word at the top
