"""The Stream quality board's panels: time to first token and the rhythm of the rest, per stream."""

from __future__ import annotations

from streamscope_dashboards.panels.common import (
    GOODPUT_TARGET,
    HISTOGRAM_INTERVAL,
    HISTOGRAMS_OVER_RANGE,
    HISTOGRAMS_SELECTED,
    ON_SIDE,
    ROLLUPS_APPLY,
    SELECTED,
    SELECTED_CHUNKS,
    SLO_US,
    STALL_FILTERS,
    TABLE_HISTOGRAMS_SELECTED,
    TIMED,
    TOKENS_PER_S,
    UNTIMED_CHUNKS,
    Panel,
    figure_at,
    figure_histogram,
    figure_median,
    figure_quantile,
    figures_in,
    figures_of,
    filters,
    gap_histogram,
    gap_quantile_ms,
    histogram_quantile,
    streams_with,
    timed_goodput,
)

ITL_BUCKETS_MS = (10, 25, 50, 100, 200, 400, 800, 1600, 3200)
"""Upper bounds of the ITL heatmap's rows; one more row holds everything slower."""

OVERFLOW_BUCKET = "+Inf"

HISTOGRAM_OVERFLOW_MS = 65535
"""``gap_histograms.itl_upper_ms`` of a gap above every bound of ``ITL_BUCKETS_MS``."""

FLEET_STATS = Panel(
    "fleet_stats",
    "Client streams",
    "Streams in the range, TTFT p50 and p95, the p99 of per-stream p99 gaps, ITL goodput (share of streams whose "
    f"every gap stayed within {SLO_US // 1000} ms), the share of streams with a stall, and the streams whose "
    "timeline is known only in part (chunks lost by the sender, unreadable, a source that knew no chunks), which "
    "the gap figures leave out.",
    "stat",
    f"""SELECT t.counted AS streams, f.ttft_p50 / 1000 AS ttft_p50_ms, f.ttft_p95 / 1000 AS ttft_p95_ms,
    f.p99_of_p99 / 1000 AS p99_of_p99_ms, t.itl_goodput AS itl_goodput, t.stall_rate AS stall_rate,
    t.incomplete AS incomplete
FROM (
    SELECT sum(streams) AS counted, sumIf(streams, {TIMED}) AS timed,
        (timed - sumIf(over_slo, {TIMED})) / nullIf(timed, 0) AS itl_goodput,
        sumIf(stalled, {TIMED}) / nullIf(timed, 0) AS stall_rate, sumIf(streams, NOT {TIMED}) AS incomplete
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    HAVING {ROLLUPS_APPLY}
) AS t
CROSS JOIN (
    SELECT {figure_at(0.5, "ttft_us")} AS ttft_p50, {figure_at(0.95, "ttft_us")} AS ttft_p95,
        {figure_at(0.99, "gap_p99_us")} AS p99_of_p99
    FROM ({figure_histogram(("ttft_us", "gap_p99_us"), TABLE_HISTOGRAMS_SELECTED)})
) AS f
UNION ALL
SELECT count() AS streams,
    quantileExact(0.5)(ttft_us) / 1000 AS ttft_p50_ms, quantileExact(0.95)(ttft_us) / 1000 AS ttft_p95_ms,
    quantileExactIf(0.99)(gap_p99_us, {TIMED}) / 1000 AS p99_of_p99_ms,
    {timed_goodput(str(SLO_US))} AS itl_goodput,
    countIf(stall_count > 0 AND {TIMED}) / nullIf(countIf({TIMED}), 0) AS stall_rate,
    countIf(NOT {TIMED}) AS incomplete
FROM stream_metrics
WHERE {SELECTED} AND NOT {ROLLUPS_APPLY}
HAVING NOT {ROLLUPS_APPLY}""",
)


def _itl_bucket_columns() -> str:
    columns, lower = [], 0
    for upper in ITL_BUCKETS_MS:
        columns.append(f'countIf(gap_us > {lower * 1000} AND gap_us <= {upper * 1000}) AS "{upper}"')
        lower = upper
    columns.append(f'countIf(gap_us > {lower * 1000}) AS "{OVERFLOW_BUCKET}"')
    return ",\n    ".join(columns)


