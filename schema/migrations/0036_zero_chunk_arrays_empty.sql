-- chunk_arrays' per-chunk arrays that are zero throughout for most streams (paint delay and render time, host
-- delay and hold, retracted bytes and tokens) default to an empty array: a row keeps them only when one of its
-- chunks has a value. The writer leaves a column that holds only zeros out of its insert
-- (streamscope_ingest.decode.columns.without_zero_defaults), and the store then keeps nothing for it, where it
-- kept a zero a chunk that each insert wrote and each merge rewrote (docs/benchmarks.md). Readers take an
-- empty array as zeros, one a chunk: the chunks view below, and the attribution job. Only the DEFAULT changes;
-- no part is rewritten, and the zeros of rows stored before read as they did. Each statement can run again.
ALTER TABLE chunk_arrays MODIFY COLUMN paint_delay_us Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN render_us Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN host_delay_us Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN host_held_us Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN retracted_bytes Array(UInt32) DEFAULT [] CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN retracted_tokens Array(UInt16) DEFAULT [] CODEC(T64, ZSTD(1));
-- chunks again: each of those arrays resized to the stream's chunks, an empty one to zeros.
CREATE OR REPLACE VIEW chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us, host_delay_us, host_held_us,
    retracted_bytes, retracted_tokens
FROM (
    SELECT tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model, kind, gap_us, tokens,
        content_bytes, wire_bytes, arrayResize(paint_delay_us, length(gap_us)) AS paint_delays,
        arrayResize(render_us, length(gap_us)) AS renders, arrayResize(host_delay_us, length(gap_us)) AS host_delays,
        arrayResize(host_held_us, length(gap_us)) AS host_holds,
        arrayResize(retracted_bytes, length(gap_us)) AS retracted_byte_counts,
        arrayResize(retracted_tokens, length(gap_us)) AS retracted_token_counts
    FROM chunk_arrays
)
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes,
    paint_delays AS paint_delay_us, renders AS render_us, host_delays AS host_delay_us, host_holds AS host_held_us,
    retracted_byte_counts AS retracted_bytes, retracted_token_counts AS retracted_tokens;
