-- Content gaps pre-aggregated at insert: gap_histograms counts, per stream start interval and labels, the gaps
-- between content chunks by bucket, so the fleet panels over gaps (the ITL heatmap, the gap quantiles by model)
-- read a number of rows that grows with the range and the labels, not with the chunks stored.
--   step            the interval's length in seconds: each gap is counted at every step (5 s, 1 min, 5 min, 1 h);
--                   a query reads the longest step its own interval is a whole multiple of
--   interval_start  the start of the interval that holds the stream's start_time
--   itl_upper_ms    the ITL heatmap's row (streamscope_dashboards.panels.ITL_BUCKETS_MS): the smallest bound at
--                   or above the gap, 65535 above them all, 0 for a gap of 0 (no row)
--   gap_bucket      0 for a gap of 0, else k for a gap in [1.01^(k-1), 1.01^k) µs: a quantile read as the
--                   bucket's geometric middle is within 0.5 % of the exact one, ranked as quantileExact ranks
--   gaps            how many gaps; gap_max_us the longest
-- The collector's writer counts the chunks it inserts (streamscope_ingest.decode.gap_histograms), under the
-- insert's deduplication token; the INSERT below counts, the same way in SQL, the chunks stored before (it runs
-- again whole after a crash: the copy starts from an empty table). Chunks that collectors write while it runs may
-- be counted twice: stop them first. Raw chunks stay the source of one trace's drilldown and of exact
-- re-computation.
CREATE TABLE IF NOT EXISTS gap_histograms
(
    step           UInt16,
    tenant         LowCardinality(String),
    side           LowCardinality(String),
    interval_start DateTime('UTC') CODEC(Delta, ZSTD(1)),
    service        LowCardinality(String),
    provider       LowCardinality(String),
    model          LowCardinality(String),
    itl_upper_ms   UInt16,
    gap_bucket     UInt16,
    gaps           SimpleAggregateFunction(sum, UInt64),
    gap_max_us     SimpleAggregateFunction(max, UInt32)
)
ENGINE = AggregatingMergeTree
PARTITION BY toDate(interval_start)
ORDER BY (step, tenant, side, interval_start, service, provider, model, itl_upper_ms, gap_bucket)
SETTINGS non_replicated_deduplication_window = 10000;
TRUNCATE TABLE gap_histograms;
INSERT INTO gap_histograms
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, itl_upper_ms, gap_bucket, sum(counted) AS gaps, max(longest) AS gap_max_us
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        multiIf(gap = 0, 0, gap > 3200000, 65535,
            arrayFirst(bound -> gap <= bound * 1000, [10, 25, 50, 100, 200, 400, 800, 1600, 3200])) AS itl_upper_ms,
        if(gap = 0, 0, toUInt16(floor(log(gap) / log(1.01)) + 1)) AS gap_bucket,
        count() AS counted, max(gap) AS longest
    FROM chunk_arrays
    ARRAY JOIN gap_us AS gap, kind AS chunk_kind
    WHERE chunk_kind = 'content'
    GROUP BY tenant, side, five_s, service, provider, model, itl_upper_ms, gap_bucket
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, itl_upper_ms, gap_bucket;