def _itl_bucket_sums() -> str:
    """The heatmap's rows from ``gap_histograms``, whose ``itl_upper_ms`` is the row's bound."""
    bounds = [*ITL_BUCKETS_MS, HISTOGRAM_OVERFLOW_MS]
    names = [*map(str, ITL_BUCKETS_MS), OVERFLOW_BUCKET]
    return ",\n        ".join(f'sumIf(gaps, itl_upper_ms = {b}) AS "{n}"' for b, n in zip(bounds, names, strict=True))


def raw_itl_heatmap(condition: str = "") -> str:
    """The heatmap counted from raw chunks (with ``condition`` added to its filter): the panel's answer while
    routes are chosen, and what layouts of chunks are compared on (benchmarks/chunk_layout.py)."""
    return f"""SELECT $__timeInterval(start_time) AS time,
    {_itl_bucket_columns()}
FROM chunks
WHERE {SELECTED_CHUNKS} AND kind = 'content'{condition}
GROUP BY time"""


ITL_HEATMAP = Panel(
    "itl_heatmap",
    "Inter-token latency over time",
    "Client-side gaps between content chunks, counted per latency bucket (upper bound in ms) per interval.",
    "heatmap",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time,
        {_itl_bucket_sums()}
    FROM gap_histograms
    WHERE {HISTOGRAMS_SELECTED}
    GROUP BY time
    UNION ALL
{raw_itl_heatmap(f" AND NOT {ROLLUPS_APPLY}")}
)
ORDER BY time""",
    unit="ms",
)

STREAM_P99_HISTOGRAM = Panel(
    "stream_p99_histogram",
    "Per-stream p99 inter-token latency",
    "Each client stream's own 99th-percentile gap: the tail that averages hide.",
    "histogram",
    f"""SELECT gap_p99_us / 1000 AS p99_ms
FROM stream_metrics
WHERE {SELECTED} AND gap_p99_us IS NOT NULL AND {TIMED}""",
    unit="ms",
)

ITL_GOODPUT = Panel(
    "itl_goodput",
    "ITL goodput against the SLO",
    f"Share of client streams per interval whose every gap stayed within {SLO_US // 1000} ms; the line is the "
    f"{GOODPUT_TARGET:.0%} target the burn-rate alerts watch.",
    "timeseries",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time, 'goodput' AS series,
        (sum(streams) - sum(over_slo)) / sum(streams) AS itl_goodput
    FROM stream_totals
    WHERE {HISTOGRAMS_SELECTED} AND {TIMED}
    GROUP BY time
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, 'goodput' AS series,
        countIf(ifNull(gap_max_us, 0) <= {SLO_US}) / count() AS itl_goodput
    FROM stream_metrics
    WHERE {SELECTED} AND {TIMED} AND NOT {ROLLUPS_APPLY}
    GROUP BY time
)
ORDER BY time""",
    unit="percentunit",
    threshold=GOODPUT_TARGET,
)

