"""Speculative drafts shown and withdrawn, end to end: the simulated engine streams them, the SDK reads each
withdrawal off the wire on the client, ServerStream records what the engine sent, and both reach `streams`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import yaml

from streamscope_cli.workload.load import run_load, wait_until_stored
from streamscope_cli.workload.scenario import load_scenario, plan

SCENARIO = {
    "name": "drafts",
    "seed": 7,
    "description": "Speculative decoding that shows its drafts before verifying them.",
    "load": {"streams": 12, "arrival_rate": 20, "concurrency": 12, "output_tokens": {"uniform": [30, 60]}},
    "nodes": [
        {
            "name": "node-0",
            "scheduler": {"step_base_ms": 10},
            "spec_decode": {"draft_tokens": 3, "acceptance": 0.6},
            "output": {"show_drafts": True},
        }
    ],
}


def test_drafts_withdrawn_on_the_wire_are_stored_alike_on_both_sides(collector, tmp_path):
    path = tmp_path / "drafts.yaml"
    path.write_text(yaml.safe_dump(SCENARIO))
    scenario = load_scenario(str(path))
    since = datetime.now(UTC) - timedelta(seconds=5)
    run_load(scenario, collector.http_url, agents=False)
    wait_until_stored(collector.query_client, len(plan(scenario)), since, 60)
    rows = collector.query_client.query(
        "SELECT trace_id, groupArray((side, retractions, retracted_bytes, retracted_tokens, "
        "length(retraction_shown_us))) FROM streams WHERE start_time >= {since:DateTime64(6)} GROUP BY trace_id",
        parameters={"since": since},
    ).result_rows
    sides = [dict((side, rest) for side, *rest in pairs) for _, pairs in rows]
    complete = [s for s in sides if {"client", "server"} <= s.keys()]
    assert len(complete) == len(plan(scenario))
    assert all(s["client"] == s["server"] for s in complete)  # read off the wire = what the engine sent
    assert sum(s["client"][0] for s in complete) > 0
    assert all(count == shown for count, _, _, shown in (s["client"] for s in complete))
    kinds = collector.query_client.query(
        "SELECT countIf(kind = 'retract'), countIf(retracted_bytes > 0) FROM chunks WHERE side = 'client'"
    ).result_rows[0]
    assert kinds[0] == 0 < kinds[1]  # every withdrawal came with the step's new text: a replacement
