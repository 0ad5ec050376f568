-- Chunks are stored one row per stream, each per-chunk column an array in chunk order (seq is the index):
-- chunk_arrays. A row costs the engine work of its own on insert and in every merge, the stream's repeated
-- values included; with the 250 or so chunks of a stream in one row, the insert costs a quarter of the CPU a
-- chunk, and the stream's ids, labels and start are stored once (3.98 bytes a chunk against 4.10:
-- benchmarks/chunk_layout.py, docs/benchmarks.md). Migration 0021 makes `chunks` a view of it with one row a
-- chunk, so every query reads the same columns as before.
--
-- This migration copies the rows of the `chunks` table; it runs again whole after a crash (the copy starts from
-- an empty table). Rows that a collector of an older version writes meanwhile are not carried over: upgrade
-- them first.
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
TRUNCATE TABLE chunk_arrays;
INSERT INTO chunk_arrays
SETTINGS insert_deduplicate = 0
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model,
    arrayMap(c -> c.2, chunks) AS kind, arrayMap(c -> c.3, chunks) AS gap_us, arrayMap(c -> c.4, chunks) AS tokens,
    arrayMap(c -> c.5, chunks) AS content_bytes, arrayMap(c -> c.6, chunks) AS wire_bytes,
    arrayMap(c -> c.7, chunks) AS paint_delay_us, arrayMap(c -> c.8, chunks) AS render_us
FROM (
    SELECT tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model,
        arraySort(groupArray((seq, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us)))
            AS chunks
    FROM chunks
    GROUP BY tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model
);
