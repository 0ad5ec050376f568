"""The Trace cost per chunk board's panels: what a chunk costs, and whether a provider's chunking changed."""

from __future__ import annotations

from streamscope_dashboards.panels.common import (
    HISTOGRAM_INTERVAL,
    HISTOGRAMS_SELECTED,
    HISTOGRAMS_SELECTED_ANY_SIDE,
    ROLLUPS_APPLY,
    SELECTED,
    SELECTED_ANY_SIDE,
    SIZED,
    STORED_BYTES_SQL,
    TABLE_HISTOGRAMS_SELECTED,
    TENANT_FILTER,
    VARIABLES,
    Panel,
    figure_median,
    figures_in,
    figures_of,
    filters,
    median_of,
)

CHANGE_FACTOR = 2
"""Tokens per chunk moving by this factor between two intervals is a chunking change (4 → 1 is 4×)."""

CHANGE_MIN_CHUNKS = 50
"""Chunks needed on both sides of a change, so a quiet interval's noise is not reported."""

_MEDIAN_TOKENS_PER_CHUNK = (
    f"{median_of('sumMap(content_chunks_by_tokens)', 'sum(content_chunks)')} AS median_tokens_per_chunk"
)
"""Over ``stream_totals`` or the streams: exact either way, the chunks by tokens being summed at insert."""
_SERIES = "concat(provider, ' ', model, if(tokens_estimated, ' (estimated)', ''))"
"""A provider and model's series, its tokens counted or estimated apart."""
TOKENS_KIND = "if(tokens_estimated, 'estimated', 'counted') AS tokens_kind"
"""Whether a row's tokens were counted by the provider or estimated from bytes, in words."""

TOKENS_PER_CHUNK = Panel(
    "tokens_per_chunk",
    "Tokens per chunk (median)",
    "Median tokens per content chunk, by provider and model: fewer per chunk costs more envelopes and spans. "
    "The median is the typical chunk; Chunk economics gives the mean (all tokens over all chunks), which a few "
    "large chunks pull up. Streams whose provider did not count tokens per chunk have them estimated from their "
    "bytes (about 4 a token): their series is marked (estimated) and never mixed with counted ones.",
    "timeseries",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time, {_SERIES} AS series, {_MEDIAN_TOKENS_PER_CHUNK}
    FROM stream_totals
    WHERE {HISTOGRAMS_SELECTED} AND {SIZED}
    GROUP BY time, series
    HAVING sum(content_chunks) > 0
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, {_SERIES} AS series, {_MEDIAN_TOKENS_PER_CHUNK}
    FROM stream_metrics
    WHERE {SELECTED} AND content_chunks > 0 AND {SIZED} AND NOT {ROLLUPS_APPLY}
    GROUP BY time, series
)
ORDER BY time, series""",
    unit="short",
)

OTLP_BYTES_PER_CHUNK = Panel(
    "otlp_bytes_per_chunk",
    "OTLP bytes per chunk",
    "Trace bytes the collector received (as sent, compressed or not) per chunk stored, per interval.",
    "timeseries",
    f"""SELECT $__timeInterval(time) AS time, 'received' AS series,
    sum(received_bytes) / nullIf(sum(rows['chunks']), 0) AS bytes_per_chunk
