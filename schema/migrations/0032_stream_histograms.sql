-- Per-stream figures pre-aggregated at insert, so the fleet panels that take medians and shares of them (the pace,
-- stall rate and tool call pause of model_texture; smoothing_trade) read a number of rows that grows with the range
-- and the labels, not with the streams stored. Each row counts the streams whose figure fell in one bucket:
--   step, interval_start  as in gap_histograms (migration 0030): counted at 5 s, 1 min, 5 min and 1 h
--   figure                stream_histograms: stall_count, tool_call (1 if it called one, else 0), tokens_per_s
--                         (stream_metrics' pace), tool_call_pause_us; smoothing_histograms: added_end_us,
--                         stalls_before/after, longest_gap_before/after_us, fluidity_before/after,
--                         andes_before/after
--   bucket                counts: the count; durations and rates: k for [1.01^(k-1), 1.01^k), -32768 for 0;
--                         quality indices: floor(index × 10000). A NULL figure is not counted.
--   streams               how many streams
-- The collector's writer counts each streams block it inserts (streamscope_ingest.decode.stream_histograms) under
-- the insert's deduplication token; the attribution job counts the smoothing rows of timed streams (coverage
-- 'full' or 'arrivals', what smoothing_trade reads) as it writes them. The INSERTs below count the rows stored
-- before, the same way in SQL (they run again whole after a crash: each copy starts from an empty table).
CREATE TABLE IF NOT EXISTS stream_histograms
(
    step           UInt16,
    tenant         LowCardinality(String),
    side           LowCardinality(String),
    interval_start DateTime('UTC') CODEC(Delta, ZSTD(1)),
    service        LowCardinality(String),
    provider       LowCardinality(String),
    model          LowCardinality(String),
    figure         LowCardinality(String),
    bucket         Int16,
    streams        SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(interval_start)
ORDER BY (step, tenant, side, interval_start, service, provider, model, figure, bucket)
SETTINGS non_replicated_deduplication_window = 10000;
CREATE TABLE IF NOT EXISTS smoothing_histograms
(
    step           UInt16,
    tenant         LowCardinality(String),
    side           LowCardinality(String),
    interval_start DateTime('UTC') CODEC(Delta, ZSTD(1)),
    service        LowCardinality(String),
    model          LowCardinality(String),
    depth_ms       Float32,
    figure         LowCardinality(String),
    bucket         Int16,
    streams        SimpleAggregateFunction(sum, UInt64)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(interval_start)
ORDER BY (step, tenant, side, interval_start, service, model, depth_ms, figure, bucket)
SETTINGS non_replicated_deduplication_window = 10000;
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
            ('tokens_per_s', if(last_content_us > ttft_us, tokens / ((last_content_us - ttft_us) / 1e6), NULL), 'log'),
            ('tool_call_pause_us', toFloat64(tool_call_pause_us), 'log')
        ])) AS figures
    FROM streams
)
ARRAY JOIN figures AS counted
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, figure, bucket;
TRUNCATE TABLE smoothing_histograms;
INSERT INTO smoothing_histograms
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    model, depth_ms, counted.1 AS figure, assumeNotNull(counted.2) AS bucket, count() AS streams
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, model, depth_ms,
        arrayFilter(f -> f.2 IS NOT NULL, arrayMap(f -> (f.1, if(f.2 IS NULL, NULL, if(f.3 = 'log' AND f.2 = 0, -32768,
            toInt16(greatest(-32767, least(32767, multiIf(f.3 = 'count', f.2, f.3 = 'index', floor(f.2 * 10000),
                floor(log(f.2) / log(1.01)) + 1))))))), [
            ('added_end_us', toFloat64(added_end_us), 'log'),
            ('stalls_before', toFloat64(stalls_before), 'count'),
            ('stalls_after', toFloat64(stalls_after), 'count'),
            ('longest_gap_before_us', toFloat64(longest_gap_before_us), 'log'),
            ('longest_gap_after_us', toFloat64(longest_gap_after_us), 'log'),
            ('fluidity_before', toFloat64(fluidity_before), 'index'),
            ('fluidity_after', toFloat64(fluidity_after), 'index'),
            ('andes_before', toFloat64(andes_before), 'index'),
            ('andes_after', toFloat64(andes_after), 'index')
        ])) AS figures
    FROM stream_smoothing
    WHERE (trace_id, span_id) NOT IN (
        SELECT trace_id, span_id FROM streams WHERE coverage NOT IN ('full', 'arrivals')
    )
)
ARRAY JOIN figures AS counted
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, model, depth_ms, figure, bucket;
