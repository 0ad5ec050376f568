-- `chunks` becomes a view of chunk_arrays (0020) with one row a chunk, under the same names as the table it
-- replaces: the ids as bytes and as hex, seq from 0. Filters on the stream's columns (time, side, labels,
-- ids) reach chunk_arrays's primary key before the arrays are unrolled. Each statement can run again.
DROP TABLE IF EXISTS chunks;
CREATE VIEW IF NOT EXISTS chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us
FROM chunk_arrays
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us,
    render_us;
-- chunk_timeline again: a view keeps the columns its SELECT * had when it was made.
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