FROM ingest_requests
WHERE $__timeFilter(ingest_requests.time) AND signal = 'traces' AND {TENANT_FILTER}
GROUP BY time
ORDER BY time""",
    unit="decbytes",
)

_CHUNK_RATIOS = (
    "round({alias}counted_tokens / nullIf({alias}counted_chunks, 0), 2) AS mean_tokens_per_chunk, "
    "round({alias}estimated_tokens / nullIf({alias}estimated_chunks, 0), 2) AS estimated_tokens_per_chunk, "
    "round({alias}wire_bytes / nullIf({alias}wired_chunks, 0), 1) AS wire_bytes_per_chunk, "
    "round({alias}wire_bytes / nullIf({alias}wired_content_bytes, 0), 2) AS wire_per_content_byte"
)
"""Chunk economics' ratios of its sums (``{alias}``: the sums' table alias and a dot, or nothing); tokens over the
streams whose tokens were counted, and apart over those whose tokens were estimated; the wire's over the streams
whose wire bytes are known."""
_ESTIMATED_SUMS = (
    "sumIf(tokens, tokens_estimated) AS estimated_tokens, sumIf(content_chunks, tokens_estimated) AS estimated_chunks"
)
_TOTALS_TOKEN_SUMS = f"sum(counted_tokens) AS counted_tokens, sum(counted_chunks) AS counted_chunks, {_ESTIMATED_SUMS}"
"""The token sums of ``_CHUNK_RATIOS`` over ``stream_totals``: counted (per chunk, or a whole stream's by its
provider) and estimated apart."""
_STREAMS_TOKEN_SUMS = (
    "sum(stream_metrics.counted_tokens) AS counted_tokens, "
    "sumIf(content_chunks, stream_metrics.counted_tokens IS NOT NULL) AS counted_chunks, "
    f"{_ESTIMATED_SUMS}"
)
"""The same over ``stream_metrics``."""

_CHUNK_PACE_SELECTED = figures_in(TABLE_HISTOGRAMS_SELECTED, "chunks_per_s")

CHUNK_ECONOMICS = Panel(
    "chunk_economics",
    "Chunk economics",
    "What a chunk costs: tokens (the mean) and wire bytes per chunk by provider and model, chunks per second; "
    "OTLP bytes received per stored chunk (the collector's request log) and bytes on disk per chunk "
    "(ClickHouse parts of every table a stream fills: chunks, streams, rollups, verdicts). Tokens per chunk are "
    "over the streams whose provider counted them, chunk by chunk or "
    "in the answer's total (usage); where it did not, they are estimated from bytes (about 4 a token) and shown "
    "apart (estimated_tokens_per_chunk, over every stream whose chunks' tokens were estimated).",
    "table",
    f"""SELECT *,
    (SELECT round(sum(received_bytes) / nullIf(sum(rows['chunks']), 0), 2)
        FROM ingest_requests WHERE $__timeFilter(time) AND signal = 'traces') AS otlp_bytes_per_chunk,
    (SELECT round(({STORED_BYTES_SQL.strip()}), 2)) AS stored_bytes_per_chunk
FROM (
    SELECT t.provider AS provider, t.model AS model, t.streams AS streams, t.chunks AS chunks,
        {_CHUNK_RATIOS.format(alias="t.")}, f.chunks_per_s_p50 AS chunks_per_s_p50
    FROM (
        SELECT provider, model, sum(streams) AS streams, sum(content_chunks) AS chunks,
            {_TOTALS_TOKEN_SUMS}, sum(wire_bytes) AS wire_bytes,
            sum(wired_chunks) AS wired_chunks, sum(wired_content_bytes) AS wired_content_bytes
        FROM stream_totals
        WHERE {TABLE_HISTOGRAMS_SELECTED} AND {SIZED}
        GROUP BY provider, model
    ) AS t
    LEFT JOIN (
        SELECT provider, model, round({figure_median("chunks_per_s")}, 1) AS chunks_per_s_p50
        FROM ({figures_of("stream_histograms", "provider, model", _CHUNK_PACE_SELECTED)})
        GROUP BY provider, model
    ) AS f ON f.provider = t.provider AND f.model = t.model
    UNION ALL
    SELECT provider, model, streams, chunks, {_CHUNK_RATIOS.format(alias="")}, chunks_per_s_p50
    FROM (
        SELECT provider, model, count() AS streams, sum(content_chunks) AS chunks,
            {_STREAMS_TOKEN_SUMS},
            sum(wire_bytes) AS wire_bytes, sumIf(content_chunks, stream_metrics.wire_bytes > 0) AS wired_chunks,
            sumIf(content_bytes, stream_metrics.wire_bytes > 0) AS wired_content_bytes,
            round(quantileExact(0.5)(chunks_per_s), 1) AS chunks_per_s_p50
        FROM stream_metrics
        WHERE {SELECTED} AND {SIZED} AND NOT {ROLLUPS_APPLY}
        GROUP BY provider, model
    )
)
ORDER BY chunks DESC, provider, model""",
)

CHUNKING_CHANGES = Panel(
    "chunking_changes",
    "Chunking changes",
    f"Intervals where the median tokens per chunk of a provider and model, on one side and (on the server side) one "
    f"engine node, moved by {CHANGE_FACTOR}x or more from the interval before (at least {CHANGE_MIN_CHUNKS} chunks "
    "in each); counted and estimated tokens compared apart. Every side is listed whichever is chosen: a change at "
    "one node of several shows there, while the clients' mixture of nodes (and a proxy that merges chunks) can "
    "hide it.",
    "table",
    f"""SELECT time, side, node_name AS node, provider, model, tokens_kind, previous AS tokens_per_chunk_before,
    median AS tokens_per_chunk_after, previous_chunks AS chunks_before, chunks AS chunks_after
