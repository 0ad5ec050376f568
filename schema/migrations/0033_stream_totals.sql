-- Per-stream sums, and three more per-stream figures, pre-aggregated at insert, so the panels that read a row per
-- stream until now (tokens_per_chunk, chunking_changes, chunk_economics, stream_shape, cancellation) read rows
-- that grow with the range and the labels, not with the streams stored.
--   stream_totals      per step and interval (as stream_histograms, migration 0032), labels, source and coverage:
--                      how many streams; their content chunks, tokens, content bytes and wire bytes; how many were
--                      cancelled (outcome cancelled or disconnected), stalled (stall_count > 0), over the ITL SLO
--                      (a content gap over 400 ms, the dashboards' and alert rules' SLO), frontloaded then stalled
--                      and stuck in a loop (stream_metrics' flags); and their content_chunks_by_tokens added up:
--                      the content chunks by the tokens each carried, which gives the exact median.
--   stream_histograms  every figure of 0032, and ttft_us, gap_p99_us (streams whose every arrival is known:
--                      coverage full or arrivals), first_byte_lead_us (stream_metrics', a negative lead counted as
--                      0), head_burst_ratio and chunks_per_s (streams whose sizes are known: coverage full or
--                      partial), bucketed as 0032's durations and rates.
-- The collector's writer counts each streams block it inserts (streamscope_ingest.decode.stream_histograms) under
-- the insert's deduplication token. The INSERTs below count the rows stored before the same way in SQL (they run
-- again whole after a crash: each copy starts from an empty table).
CREATE TABLE IF NOT EXISTS stream_totals
(
    step                     UInt16,
    tenant                   LowCardinality(String),
    side                     LowCardinality(String),
    interval_start           DateTime('UTC') CODEC(Delta, ZSTD(1)),
    service                  LowCardinality(String),
    provider                 LowCardinality(String),
    model                    LowCardinality(String),
    source                   LowCardinality(String),
    coverage                 LowCardinality(String),
    streams                  SimpleAggregateFunction(sum, UInt64),
    content_chunks           SimpleAggregateFunction(sum, UInt64),
    tokens                   SimpleAggregateFunction(sum, UInt64),
    content_bytes            SimpleAggregateFunction(sum, UInt64),
    wire_bytes               SimpleAggregateFunction(sum, UInt64),
    cancelled                SimpleAggregateFunction(sum, UInt64),
    stalled                  SimpleAggregateFunction(sum, UInt64),
    over_slo                 SimpleAggregateFunction(sum, UInt64),
    frontloaded_then_stalled SimpleAggregateFunction(sum, UInt64),
    stuck_loops              SimpleAggregateFunction(sum, UInt64),
    content_chunks_by_tokens SimpleAggregateFunction(sumMap, Map(UInt16, UInt64))
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(interval_start)
ORDER BY (step, tenant, side, interval_start, service, provider, model, source, coverage)
SETTINGS non_replicated_deduplication_window = 10000;
TRUNCATE TABLE stream_totals;
INSERT INTO stream_totals
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, source, coverage, sum(n), sum(chunks), sum(t), sum(content), sum(wire), sum(c), sum(s), sum(o),
    sum(f), sum(l), sumMap(by_tokens)
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        source, coverage, count() AS n, sum(content_chunks) AS chunks, sum(tokens) AS t, sum(content_bytes) AS content,
        sum(wire_bytes) AS wire, countIf(outcome IN ('cancelled', 'disconnected')) AS c, countIf(stall_count > 0) AS s,
        countIf(ifNull(gap_max_us, 0) > 400000) AS o, countIf(frontloaded_then_stalled) AS f, countIf(stuck_loop) AS l,
        sumMap(content_chunks_by_tokens) AS by_tokens
    FROM stream_metrics
    GROUP BY tenant, side, five_s, service, provider, model, source, coverage
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, source, coverage;
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
            ('first_byte_lead_us', toFloat64(greatest(toInt64(ttft_us) - toInt64(ttfb_us), 0)), 'log'),
            ('head_burst_ratio', if(last_content_us > ttft_us + 200000 AND tokens > head_tokens,
                (head_tokens / 0.2) / ((tokens - head_tokens) / ((last_content_us - ttft_us - 200000) / 1e6)), NULL),
                'log'),
            ('chunks_per_s', if(coverage IN ('full', 'partial'), content_chunks / content_s, NULL), 'log')
        ])) AS figures
    FROM (
        SELECT *, if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL) AS content_s FROM streams
    )
)
ARRAY JOIN figures AS counted
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, figure, bucket;
