-- The GPU agent's samples, one row per (node, source, metric, engine or GPU) and time: engine gauges,
-- per-interval counter increases and histogram counts, GPU readings from NVML, the agent's own health.
-- Metric names are those of gpu_agent/samples.py; pivot with e.g. avgIf(value, metric = 'kv_usage').
CREATE TABLE IF NOT EXISTS engine_samples
(
    tenant      LowCardinality(String),
    time        DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    node_name   LowCardinality(String),
    host        LowCardinality(String),
    engine_url  LowCardinality(String),
    source      LowCardinality(String),
    metric      LowCardinality(String),
    engine      LowCardinality(String),
    gpu_uuid    LowCardinality(String),
    gpu_index   Int16,
    value       Float64 CODEC(Gorilla, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (tenant, node_name, source, metric, engine, gpu_uuid, time);