FROM (
    SELECT time, side, node_name, provider, model, tokens_kind, median, chunks,
        lagInFrame(median) OVER w AS previous,
        lagInFrame(chunks) OVER w AS previous_chunks
    FROM (
        SELECT {HISTOGRAM_INTERVAL} AS time, side, node_name, provider, model, {TOKENS_KIND},
            sum(content_chunks) AS chunks, {median_of("sumMap(content_chunks_by_tokens)", "chunks")} AS median
        FROM stream_totals
        WHERE {HISTOGRAMS_SELECTED_ANY_SIDE} AND {SIZED}
        GROUP BY time, side, node_name, provider, model, tokens_kind
        HAVING chunks > 0
        UNION ALL
        SELECT $__timeInterval(start_time) AS time, side, node_name, provider, model, {TOKENS_KIND},
            sum(content_chunks) AS chunks, {median_of("sumMap(content_chunks_by_tokens)", "chunks")} AS median
        FROM stream_metrics
        WHERE {SELECTED_ANY_SIDE} AND content_chunks > 0 AND {SIZED} AND NOT {ROLLUPS_APPLY}
        GROUP BY time, side, node_name, provider, model, tokens_kind
    )
    WINDOW w AS (PARTITION BY side, node_name, provider, model, tokens_kind ORDER BY time
        ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
)
WHERE previous_chunks >= {CHANGE_MIN_CHUNKS} AND chunks >= {CHANGE_MIN_CHUNKS}
    AND (median * {CHANGE_FACTOR} <= previous OR median >= previous * {CHANGE_FACTOR})
ORDER BY time, side, node, provider, model, tokens_kind""",
)

CANCELLATION = Panel(
    "cancellation",
    "Cancellation tax",
    "Client streams cancelled or cut off, the tokens servers generated after that, and how long the cancel "
    "took to reach the server (round trip plus reaction, aligned through content). The rate is over the streams "
    "whose outcome is known; a source that does not say how a stream ended counts it as unknown_outcome.",
    "table",
    f"""SELECT t.streams AS streams, t.cancelled AS cancelled,
    if(streams > unknown_outcome, round(cancelled / (streams - unknown_outcome), 3), NULL) AS cancel_rate,
    t.unknown_outcome AS unknown_outcome, c.tokens_after_cancel AS tokens_after_cancel,
    c.propagation_ms_p50 AS propagation_ms_p50, c.propagation_ms_p95 AS propagation_ms_p95
FROM (
    SELECT sum(streams) AS streams, sum(cancelled) AS cancelled, sum(unknown_outcome) AS unknown_outcome
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    HAVING streams > 0
    UNION ALL
    SELECT count() AS streams, countIf(outcome IN ('cancelled', 'disconnected')) AS cancelled,
        countIf(outcome = 'unknown') AS unknown_outcome
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROLLUPS_APPLY}
    HAVING streams > 0
) AS t
CROSS JOIN (
    SELECT sum(tokens_after_cancel) AS tokens_after_cancel,
        quantileExact(0.5)(propagation_us) / 1000 AS propagation_ms_p50,
        quantileExact(0.95)(propagation_us) / 1000 AS propagation_ms_p95
    FROM cancellations
    WHERE {SELECTED}
) AS c""",
)

BROWSER_RENDER = Panel(
    "browser_render",
    "Render time per chunk in browsers",
    "What the last hop adds to each content chunk in the browser: the app's render work, and the wait from the "
    "chunk's arrival to the frame that showed it (p50 and p95 per interval; chunks whose paint was measured).",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT $__timeInterval(start_time) AS time,
        arrayConcat(quantilesExact(0.5, 0.95)(render_us), quantilesExact(0.5, 0.95)(paint_delay_us)) AS q
    FROM chunks
    WHERE $__timeFilter(start_time) AND side = 'browser' AND kind IN ('first', 'content') AND paint_delay_us > 0
        AND {filters(*VARIABLES, over_chunks=True)}
    GROUP BY time
)
ARRAY JOIN ['render p50', 'render p95', 'arrival to paint p50', 'arrival to paint p95'] AS series,
    arrayMap(x -> x / 1000, q) AS value
ORDER BY time, series""",
    unit="ms",
)