TTFT_OVER_TIME = Panel(
    "ttft_over_time",
    "Time to first token",
    "TTFT p50 and p95 of client streams per interval.",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT time, [{figure_quantile(0.5, "histogram", "counted", "p50")},
        {figure_quantile(0.95, "histogram", "counted", "p95")}] AS q
    FROM ({figure_histogram("ttft_us", HISTOGRAMS_SELECTED, f"{HISTOGRAM_INTERVAL} AS time")})
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, arrayMap(x -> toFloat64(x), quantilesExact(0.5, 0.95)(ttft_us)) AS q
    FROM stream_metrics
    WHERE {SELECTED} AND ttft_us IS NOT NULL AND NOT {ROLLUPS_APPLY}
    GROUP BY time
)
ARRAY JOIN ['p50', 'p95'] AS series, arrayMap(x -> x / 1000, q) AS value
ORDER BY time, series""",
    unit="ms",
)

_SHAPE_FIGURES = ("tokens_per_s", "first_byte_lead_us", "head_burst_ratio")

STREAM_SHAPE = Panel(
    "stream_shape",
    "Stream shape by model",
    "Client streams by model: pace, the first byte's lead over the first content, bursts at the head "
    "followed by a stall, and streams stuck repeating themselves.",
    "table",
    f"""SELECT * FROM (
    SELECT t.model AS model, t.streams AS streams, f.tokens_per_s_p50 AS tokens_per_s_p50,
        f.first_byte_lead_ms_p50 AS first_byte_lead_ms_p50, f.head_burst_ratio_p50 AS head_burst_ratio_p50,
        t.frontloaded_then_stalled AS frontloaded_then_stalled, t.stuck_loops AS stuck_loops,
        round(t.stalled / t.streams, 3) AS stall_rate
    FROM (
        SELECT model, sum(streams) AS streams, sum(frontloaded_then_stalled) AS frontloaded_then_stalled,
            sum(stuck_loops) AS stuck_loops, sum(stalled) AS stalled
        FROM stream_totals
        WHERE {TABLE_HISTOGRAMS_SELECTED}
        GROUP BY model
    ) AS t
    LEFT JOIN (
        SELECT model, round({figure_median("tokens_per_s")}, 1) AS tokens_per_s_p50,
            round({figure_median("first_byte_lead_us")} / 1000, 1) AS first_byte_lead_ms_p50,
            round({figure_median("head_burst_ratio")}, 2) AS head_burst_ratio_p50
        FROM ({figures_of("stream_histograms", "model", figures_in(TABLE_HISTOGRAMS_SELECTED, *_SHAPE_FIGURES))})
        GROUP BY model
    ) AS f ON f.model = t.model
    UNION ALL
    SELECT model, count() AS streams,
        round(quantileExact(0.5)(tokens_per_s), 1) AS tokens_per_s_p50,
        round(quantileExact(0.5)(first_byte_lead_us) / 1000, 1) AS first_byte_lead_ms_p50,
        round(quantileExact(0.5)(head_burst_ratio), 2) AS head_burst_ratio_p50,
        countIf(frontloaded_then_stalled) AS frontloaded_then_stalled,
        countIf(stuck_loop) AS stuck_loops,
        round(countIf(stall_count > 0) / streams, 3) AS stall_rate
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROLLUPS_APPLY}
    GROUP BY model
)
ORDER BY streams DESC, model""",
)

STREAM_QUALITY = Panel(
    "stream_quality",
    "Streaming quality indices",
    "Etalon's fluidity-index (share of tokens on time against deadlines with carried slack; 1 is perfect) and "
    "an Andes-style QoE (delivery against an expected TTFT and reading pace; 1 is perfect), by model.",
    "table",
    f"""SELECT model, count() AS streams,
    round(quantileExact(0.5)(fluidity_index), 3) AS fluidity_p50,
    round(quantileExact(0.1)(fluidity_index), 3) AS fluidity_p10,
    round(quantileExact(0.5)(andes_qoe), 3) AS andes_qoe_p50,
    round(quantileExact(0.1)(andes_qoe), 3) AS andes_qoe_p10
