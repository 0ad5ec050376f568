-- Every stall (a content gap over the absolute threshold, or well over the stream's own median) on the
-- client side of a stream, with the cause attribution gave it, its confidence and the evidence used.
-- Written by the collector's attribution job once both sides of a stream and the node's events are in.
CREATE TABLE IF NOT EXISTS stalls
(
    tenant          LowCardinality(String),
    start_time      DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    end_time        DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    trace_id        String CODEC(ZSTD(1)),
    span_id         String CODEC(ZSTD(1)),
    service         LowCardinality(String),
    side            LowCardinality(String),
    model           LowCardinality(String),
    node_name       LowCardinality(String),
    seq             UInt32,
    gap_us          UInt32,
    server_gap_us   Nullable(UInt32),
    server_seq      Nullable(UInt32),
    cause           LowCardinality(String),
    confidence      Float32,
    evidence        Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    attributed_at   DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, cause, start_time, trace_id, seq);

-- How far the attribution job has got: streams ingested up to `through` have been attributed.
CREATE TABLE IF NOT EXISTS attribution_progress
(
    job      LowCardinality(String),
    through  DateTime64(3, 'UTC'),
    at       DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = ReplacingMergeTree(at)
ORDER BY job;
