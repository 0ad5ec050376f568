"""The Stream drilldown board's panels: one trace, and how the report and the dashboard choose it."""

from __future__ import annotations

from streamscope_dashboards.panels.common import STALL_FILTERS, Panel

STREAM_TIMELINE = Panel(
    "stream_timeline",
    "One stream, from the server to the screen",
    "Content delivered over time on each side of one trace, each side timed from its own span start (the "
    "client sending the request, a gateway or the server receiving it: a network hop apart, never a clock "
    "subtraction); for a browser, also when each chunk was painted.",
    "timeline",
    """SELECT side, ms_since_request, content_bytes FROM (
    SELECT side, seq, offset_us / 1000 AS ms_since_request,
        sum(content_bytes) OVER (PARTITION BY side ORDER BY seq) AS content_bytes
    FROM chunk_timeline
    WHERE trace_id_bytes = unhex('${trace_id}') AND kind IN ('first', 'content')
    UNION ALL
    SELECT 'browser painted' AS side, seq, (offset_us + paint_delay_us) / 1000 AS ms_since_request,
        sum(content_bytes) OVER (ORDER BY seq) AS content_bytes
    FROM chunk_timeline
    WHERE trace_id_bytes = unhex('${trace_id}') AND side = 'browser' AND kind IN ('first', 'content')
        AND paint_delay_us > 0
)
ORDER BY side, seq""",
    variables=("trace_id",),
    x_field="ms_since_request",
)

WORST_STALLED_TRACE = f"""SELECT trace_id
FROM stalls
WHERE $__timeFilter(start_time) AND server_gap_us IS NOT NULL AND {STALL_FILTERS}
ORDER BY gap_us DESC, trace_id
LIMIT 1"""
"""The trace the report draws in STREAM_TIMELINE: the longest stall in the range seen from both sides."""

LONGEST_STALLED_TRACES = f"""SELECT trace_id
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY trace_id
ORDER BY max(gap_us) DESC, trace_id
LIMIT 5"""
"""The traces of the range's longest stalls, the longest first: what the terminal report lists for
``streamscope replay``."""

WORST_STALLED_TRACES = """SELECT trace_id
FROM stalls
WHERE $__timeFilter(start_time) AND side = 'client' AND server_gap_us IS NOT NULL
GROUP BY trace_id
ORDER BY max(gap_us) DESC, trace_id
LIMIT 50"""
"""The drilldown's choice of traces, the worst first: the client streams of the range with the longest stalls seen
from both sides (the dashboard opens on the first)."""

TRACE = "trace_id = '${trace_id}'"

TRACE_STREAMS = Panel(
    "trace_streams",
    "The trace's streams",
    "Every side of the trace with its own statistics (each on its own host's clock).",
    "table",
    f"""SELECT side, service, node_name, model, outcome, ttft_us / 1000 AS ttft_ms, gap_p99_us / 1000 AS gap_p99_ms,
    gap_max_us / 1000 AS gap_max_ms, stall_count, tokens
FROM stream_metrics
WHERE {TRACE}
ORDER BY side""",
    variables=("trace_id",),
)

TRACE_STALLS = Panel(
    "trace_stalls",
    "The trace's stalls",
    "Each stall with its cause, confidence and the evidence attribution used.",
    "table",
    f"""SELECT seq, cause, round(confidence, 2) AS confidence, gap_us / 1000 AS client_gap_ms,
    server_gap_us / 1000 AS server_gap_ms, toString(evidence) AS evidence
FROM stalls
WHERE {TRACE}
ORDER BY seq""",
    variables=("trace_id",),
)

TRACE_NODE_EVENTS = Panel(
    "trace_node_events",
    "Events on the trace's node while it streamed",
    "Engine events on the node that served the trace (named by its server span, or by the gateway in front of it), "
    "from 5 s before the stream to 5 s after it.",
    "table",
    f"""SELECT e.start_time AS start_time, e.end_time AS end_time, e.kind AS kind, round(e.magnitude, 3) AS magnitude
FROM engine_events AS e
INNER JOIN (
    SELECT node_name, min(start_time) - INTERVAL 5 SECOND AS low,
        max(start_time + toIntervalMicrosecond(duration_us)) + INTERVAL 5 SECOND AS high
    FROM streams
    WHERE {TRACE} AND side IN ('server', 'gateway') AND node_name != ''
    GROUP BY node_name
) AS s ON s.node_name = e.node_name
WHERE e.start_time BETWEEN s.low AND s.high
ORDER BY e.start_time""",
    variables=("trace_id",),
)