FROM stream_quality
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY model
ORDER BY streams DESC, model""",
)


def _before_and_after(column: str) -> str:
    """A column for each side of a trade: ``{when}`` in ``column`` is ``before``, then ``after``."""
    return ", ".join(column.format(when=when) for when in ("before", "after"))


SMOOTHING_HISTOGRAMS_SELECTED = (
    f"{HISTOGRAMS_OVER_RANGE} AND {ON_SIDE} AND {filters('tenant', 'service', 'model')} AND {ROLLUPS_APPLY}"
)
"""Rows of ``smoothing_histograms`` counting the range once, for the side and variables (no provider: as
``stream_smoothing``)."""

_LONGEST_GAP_MEDIANS = _before_and_after(
    f"round({figure_median('longest_gap_{when}_us')} / 1000, 1) AS longest_gap_p50_{{when}}_ms"
)

SMOOTHING_TRADE = Panel(
    "smoothing_trade",
    "What smoothing would buy",
    "Each stream replayed behind a client-side smoothing buffer that shows nothing until its depth has passed "
    "since the first chunk, then one chunk per the stream's own median gap: what it adds to TTFT and to the "
    "end of the answer, the streams that still show a stall and the stalls left (as attribution counts them), "
    "the median longest gap, and the quality indices' medians before and after, over streams whose every "
    "chunk's time is known. Worth it where stalls fall much more than the indices do.",
    "table",
    f"""SELECT * FROM (
    SELECT depth_ms, anyIf(counted, figure = 'stalls_before') AS streams,
        round({figure_median("added_end_us")} / 1000, 1) AS added_end_p50_ms,
        {_before_and_after("round(anyIf(positive, figure = 'stalls_{when}') / streams, 3) AS stalled_share_{when}")},
        {_before_and_after("anyIf(total, figure = 'stalls_{when}') AS stall_count_{when}")},
        {_LONGEST_GAP_MEDIANS},
        {_before_and_after(f"round({figure_median('fluidity_{when}', index=True)}, 3) AS fluidity_p50_{{when}}")},
        {_before_and_after(f"round({figure_median('andes_{when}', index=True)}, 3) AS andes_qoe_p50_{{when}}")}
    FROM ({figures_of("smoothing_histograms", "depth_ms", SMOOTHING_HISTOGRAMS_SELECTED)})
    GROUP BY depth_ms
    UNION ALL
    SELECT depth_ms, count() AS streams,
        round(quantileExact(0.5)(added_end_us) / 1000, 1) AS added_end_p50_ms,
        {_before_and_after("round(countIf(stalls_{when} > 0) / count(), 3) AS stalled_share_{when}")},
        {_before_and_after("sum(stalls_{when}) AS stall_count_{when}")},
        {_before_and_after("round(quantileExact(0.5)(longest_gap_{when}_us) / 1000, 1) AS longest_gap_p50_{when}_ms")},
        {_before_and_after("round(quantileExact(0.5)(fluidity_{when}), 3) AS fluidity_p50_{when}")},
        {_before_and_after("round(quantileExact(0.5)(andes_{when}), 3) AS andes_qoe_p50_{when}")}
    FROM stream_smoothing
    WHERE $__timeFilter(start_time) AND {STALL_FILTERS} AND NOT {ROLLUPS_APPLY}
        AND (trace_id, span_id) NOT IN (
            SELECT trace_id, span_id FROM streams WHERE $__timeFilter(start_time) AND {UNTIMED_CHUNKS}
        )
    GROUP BY depth_ms
)
ORDER BY depth_ms""",
)

STRUCTURED_OUTPUT = Panel(
    "structured_output",
    "Structured output as it streams",
    "Streams whose JSON answer (a JSON response format) or first tool call's arguments the SDK followed, by model "
    "and document: the median time to the first token, to the first usable field (its value complete: what a UI "
    "can first show or act on), the median wait between the two, the median time to a valid document (over those "
    "that became valid), and the shares that closed valid, were cut off before closing (truncated) or broke the "
    "JSON grammar (malformed).",
    "table",
    f"""SELECT model, json_document AS document, count() AS streams,
    round(quantileExact(0.5)(ttft_us) / 1000, 1) AS ttft_p50_ms,
    round(quantileExact(0.5)(first_field_us) / 1000, 1) AS first_field_p50_ms,
    round(quantileExact(0.5)(toInt64(first_field_us) - toInt64(ttft_us)) / 1000, 1) AS first_field_after_ttft_p50_ms,
    round(quantileExact(0.5)(json_valid_us) / 1000, 1) AS valid_p50_ms,
    round(countIf(json_outcome = 'valid') / count(), 3) AS valid_share,
    round(countIf(json_outcome = 'truncated') / count(), 3) AS truncated_share,
    round(countIf(json_outcome = 'malformed') / count(), 3) AS malformed_share
