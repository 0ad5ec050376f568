"""Score attribution against the demo workload's ground truth: per-cause precision, recall, F1, confusion.

Each client stall gets a true label: the cause of the ground-truth record on the same trace whose window
overlaps the stall's the most, or ``none`` when nothing injected touched it. Precision and recall are then
computed over stalls; ground truth that added a delay long enough to be a stall but met no stall is counted
apart as ``undetected`` (and included in recall), so a silent detector cannot score well.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime

from clickhouse_connect.driver.client import Client

from ingest import store
from streamscope import semconv as sc

STALL_CAUSES = tuple(c for c in sc.STREAMSCOPE_TRUTH_CAUSE_VALUES if c != "chunking_regression")
DELAY_CAUSES = ("kv_pressure", "prefill_interference", "network_buffering", "connection")
"""Causes whose ground-truth magnitude is the delay they added (others measure something else)."""
MATCH_SLACK_US = 100_000

STALLS_SQL = """
SELECT trace_id, seq, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time), cause
FROM stalls WHERE start_time >= {since:DateTime64(6)} AND side IN ('client', 'browser')
"""
TRUTH_SQL = """
SELECT trace_id, cause, toUnixTimestamp64Micro(start_time), toUnixTimestamp64Micro(end_time), magnitude
FROM ground_truth WHERE start_time >= {since:DateTime64(6)} AND trace_id != '' AND cause != 'chunking_regression'
"""


@dataclass
class Score:
    confusion: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(true label, predicted cause) -> stalls."""
    undetected: Counter[str] = field(default_factory=Counter)

    def precision(self, cause: str) -> float | None:
        predicted = sum(n for (_, p), n in self.confusion.items() if p == cause)
        return self.confusion[(cause, cause)] / predicted if predicted else None

    def recall(self, cause: str) -> float | None:
        actual = sum(n for (t, _), n in self.confusion.items() if t == cause) + self.undetected[cause]
        return self.confusion[(cause, cause)] / actual if actual else None

    def f1(self, cause: str) -> float | None:
        p, r = self.precision(cause), self.recall(cause)
        return 2 * p * r / (p + r) if p and r else (0.0 if p is not None and r is not None else None)

    def support(self, cause: str) -> int:
        return sum(n for (t, _), n in self.confusion.items() if t == cause) + self.undetected[cause]

    def blamed_on_injected(self) -> int:
        """Stalls with no injected cause that attribution nevertheless blamed on one (must be 0 in steady)."""
        return sum(n for (t, p), n in self.confusion.items() if t == "none" and p in STALL_CAUSES)


def score(client: Client, since: datetime, absolute_us: int = 400_000) -> Score:
    with store.translated_errors():
        stalls = client.query(STALLS_SQL, parameters={"since": since}).result_rows
        truths = client.query(TRUTH_SQL, parameters={"since": since}).result_rows
    by_trace: dict[str, list[tuple[str, int, int, float]]] = {}
    for trace, cause, start, end, magnitude in truths:
        by_trace.setdefault(trace, []).append((cause, start, end, magnitude))
    result = Score()
    hit: set[tuple[str, int, int]] = set()
    for trace, _, start, end, predicted in stalls:
        best, best_overlap = "none", -1
        for cause, t_start, t_end, _ in by_trace.get(trace, []):
            overlap = min(end, t_end) - max(start, t_start)
            if overlap >= -MATCH_SLACK_US and overlap > best_overlap:
                best, best_overlap = cause, overlap
                hit.add((trace, t_start, t_end))
        result.confusion[(best, predicted)] += 1
    for trace, records in by_trace.items():
        for cause, t_start, t_end, magnitude in records:
            if cause in DELAY_CAUSES and magnitude * 1e6 >= absolute_us and (trace, t_start, t_end) not in hit:
                result.undetected[cause] += 1
    return result
