"""`streamscope report --smoothing`: the recorded streams of the report's range replayed behind one smoothing buffer
of the user's choosing, as one more table in the report (the dashboards' panel shows the job's fixed depths)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import SELECTED, SELECTED_CHUNKS, TIMED, Panel, chosen
from streamscope_dashboards.report import PanelResult, Query
from streamscope_ingest.analysis.attribution import StallRules, Timeline
from streamscope_ingest.analysis.smoothing import Buffer, Smoothed, smooth
from streamscope_ingest.analysis.verdicts import QualityTargets
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.store.sql import QueryResult

TIMELINES_SQL = f"""
SELECT trace_id, span_id, any(start_us), groupArray(offset_us), groupArray(content_bytes), groupArray(tokens),
    groupArray(paint_delay_us)
FROM (
    SELECT trace_id, span_id, toUnixTimestamp64Micro(start_time) AS start_us, offset_us, content_bytes, tokens,
        paint_delay_us
    FROM chunk_timeline
    WHERE {SELECTED_CHUNKS}
        AND (trace_id, span_id) IN (SELECT trace_id, span_id FROM stream_metrics WHERE {SELECTED} AND {TIMED})
    ORDER BY trace_id, span_id, seq
)
GROUP BY trace_id, span_id
"""
"""Each stream of the range whose every chunk's time is known, chunk by chunk. The streams are chosen from
``stream_metrics``, whose columns every dashboard variable filters (``streams`` has no ``model``)."""

COLUMNS = (
    "depth_ms",
    "rate_ms",
    "streams",
    "added_end_p50_ms",
    "stalled_share_before",
    "stalled_share_after",
    "stall_count_before",
    "stall_count_after",
    "longest_gap_p50_before_ms",
    "longest_gap_p50_after_ms",
    "fluidity_p50_before",
    "fluidity_p50_after",
    "andes_qoe_p50_before",
    "andes_qoe_p50_after",
)
"""The dashboards' ``smoothing_trade`` columns, with the pace the buffer revealed at."""


def smoothing_panel(
    run: Query, ctx: QueryContext, variables: Mapping[str, Sequence[str]], buffer: Buffer
) -> PanelResult:
    """The streams of the range, narrowed by ``variables``, before and after ``buffer``: one row."""
    sql = resolve(TIMELINES_SQL, ctx, chosen(variables))
    targets, rules = QualityTargets().in_us(), StallRules(stall=StallRule.configured())
    smoothed: list[Smoothed] = []
    for _trace, _span, start, offsets, content, tokens, paint in run(sql).rows:
        timeline = Timeline(int(start), np.array(offsets, np.int64), np.array(content, np.int64), np.array(paint))
        result = smooth(timeline, np.array(tokens, np.int64), buffer, rules, targets)
        if result is not None:
            smoothed.append(result)
    pace = "the stream's median gap" if buffer.rate_ms is None else f"one chunk per {buffer.rate_ms:g} ms"
    panel = Panel(
        "smoothing_counterfactual",
        f"Behind a {buffer.depth_ms:g} ms smoothing buffer",
        f"The range's streams replayed behind a buffer that shows nothing until {buffer.depth_ms:g} ms after the "
        f"first chunk, then {pace}: the same columns as 'What smoothing would buy' (rate_ms: the median pace "
        "used), over streams whose every chunk's time is known.",
        "table",
        TIMELINES_SQL,
    )
    return PanelResult(panel, QueryResult(list(COLUMNS), _types(), [_row(buffer, smoothed)]))


def _row(buffer: Buffer, streams: list[Smoothed]) -> list[object]:
    def median(values: list[float | None], scale: float = 1.0, digits: int = 3) -> float | None:
        known = sorted(v for v in values if v is not None)
        return round(known[len(known) // 2] / scale, digits) if known else None  # quantileExact(0.5)'s pick

    def share(values: list[int]) -> float | None:
        return round(sum(1 for v in values if v > 0) / len(values), 3) if values else None

    before = [s.stalls_before for s in streams]
    after = [s.stalls_after for s in streams]
    return [
        buffer.depth_ms,
        median([s.rate_ms for s in streams], digits=1),
        len(streams),
        median([s.added_end_us for s in streams], 1000, 1),
        share(before),
        share(after),
        sum(before),
        sum(after),
        median([s.longest_gap_before_us for s in streams], 1000, 1),
        median([s.longest_gap_after_us for s in streams], 1000, 1),
        median([s.fluidity_before for s in streams]),
        median([s.fluidity_after for s in streams]),
        median([s.andes_before for s in streams]),
        median([s.andes_after for s in streams]),
    ]


def _types() -> list[str]:
    counts = {"streams", "stall_count_before", "stall_count_after"}
    return ["UInt64" if name in counts else "Nullable(Float64)" for name in COLUMNS]
