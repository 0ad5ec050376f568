-- Content a stream showed and then took back (streamscope.chunks.retracted_bytes, retracted_tokens):
--   chunk_arrays.retracted_bytes, retracted_tokens  per chunk, the content already delivered that it withdrew
--                               from the end of what was shown (0 for the rest); zeros for rows written before
--   chunks.kind 'retract'       a chunk that withdrew content and carried none of its own (one that carried some
--                               replaced text, and stays 'content')
--   streams.retractions         chunks that withdrew content; retracted_bytes and retracted_tokens their totals
--   streams.retraction_shown_us per withdrawing chunk: µs the oldest byte it withdrew had been on screen
-- Defaults are computed on read for parts written before; nothing is rewritten. Each statement can run again.
ALTER TABLE chunk_arrays MODIFY COLUMN kind
    Array(Enum8('lead' = 0, 'first' = 1, 'content' = 2, 'aside' = 3, 'retract' = 4)) CODEC(ZSTD(1));
ALTER TABLE chunk_arrays ADD COLUMN IF NOT EXISTS retracted_bytes Array(UInt32)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1)) AFTER host_delay_us;
ALTER TABLE chunk_arrays ADD COLUMN IF NOT EXISTS retracted_tokens Array(UInt16)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1)) AFTER retracted_bytes;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS retractions UInt32 DEFAULT 0 AFTER json_field_us;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS retracted_bytes UInt64 DEFAULT 0 AFTER retractions;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS retracted_tokens UInt64 DEFAULT 0 AFTER retracted_bytes;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS retraction_shown_us Array(UInt64) DEFAULT [] AFTER retracted_tokens;
-- chunks and chunk_timeline again, with the new columns; a retraction is placed in time like an aside.
CREATE OR REPLACE VIEW chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us, host_delay_us, retracted_bytes,
    retracted_tokens
FROM chunk_arrays
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us,
    render_us, host_delay_us, retracted_bytes, retracted_tokens;
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside', 'retract'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
