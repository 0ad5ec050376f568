-- Every slow start (a client stream whose first content came a second or more after its request), with the cause
-- attribution gave it (ingest/streamscope_ingest/analysis/first_token.py), its confidence and the evidence used.
--   ttft_us       the client's wait for its first content
--   upstream_us   the server's (or the gateway's) own wait for its first content; NULL when neither recorded it
--   path_us       the rest of the wait less the client host's part; NULL with no upstream side
--   host_us       how long the client's own host did not run its reader in the wait (0 when not watched)
CREATE TABLE IF NOT EXISTS slow_starts
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
    ttft_us         UInt32,
    upstream_us     Nullable(UInt32),
    path_us         Nullable(UInt32),
    host_us         UInt32,
    cause           LowCardinality(String),
    confidence      Float32,
    evidence        Map(LowCardinality(String), String) CODEC(ZSTD(1)),
    attributed_at   DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, cause, start_time, trace_id)
SETTINGS non_replicated_deduplication_window = 10000;
