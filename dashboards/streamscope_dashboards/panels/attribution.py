"""The Jitter attribution board's own panels: where each stall and slow first token came from (the node metrics
beside them are in nodes)."""

from __future__ import annotations

from streamscope_dashboards.panels.common import STALL_FILTERS, VARIABLES, Panel, filters
from streamscope_ingest.blocks.stalls import StallRule

_RULE = StallRule()
ATTRIBUTED_STALL = (
    f"A stall here is attribution's: a content gap longer than {_RULE.threshold_us // 1000} ms, or one well over "
    f"the stream's own rhythm (at least {_RULE.relative_floor_us // 1000} ms and {_RULE.relative_factor:g}x its "
    "median gap). Stall count, stall rate and ITL goodput count only gaps over the "
    f"{_RULE.threshold_us // 1000} ms SLO, so they can count fewer."
)
"""What the stall panels count, next to the SLO's single threshold (the stall rule's defaults)."""

STALLS_BY_CAUSE = Panel(
    "stalls_by_cause",
    "Stalls by cause",
    f"Client stalls per interval, by the cause attribution gave them. {ATTRIBUTED_STALL}",
    "timeseries",
    f"""SELECT $__timeInterval(start_time) AS time, cause, count() AS stalls
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY time, cause
ORDER BY time, cause""",
    unit="short",
    stacked=True,
)

STALL_CAUSES = Panel(
    "stall_causes",
    "Stall attribution",
    f"Every client stall in the range by cause: how many, how long, how sure. {ATTRIBUTED_STALL}",
    "table",
    f"""SELECT cause, count() AS stalls, round(stalls / sum(stalls) OVER (), 3) AS share,
    quantileExact(0.5)(gap_us) / 1000 AS median_gap_ms, max(gap_us) / 1000 AS worst_gap_ms,
    round(avg(confidence), 2) AS mean_confidence
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY cause
ORDER BY stalls DESC, cause""",
)

SLOW_STARTS = Panel(
    "slow_starts",
    "Slow first tokens",
    "Client streams whose first token came a second or more after the request, by the cause attribution gave "
    "them: the engine's queue (every slot busy), another request's prefill, the serving process's host, the "
    "client's host or the path. Each wait is split where it was spent: at the engine (its server's or gateway's "
    "own wait for its first token), on the path, and in the client's host.",
    "table",
    f"""SELECT cause, count() AS slow_starts, round(slow_starts / sum(slow_starts) OVER (), 3) AS share,
    quantileExact(0.5)(ttft_us) / 1000 AS median_ttft_ms, max(ttft_us) / 1000 AS worst_ttft_ms,
    quantileExact(0.5)(upstream_us) / 1000 AS median_engine_ms, quantileExact(0.5)(path_us) / 1000 AS median_path_ms,
    quantileExact(0.5)(host_us) / 1000 AS median_host_ms, round(avg(confidence), 2) AS mean_confidence
FROM slow_starts
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY cause
ORDER BY slow_starts DESC, cause""",
)

CLIENT_VS_SERVER = Panel(
    "client_vs_server",
    "Longest stalls, client against server",
    "The client's gap next to the server's gap for the same content: a server gap close to the client's puts "
    "the delay at the engine, a small one puts it on the path.",
    "table",
    f"""SELECT start_time, trace_id, node_name, cause, round(confidence, 2) AS confidence,
    gap_us / 1000 AS client_gap_ms, server_gap_us / 1000 AS server_gap_ms
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
ORDER BY gap_us DESC
LIMIT 50""",
)

GPU_TO_GLASS = Panel(
    "gpu_to_glass",
    "GPU to glass: the first token",
    "Where a browser's wait for its first token went, averaged per interval over browser streams whose server span "
    "is in the same trace: the engine (request received to first chunk emitted: queue and prefill), the network "
    "(the browser's time to first chunk less the engine's: both hops, and any gateway), and the screen (arrival to "
    "the frame that painted it). Durations on each host, never a clock subtraction.",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT $__timeInterval(b.start_time) AS time,
        avg(s.ttft_us) / 1000 AS engine,
        avg(greatest(toInt64(b.ttft_us) - toInt64(s.ttft_us), 0)) / 1000 AS network,
        avg(f.paint_delay_us) / 1000 AS screen
    FROM stream_metrics AS b
    INNER JOIN stream_metrics AS s ON s.tenant = b.tenant AND s.trace_id = b.trace_id AND s.side = 'server'
    INNER JOIN (
        SELECT tenant, trace_id, span_id, paint_delay_us FROM chunks
        WHERE $__timeFilter(start_time) AND side = 'browser' AND kind = 'first'
    ) AS f ON f.tenant = b.tenant AND f.trace_id = b.trace_id AND f.span_id = b.span_id
    WHERE $__timeFilter(b.start_time) AND b.side = 'browser' AND b.ttft_us IS NOT NULL AND s.ttft_us IS NOT NULL
        AND {filters(*VARIABLES, alias="b.")}
    GROUP BY time
)
ARRAY JOIN ['1 engine', '2 network', '3 screen'] AS series, [engine, network, screen] AS value
ORDER BY time, series""",
    unit="ms",
    stacked=True,
)
