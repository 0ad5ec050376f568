-- One row per chunk. Only the gap is stored, not the offset: both cost about 2 bytes per chunk
-- (benchmarks/chunk_codecs.py) and the gap is what inter-token-latency queries read; offsets are
-- derived in the chunk_timeline view. gap_us is microseconds since the previous chunk that carried
-- content (since the span start for chunks before the first content), so a ping or usage chunk in a pause
-- never splits a stall in two.
--   kind: lead    no content, before the first content chunk (role, headers-only chunks)
--         first   the first chunk carrying content: gap_us is the time to first token
--         content a later chunk carrying content: gap_us is one inter-token latency
--         aside   no content, after the first content chunk (ping, usage, stop)
-- service/side/provider/model repeat the stream's values so dashboards filter chunks without a join;
-- sorted with their stream they compress to almost nothing.
CREATE TABLE IF NOT EXISTS chunks
(
    tenant         LowCardinality(String),
    start_time     DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    trace_id       String CODEC(ZSTD(1)),
    span_id        String CODEC(ZSTD(1)),
    service        LowCardinality(String),
    side           LowCardinality(String),
    provider       LowCardinality(String),
    model          LowCardinality(String),
    seq            UInt32 CODEC(Delta, ZSTD(1)),
    kind           Enum8('lead' = 0, 'first' = 1, 'content' = 2, 'aside' = 3) CODEC(ZSTD(1)),
    gap_us         UInt32 CODEC(T64, ZSTD(1)),
    tokens         UInt16 CODEC(T64, ZSTD(1)),
    content_bytes  UInt32 CODEC(T64, ZSTD(1)),
    wire_bytes     UInt32 CODEC(T64, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, service, side, toStartOfMinute(start_time), trace_id, span_id, seq);
