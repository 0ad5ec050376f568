-- One row per OTLP export request the collector stored: its size as received and as a message, and the rows
-- it wrote per table, so OTLP bytes per chunk (and per span, per log record) come from the store itself.
-- Written in the same insert as the request's rows: a request's row exists exactly when its data does.
CREATE TABLE IF NOT EXISTS ingest_requests
(
    tenant            LowCardinality(String),
    time              DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    signal            LowCardinality(String),
    transport         LowCardinality(String),
    content_type      LowCardinality(String),
    content_encoding  LowCardinality(String),
    received_bytes    UInt64 CODEC(T64, ZSTD(1)),
    message_bytes     UInt64 CODEC(T64, ZSTD(1)),
    rejected          UInt32,
    ignored           UInt32,
    rows              Map(LowCardinality(String), UInt64) CODEC(ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(time)
ORDER BY (tenant, signal, time);
