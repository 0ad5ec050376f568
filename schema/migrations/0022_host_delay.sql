-- What the client's own host did to each chunk (streamscope.chunks.host_delay_us, streamscope.host.watch):
--   chunk_arrays.host_delay_us  microseconds of the wait before the chunk during which the reader's own host did
--                               not run it (its event loop ran late, its process was starved of CPU, the page's
--                               main thread ran a long task); measured for the first chunk and for each chunk
--                               that came 100 ms or more after the one before it, 0 otherwise and on other sides
--   streams.host_watch          how the emitter watched its host: asyncio, thread or longtask; '' when it did not
--
-- host_delay_us defaults to zeros, one a chunk: rows stored before this migration, and rows a collector of an
-- earlier version writes (or left in its spool), read as not measured, with arrays as long as gap_us, so the
-- views' ARRAY JOIN still pairs them. The default is computed on read for parts written before; nothing is
-- rewritten. Each statement can run again.
ALTER TABLE chunk_arrays ADD COLUMN IF NOT EXISTS host_delay_us Array(UInt32)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1)) AFTER render_us;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS host_watch LowCardinality(String) AFTER content_chunks_by_tokens;
-- chunks and chunk_timeline again, with the new column (a view keeps the columns it had when it was made).
CREATE OR REPLACE VIEW chunks AS
SELECT tenant, start_time, trace_id_bytes, span_id_bytes, lower(hex(trace_id_bytes)) AS trace_id,
    lower(hex(span_id_bytes)) AS span_id, service, side, provider, model, toUInt32(position - 1) AS seq,
    kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us, host_delay_us
FROM chunk_arrays
ARRAY JOIN arrayEnumerate(gap_us) AS position, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us,
    render_us, host_delay_us;
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id_bytes, span_id_bytes ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
