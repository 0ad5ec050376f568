-- Streaming quality indices per stream (client and browser sides, and server streams without a client
-- span), computed by the attribution job: Etalon's fluidity-index and an Andes-style QoE, with the
-- deadlines and reading pace they were computed against, so every value can be recomputed.
CREATE TABLE IF NOT EXISTS stream_quality
(
    tenant                  LowCardinality(String),
    start_time              DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    trace_id                String CODEC(ZSTD(1)),
    span_id                 String CODEC(ZSTD(1)),
    service                 LowCardinality(String),
    side                    LowCardinality(String),
    model                   LowCardinality(String),
    node_name               LowCardinality(String),
    stalls                  UInt32,
    fluidity_index          Nullable(Float32),
    andes_qoe               Nullable(Float32),
    first_deadline_ms       Float32,
    token_deadline_ms       Float32,
    reading_tokens_per_s    Float32
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, service, side, start_time, trace_id, span_id);
