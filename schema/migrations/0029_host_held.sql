-- The longest hold of the reader's own host anywhere in a wait (streamscope.chunks.host_held_us):
--   chunk_arrays.host_held_us   per chunk, where longer than host_delay_us: a hold that ended well before the
--                               read, which did not delay the read but held a peer on the same host (an engine
--                               beside its load generator); 0 for the rest, and for rows written before
-- The default is computed on read for parts written before; nothing is rewritten. Each statement can run again.
ALTER TABLE chunk_arrays ADD COLUMN IF NOT EXISTS host_held_us Array(UInt32)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1)) AFTER host_delay_us;
-- chunks and chunk_timeline again, with the new column.
CREATE OR REPLACE VIEW chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us, host_delay_us, host_held_us,
    retracted_bytes, retracted_tokens
FROM chunk_arrays
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us,
    render_us, host_delay_us, host_held_us, retracted_bytes, retracted_tokens;
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside', 'retract'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