FROM {streams_with("if(length(json_field_us) > 0, json_field_us[1], NULL) AS first_field_us")}
WHERE {SELECTED} AND json_document != ''
GROUP BY model, document
ORDER BY streams DESC, model, document""",
)

RETRACTED_TEXT = Panel(
    "retracted_text",
    "Text taken back",
    "Streams that showed text and then withdrew it (speculative drafts a verifier rejected, a replaced suffix), by "
    "model: the share of streams that did, how often, the tokens withdrawn per stream and as a share of the tokens "
    "shown, and how long the oldest withdrawn text had been on screen when it went (median and p95 over the "
    "withdrawals). The final answer may be right; the reader watched it change. The share of tokens is over the "
    "streams whose tokens were counted (none estimated from bytes).",
    "table",
    f"""SELECT model, count() AS streams, round(countIf(retractions > 0) / count(), 3) AS retracting_share,
    sum(retractions) AS withdrawals, round(sum(retracted_tokens) / count(), 2) AS retracted_tokens_per_stream,
    round(sumIf(retracted_tokens, NOT tokens_estimated) / nullIf(sumIf(tokens, NOT tokens_estimated), 0), 4)
        AS retracted_token_share,
    round(quantileExactArray(0.5)(retraction_shown_us) / 1000, 1) AS shown_before_retraction_p50_ms,
    round(quantileExactArray(0.95)(retraction_shown_us) / 1000, 1) AS shown_before_retraction_p95_ms
FROM {streams_with()}
WHERE {SELECTED}
GROUP BY model
ORDER BY withdrawals DESC, streams DESC, model""",
)

MODEL_TEXTURE = Panel(
    "model_texture",
    "Stream texture by model version",
    "Gap distribution (all client content chunks of the model) next to each version's pace, stall rate and "
    "pause before its first tool call: compare a new version with the one before.",
    "table",
    f"""SELECT g.model AS model, g.gaps AS gaps, g.gap_p50_ms AS gap_p50_ms, g.gap_p95_ms AS gap_p95_ms,
    g.gap_p99_ms AS gap_p99_ms, g.gap_max_ms AS gap_max_ms, s.tokens_per_s_p50 AS tokens_per_s_p50,
    s.stall_rate AS stall_rate, s.tool_calls AS tool_calls, s.tool_call_pause_ms_p50 AS tool_call_pause_ms_p50
FROM (
    SELECT model, gaps, {gap_quantile_ms(0.5, "histogram", "gaps", "p50")} AS gap_p50_ms,
        {gap_quantile_ms(0.95, "histogram", "gaps", "p95")} AS gap_p95_ms,
        {gap_quantile_ms(0.99, "histogram", "gaps", "p99")} AS gap_p99_ms, gap_max_ms
    FROM ({gap_histogram(TABLE_HISTOGRAMS_SELECTED, "model")})
    UNION ALL
    SELECT model, count() AS gaps, quantilesExact(0.5, 0.95, 0.99)(gap_us)[1] / 1000 AS gap_p50_ms,
        quantilesExact(0.5, 0.95, 0.99)(gap_us)[2] / 1000 AS gap_p95_ms,
        quantilesExact(0.5, 0.95, 0.99)(gap_us)[3] / 1000 AS gap_p99_ms, max(gap_us) / 1000 AS gap_max_ms
    FROM chunks
    WHERE {SELECTED_CHUNKS} AND kind = 'content' AND NOT {ROLLUPS_APPLY}
    GROUP BY model
) AS g
LEFT JOIN (
    SELECT model,
        round({figure_median("tokens_per_s")}, 1) AS tokens_per_s_p50,
        round(anyIf(positive, figure = 'stall_count') / anyIf(counted, figure = 'stall_count'), 3) AS stall_rate,
        anyIf(positive, figure = 'tool_call') AS tool_calls,
        {figure_median("tool_call_pause_us")} / 1000 AS tool_call_pause_ms_p50
    FROM ({figures_of("stream_histograms", "model", TABLE_HISTOGRAMS_SELECTED)})
    GROUP BY model
    UNION ALL
    SELECT model, round(quantileExact(0.5)(tokens_per_s), 1) AS tokens_per_s_p50,
        round(countIf(stall_count > 0) / count(), 3) AS stall_rate,
        countIf(first_tool_call_seq IS NOT NULL) AS tool_calls,
        quantileExact(0.5)(tool_call_pause_us) / 1000 AS tool_call_pause_ms_p50
    FROM {streams_with(f"{TOKENS_PER_S} AS tokens_per_s")}
    WHERE {SELECTED} AND NOT {ROLLUPS_APPLY}
    GROUP BY model
) AS s ON s.model = g.model
ORDER BY model""",
)

STREAM_SOURCES = Panel(
    "stream_sources",
    "Where the streams came from",
    "Streams by the instrumentation that sent them and how much of each it knew: full (every chunk's time and "
    "size), partial (chunks lost by the sender), arrivals (each chunk's time, not its size), first_token (the time "
    "to the first token and the duration), duration (the call only), unreadable. Each figure reads only the "
    "streams that can give it.",
    "table",
    f"""SELECT source, coverage, streams, round(streams / sum(streams) OVER (), 3) AS share
