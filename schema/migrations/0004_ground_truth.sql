-- What the demo workload really did to streams (streamscope.ground_truth log records): one row per cause
-- and run of delayed chunks, keyed like the streams it affected, so attribution is scored with a join.
CREATE TABLE IF NOT EXISTS ground_truth
(
    tenant         LowCardinality(String),
    start_time     DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    end_time       DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    cause          LowCardinality(String),
    node_name      LowCardinality(String),
    scenario       LowCardinality(String),
    trace_id       String CODEC(ZSTD(1)),
    request_id     String CODEC(ZSTD(1)),
    chunk_indices  Array(UInt32),
    magnitude      Float64,
    service        LowCardinality(String),
    attributes     Map(LowCardinality(String), String) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, scenario, cause, start_time);
