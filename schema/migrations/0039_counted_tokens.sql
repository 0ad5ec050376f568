-- A stream's tokens as counted, where its chunks' were estimated from their bytes but its provider counted the
-- answer's total (OpenAI's usage, Ollama's eval_count):
--   stream_metrics.counted_tokens   the stream's tokens counted per chunk; else, of a stream read to its end with
--                                   every chunk kept (outcome 'completed', coverage 'full'), its provider's
--                                   output tokens, unless some were spent reasoning (the stream may not have shown
--                                   them); else NULL. Over the stream's content chunks it is a counted mean
--                                   tokens per chunk (a true 2 per chunk, where the bytes read 4); its chunks'
--                                   tokens stay estimates, as do ratios of them (head share, retractions)
--   stream_totals.counted_tokens,   their sums, and the content chunks of the streams that have them
--     counted_chunks
-- stream_metrics is made again with it; stream_totals is counted again from the streams stored.
-- Each statement can run again.
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS counted_tokens SimpleAggregateFunction(sum, UInt64)
    AFTER wired_content_bytes;
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS counted_chunks SimpleAggregateFunction(sum, UInt64)
    AFTER counted_tokens;
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
    wire_bytes / nullIf(content_bytes, 0) AS wire_per_content_byte,
    if(NOT tokens_estimated, toNullable(tokens),
       if(outcome = 'completed' AND coverage = 'full'
          AND attributes['gen_ai.usage.reasoning.output_tokens'] IN ('', '0'), output_tokens, NULL)) AS counted_tokens
FROM streams;
TRUNCATE TABLE stream_totals;
INSERT INTO stream_totals
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, source, coverage, tokens_estimated, sum(n), sum(chunks), sum(t), sum(content), sum(wire), sum(c),
    sum(s), sum(o), sum(f), sum(l), sum(u), sum(wc), sum(wb), sum(ct), sum(cc), sumMap(by_tokens)
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        source, coverage, tokens_estimated, count() AS n, sum(content_chunks) AS chunks, sum(tokens) AS t, sum(content_bytes) AS content,
        sum(wire_bytes) AS wire, countIf(outcome IN ('cancelled', 'disconnected')) AS c, countIf(stall_count > 0) AS s,
        countIf(ifNull(gap_max_us, 0) > 400000) AS o, countIf(frontloaded_then_stalled) AS f, countIf(stuck_loop) AS l,
        countIf(outcome = 'unknown') AS u, sumIf(content_chunks, wire_bytes > 0) AS wc,
        sumIf(content_bytes, wire_bytes > 0) AS wb, sum(ifNull(counted_tokens, 0)) AS ct,
        sumIf(content_chunks, counted_tokens IS NOT NULL) AS cc,
        sumMap(content_chunks_by_tokens) AS by_tokens
    FROM stream_metrics
    GROUP BY tenant, side, five_s, service, provider, model, source, coverage, tokens_estimated
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, source, coverage, tokens_estimated;