FROM (
    SELECT source, coverage, sum(streams) AS streams
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    GROUP BY source, coverage
    UNION ALL
    SELECT source, coverage, count() AS streams
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROLLUPS_APPLY}
    GROUP BY source, coverage
)
ORDER BY streams DESC, source, coverage""",
)

_FIRST_CHUNK_METRICS = ("gen_ai.client.operation.time_to_first_chunk", "gen_ai.server.time_to_first_token")
_TO_ANY_CHUNK = "to the first chunk of any kind (a role-only one too), not the first token"
TIMED_OTHERWISE = {
    "openlit": "from the response headers, not the request",
    "opentelemetry.instrumentation.openai.": _TO_ANY_CHUNK,  # OpenLLMetry
    "opentelemetry.util.genai": _TO_ANY_CHUNK,
}
"""What a time to the first chunk or token measures, by the instrumentation scope that sent it (a prefix), where it
is not what its name says (each checked on the library's output, tests/collector/test_genai_sources.py)."""
_CAVEAT = "multiIf({}, '')".format(
    ", ".join(f"metric IN {_FIRST_CHUNK_METRICS} AND startsWith(source, '{scope}'), '{what}'"
              for scope, what in TIMED_OTHERWISE.items())
)  # fmt: skip

GENAI_METRICS = Panel(
    "genai_metrics",
    "What other instrumentations measured",
    "The GenAI histograms instrumentations export over OTLP (gen_ai.client.operation.duration, "
    "gen_ai.client.token.usage, gen_ai.server.time_to_first_token, ...), over the range: how many measurements, "
    "their mean, and p50 and p95 read off the buckets (within a bucket, by linear interpolation); failed calls "
    "(error_type) apart. A measurement counts when the interval of the point that carried it lies within the "
    "range (a series' first point stored covers its whole life so far). Durations are in seconds, as sent. A "
    "call these measure has no chunk timing unless the streamscope SDK saw it too. Timed says what a time to the "
    "first chunk or token measures where it is not what its name says.",
    "table",
    f"""SELECT metric, token_type, error_type, source, model, unit, {_CAVEAT} AS timed, measurements,
    if(unsummed > 0, NULL, round(total / measurements, 4)) AS mean,
    round({histogram_quantile(0.5, "buckets", "bounds", "p50")}, 4) AS p50,
    round({histogram_quantile(0.95, "buckets", "bounds", "p95")}, 4) AS p95
FROM (
    SELECT metric, token_type, error_type, source, model, unit, bounds, sum(count) AS measurements,
        sum(sum) AS total, countIf(sum IS NULL) AS unsummed, sumForEach(bucket_counts) AS buckets
    FROM genai_metric_intervals
    WHERE $__timeFilter(time) AND since >= $__fromTime AND {filters("tenant", "service", "provider", "model")}
    GROUP BY metric, token_type, error_type, source, model, unit, bounds
    HAVING measurements > 0
)
ORDER BY metric, token_type, error_type, source, model""",
)
