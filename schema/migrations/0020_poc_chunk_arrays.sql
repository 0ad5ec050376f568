CREATE TABLE IF NOT EXISTS chunk_arrays
(
    tenant         LowCardinality(String),
    start_time     DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    trace_id_bytes FixedString(16) CODEC(ZSTD(1)),
    span_id_bytes  FixedString(8) CODEC(ZSTD(1)),
    service        LowCardinality(String),
    side           LowCardinality(String),
    provider       LowCardinality(String),
    model          LowCardinality(String),
    kind           Array(Enum8('lead' = 0, 'first' = 1, 'content' = 2, 'aside' = 3)) CODEC(ZSTD(1)),
    gap_us         Array(UInt32) CODEC(T64, ZSTD(1)),
    tokens         Array(UInt16) CODEC(T64, ZSTD(1)),
    content_bytes  Array(UInt32) CODEC(T64, ZSTD(1)),
    wire_bytes     Array(UInt32) CODEC(T64, ZSTD(1)),
    paint_delay_us Array(UInt32) CODEC(T64, ZSTD(1)),
    render_us      Array(UInt32) CODEC(T64, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, service, side, toStartOfMinute(start_time), trace_id_bytes, span_id_bytes)
SETTINGS non_replicated_deduplication_window = 10000;
DROP TABLE IF EXISTS chunks;
CREATE VIEW IF NOT EXISTS chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us
FROM chunk_arrays
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us;
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
