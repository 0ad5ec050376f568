-- What a client-side smoothing buffer would have shown, per stream and buffer depth, computed by the attribution
-- job from the stream's timeline as its reader saw it (ingest/streamscope_ingest/analysis/smoothing.py): the
-- buffer shows nothing until depth_ms after the first content chunk, then at most one chunk per rate_ms (the
-- stream's own median gap), so each row holds the same measures before and after.
--   added_ttft_us   how much later the first chunk was shown (the depth)
--   added_end_us    how much later the last chunk was shown
--   stalls_*        gaps between shown chunks that are stalls by the job's rules
CREATE TABLE IF NOT EXISTS stream_smoothing
(
    tenant                  LowCardinality(String),
    start_time              DateTime64(6, 'UTC') CODEC(Delta, ZSTD(1)),
    trace_id                String CODEC(ZSTD(1)),
    span_id                 String CODEC(ZSTD(1)),
    service                 LowCardinality(String),
    side                    LowCardinality(String),
    model                   LowCardinality(String),
    node_name               LowCardinality(String),
    depth_ms                Float32,
    rate_ms                 Float32,
    added_ttft_us           UInt32,
    added_end_us            UInt32,
    stalls_before           UInt32,
    stalls_after            UInt32,
    longest_gap_before_us   UInt32,
    longest_gap_after_us    UInt32,
    fluidity_before         Nullable(Float32),
    fluidity_after          Nullable(Float32),
    andes_before            Nullable(Float32),
    andes_after             Nullable(Float32)
)
ENGINE = MergeTree
PARTITION BY toDate(start_time)
ORDER BY (tenant, service, side, depth_ms, start_time, trace_id, span_id)
SETTINGS non_replicated_deduplication_window = 10000;
