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
    assert "injected, no stall found: connection 2" in table
    assert "a second cause named in the evidence: 3 stalls; another injected record of that cause overlapped 2" in table


def test_a_running_workload_is_described_in_words_not_as_a_dict():
    from streamscope_cli.workload.load import RunningWorkload, describe

    workload = RunningWorkload(urls={"node-0": "http://127.0.0.1:8001"}, proxy_url="http://127.0.0.1:8002")
    assert describe(workload) == "engines node-0 http://127.0.0.1:8001 · proxy http://127.0.0.1:8002"
