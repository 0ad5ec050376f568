-- Every hold of the reader's own host in a wait, summed (streamscope.chunks.host_held_total_us):
--   chunk_arrays.host_held_total_us   per chunk, where more than host_held_us (the host held the reader several
--                                     times in one wait: a host busy in fits); an empty array, read as zeros, for
--                                     the rest and for rows written before
-- Nothing is rewritten. Each statement can run again.
ALTER TABLE chunk_arrays ADD COLUMN IF NOT EXISTS host_held_total_us Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1))
    AFTER host_held_us;
-- chunks and chunk_timeline again, with the new column.
CREATE OR REPLACE VIEW chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us, host_delay_us, host_held_us,
    host_held_total_us, retracted_bytes, retracted_tokens
FROM (
    SELECT tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model, kind, gap_us, tokens,
        content_bytes, wire_bytes, arrayResize(paint_delay_us, length(gap_us)) AS paint_delays,
        arrayResize(render_us, length(gap_us)) AS renders, arrayResize(host_delay_us, length(gap_us)) AS host_delays,
        arrayResize(host_held_us, length(gap_us)) AS host_holds,
        arrayResize(host_held_total_us, length(gap_us)) AS host_held_totals,
        arrayResize(retracted_bytes, length(gap_us)) AS retracted_byte_counts,
        arrayResize(retracted_tokens, length(gap_us)) AS retracted_token_counts
    FROM chunk_arrays
)
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes,
    paint_delays AS paint_delay_us, renders AS render_us, host_delays AS host_delay_us, host_holds AS host_held_us,
    host_held_totals AS host_held_total_us, retracted_byte_counts AS retracted_bytes,
    retracted_token_counts AS retracted_tokens;
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside', 'retract'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
