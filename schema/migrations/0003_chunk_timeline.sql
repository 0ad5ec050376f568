-- Chunks with their offsets from the span start and absolute times, rebuilt exactly from the stored gaps:
-- a content chunk's offset is the running sum of content gaps; a chunk without content sits gap_us after
-- the latest content chunk before it. Use it for one stream's timeline (drilldowns), not fleet scans.
CREATE VIEW IF NOT EXISTS chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id, span_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
