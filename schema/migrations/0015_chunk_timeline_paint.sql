-- chunk_timeline again, so that its SELECT * takes in the browser's paint_delay_us and render_us (0014): a view
-- keeps the columns it had when it was created. Attribution reads when each chunk was shown from here.
CREATE OR REPLACE VIEW chunk_timeline AS
SELECT
    *,
    toUInt64(sum(if(kind IN ('first', 'content'), gap_us, 0))
        OVER (PARTITION BY tenant, trace_id, span_id ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)
        + if(kind IN ('lead', 'aside'), gap_us, 0)) AS offset_us,
    start_time + toIntervalMicrosecond(offset_us) AS time
FROM chunks;
