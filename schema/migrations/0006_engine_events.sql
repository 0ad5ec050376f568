-- Events the GPU agent derived from its samples: preemption, kv_high_water, prefill_burst,
-- spec_acceptance_drop, queue_spike, engine_restart, xid, throttle. end_time is NULL while an event is open.
CREATE TABLE IF NOT EXISTS engine_events
(
    tenant      LowCardinality(String),
    start_time  DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    end_time    Nullable(DateTime64(6, 'UTC')),
    node_name   LowCardinality(String),
    host        LowCardinality(String),
    engine      LowCardinality(String),
    kind        LowCardinality(String),
    magnitude   Float64,
    gpu_uuid    LowCardinality(String),
    xid         Nullable(Int32),
    attributes  Map(LowCardinality(String), String) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, node_name, kind, start_time);
