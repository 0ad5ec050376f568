-- The GenAI semantic-convention histograms other instrumentations export over OTLP (gen_ai.client.operation.duration,
-- gen_ai.client.token.usage, gen_ai.server.time_to_first_token, ...): one row per data point, as it was sent.
--   source          the instrumentation scope that recorded it (opentelemetry.instrumentation.openai_v2, ...)
--   temporality     'cumulative' (the SDKs' default: each point counts everything since start_time) or 'delta'
--   series          one series of points: a hash of the resource, the scope, the metric, its temporality and the
--                   point's attributes
--   bounds          the explicit bucket boundaries, and bucket_counts has one more count than bounds (the last is +Inf)
--   sum             NULL when the sender left it out (OTLP allows that where measurements may be negative)
-- A cumulative point repeats what the series' earlier points counted: read genai_metric_intervals, which gives each
-- point's own interval, not this table, to count or take quantiles over a time range.
CREATE TABLE IF NOT EXISTS genai_metrics
(
    tenant          LowCardinality(String),
    time            DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    start_time      DateTime64(6, 'UTC'),
    metric          LowCardinality(String),
    unit            LowCardinality(String),
    temporality     LowCardinality(String),
    series          UInt64,
    service         LowCardinality(String),
    source          LowCardinality(String),
    operation       LowCardinality(String),
    provider        LowCardinality(String),
    model           LowCardinality(String),
    server_address  LowCardinality(String),
    token_type      LowCardinality(String),
    error_type      LowCardinality(String),
    count           UInt64,
    sum             Nullable(Float64),
    min             Nullable(Float64),
    max             Nullable(Float64),
    bounds          Array(Float64),
    bucket_counts   Array(UInt64),
    attributes      Map(LowCardinality(String), String) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (tenant, metric, series, start_time, time)
SETTINGS non_replicated_deduplication_window = 10000;

-- Each point's own interval, from since to time: a delta point as it is; a cumulative point less the series' previous
-- point with the same start, or whole (since its start) when it is the first of its start (a new series, or the sender
-- restarted) or when its counts went down or its buckets changed (a reset the start time did not show). A point sent
-- again (a retried export: the same series and time) counts nothing.
CREATE OR REPLACE VIEW genai_metric_intervals AS
SELECT
    point.tenant AS tenant, if(point.whole, point.start_time, point.previous_time) AS since, point.time AS time,
    point.metric AS metric, point.unit AS unit, point.service AS service, point.source AS source,
    point.operation AS operation, point.provider AS provider, point.model AS model,
    point.server_address AS server_address, point.token_type AS token_type, point.error_type AS error_type,
    point.bounds AS bounds,
    if(point.repeated, 0, toUInt64(point.count - if(point.whole, 0, point.previous_count))) AS count,
    if(point.repeated, 0, point.sum - if(point.whole, 0, point.previous_sum)) AS sum,
    arrayMap(
        (now, before) -> if(point.repeated, 0, toUInt64(now - if(point.whole, 0, before))),
        point.bucket_counts, point.previous_buckets
    ) AS bucket_counts
FROM
(
    SELECT
        *,
        lagInFrame(time) OVER series_points AS previous_time,
        lagInFrame(count) OVER series_points AS previous_count,
        lagInFrame(sum) OVER series_points AS previous_sum,
        arrayResize(lagInFrame(bucket_counts) OVER series_points, length(bucket_counts)) AS previous_buckets,
        row_number() OVER series_points > 1 AND time = previous_time AS repeated,
        temporality != 'cumulative' OR row_number() OVER series_points = 1 OR count < previous_count
            OR bounds != lagInFrame(bounds) OVER series_points
            OR arrayExists((now, before) -> now < before, bucket_counts, previous_buckets) AS whole
    FROM genai_metrics
    WINDOW series_points AS (PARTITION BY tenant, series, start_time ORDER BY time ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
) AS point;
