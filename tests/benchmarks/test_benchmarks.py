"""Each benchmark's quick mode runs from a fresh clone and prints its table. Only that: the numbers themselves
are measured by hand on the reference machine (docs/benchmarks.md), never asserted here."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = {
    "sdk_overhead": "span.add_event per chunk",
    "sdk_setup": "StreamRecorder, with a MeterProvider",
    "wire_cost": "packed, int arrays  json",
    "chunk_codecs": "gap_us UInt32",
    "chunk_layout": "arrays, one row per stream",
    "storage": "information: the gaps carry",
    "ingest": "decode only (parse and decode, one thread), packed",
    "query_latency": "queries; slowest median",
    "collector_memory": "slow, 50,000 chunks/s",
    "attribution_accuracy": "with nothing injected:",
    "json_progress": "tool call",
    "decode_cost": "this checkout",
    "gateway_cost": "gateway, recording",
    "transport_cost": "chunked (NDJSON)",
}
OPTIONS = {
    "ingest": (["--repeat", "2"], "packed, 4 senders, run 2 of 2"),
    "storage": ([], "\ngap_us "),  # the per-column table, which needs the parts rewritten wide
    "decode_cost": (["--against", "HEAD"], "\nHEAD "),  # the baseline, counted in a work tree of its own
}
"""Options a benchmark's quick mode is run with, and a row they add."""


@pytest.mark.parametrize("name", sorted(BENCHMARKS))
def test_quick_mode_prints_its_table(name):
    options, added_row = OPTIONS.get(name, ([], ""))
    run = subprocess.run(
        [sys.executable, "-m", f"benchmarks.{name}", "--quick", *options],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert BENCHMARKS[name] in run.stdout, run.stdout
    assert re.search(r"\d", run.stdout.split(BENCHMARKS[name], 1)[1]), "the table's row has no number"
    assert added_row in run.stdout, run.stdout
    assert "Traceback" not in run.stderr
