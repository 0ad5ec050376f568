-- Figures per stream put right, and what counts them counted again:
--   streams.outcome 'unknown'        a stream whose source did not say how it ended (no finish reason, no usage, no
--                                    error: another instrumentation's span of a stream the app closed early looks
--                                    so); stream_totals.unknown_outcome counts them, and a cancellation rate is
--                                    over the other streams
--   stream_totals.wired_chunks,      the content chunks and bytes of the streams whose wire bytes are known (more
--     wired_content_bytes            than 0: a wrapper that reads parsed events, such as the OpenAI client's,
--                                    records none), which the wire ratios divide by
--   streams.rest_stalled_us          time in stalls past the head window (the first 200 ms of content; of a stall
--                                    that began in it, the part after it); NULL for rows written before
--   head_burst_ratio                 the head's pace over the rest's, the rest's stalls left out of its time: a
--                                    steady stream with one long stall is no burst at its head (ratio 1, where it
--                                    was 4); NULL where a stream stalled and its rest_stalled_us is unknown, and so
--                                    frontloaded_then_stalled false
--   stream_metrics.tokens_estimated  whether the stream's tokens were estimated from its bytes (streams'), so that a
--                                    ratio of tokens is never over estimated and counted tokens at once
--   stream_totals.tokens_estimated   the same, a key of the sums: counted and estimated tokens are summed apart
-- stream_metrics is made again with it; stream_totals and stream_histograms are counted again from the streams
-- stored (as migration 0033 did), a first byte's lead NULL where either time is unknown (0033 counted it as 0).
-- Each statement can run again.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS rest_stalled_us Nullable(UInt64) DEFAULT NULL AFTER stall_count;
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS unknown_outcome SimpleAggregateFunction(sum, UInt64)
    AFTER stuck_loops;
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS wired_chunks SimpleAggregateFunction(sum, UInt64)
    AFTER unknown_outcome;
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS wired_content_bytes SimpleAggregateFunction(sum, UInt64)
    AFTER wired_chunks;
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS tokens_estimated Bool AFTER coverage,
    MODIFY ORDER BY (step, tenant, side, interval_start, service, provider, model, source, coverage, tokens_estimated);
CREATE OR REPLACE VIEW stream_metrics AS
SELECT
    tenant, start_time, trace_id, span_id, service, side, provider,
    if(response_model != '', response_model, request_model) AS model,
    node_name, outcome, source, coverage, tokens, tokens_estimated, content_chunks, content_chunks_by_tokens,
    content_bytes, wire_bytes, ttfb_us, ttft_us, gap_p50_us, gap_p95_us, gap_p99_us, gap_max_us, jitter_ratio, stall_count,
    cancel_offset_us, tokens_after_cancel, repetition_score,
    ttft_us - ttfb_us AS first_byte_lead_us,
    if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL) AS content_s,
    tokens / content_s AS tokens_per_s,
    content_chunks / content_s AS chunks_per_s,
    head_tokens / nullIf(tokens, 0) AS head_share,
    ifNull(rest_stalled_us, if(stall_count = 0, toUInt64(0), NULL)) AS rest_stalls_us,
    if(last_content_us > ttft_us + 200000 + rest_stalls_us AND tokens > head_tokens,
       (head_tokens / 0.2) / ((tokens - head_tokens) / ((last_content_us - ttft_us - 200000 - rest_stalls_us) / 1e6)),
       NULL) AS head_burst_ratio,
    toBool(ifNull(head_burst_ratio >= 3, false) AND stall_count > 0) AS frontloaded_then_stalled,
    toBool(ifNull(repetition_score >= 0.5, false)) AS stuck_loop,
    wire_bytes / nullIf(content_bytes, 0) AS wire_per_content_byte
FROM streams;
TRUNCATE TABLE stream_totals;
INSERT INTO stream_totals
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, source, coverage, tokens_estimated, sum(n), sum(chunks), sum(t), sum(content), sum(wire), sum(c),
    sum(s), sum(o), sum(f), sum(l), sum(u), sum(wc), sum(wb), sumMap(by_tokens)
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        source, coverage, tokens_estimated, count() AS n, sum(content_chunks) AS chunks, sum(tokens) AS t, sum(content_bytes) AS content,
        sum(wire_bytes) AS wire, countIf(outcome IN ('cancelled', 'disconnected')) AS c, countIf(stall_count > 0) AS s,
        countIf(ifNull(gap_max_us, 0) > 400000) AS o, countIf(frontloaded_then_stalled) AS f, countIf(stuck_loop) AS l,
        countIf(outcome = 'unknown') AS u, sumIf(content_chunks, wire_bytes > 0) AS wc,
        sumIf(content_bytes, wire_bytes > 0) AS wb,
        sumMap(content_chunks_by_tokens) AS by_tokens
    FROM stream_metrics
    GROUP BY tenant, side, five_s, service, provider, model, source, coverage, tokens_estimated
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, source, coverage, tokens_estimated;
TRUNCATE TABLE stream_histograms;
INSERT INTO stream_histograms
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, counted.1 AS figure, assumeNotNull(counted.2) AS bucket, count() AS streams
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider,
        if(response_model != '', response_model, request_model) AS model,
        arrayFilter(f -> f.2 IS NOT NULL, arrayMap(f -> (f.1, if(f.2 IS NULL, NULL, if(f.3 = 'log' AND f.2 = 0, -32768,
            toInt16(greatest(-32767, least(32767, multiIf(f.3 = 'count', f.2, f.3 = 'index', floor(f.2 * 10000),
                floor(log(f.2) / log(1.01)) + 1))))))), [
            ('stall_count', toFloat64(stall_count), 'count'),
            ('tool_call', toFloat64(first_tool_call_seq IS NOT NULL), 'count'),
            ('tokens_per_s', tokens / content_s, 'log'),
            ('tool_call_pause_us', toFloat64(tool_call_pause_us), 'log'),
            ('ttft_us', toFloat64(ttft_us), 'log'),
            ('gap_p99_us', if(coverage IN ('full', 'arrivals'), toFloat64(gap_p99_us), NULL), 'log'),
            ('first_byte_lead_us', if(ttft_us IS NULL OR ttfb_us IS NULL, NULL,
                toFloat64(greatest(toInt64(ttft_us) - toInt64(ttfb_us), 0))), 'log'),
            ('head_burst_ratio', if(last_content_us > ttft_us + 200000 + rest_stalls_us AND tokens > head_tokens,
                (head_tokens / 0.2) / ((tokens - head_tokens) / ((last_content_us - ttft_us - 200000 - rest_stalls_us)
                / 1e6)), NULL), 'log'),
            ('chunks_per_s', if(coverage IN ('full', 'partial'), content_chunks / content_s, NULL), 'log')
        ])) AS figures
    FROM (
        SELECT *, if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL) AS content_s,
            ifNull(rest_stalled_us, if(stall_count = 0, toUInt64(0), NULL)) AS rest_stalls_us
        FROM streams
    )
)
ARRAY JOIN figures AS counted
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, figure, bucket;
