-- A stream whose source did not say how it ended (no finish reason, no usage, no error: another instrumentation's
-- span of a stream the app closed early looks so) is stored with outcome 'unknown', and counted apart:
--   stream_totals.unknown_outcome  how many of the streams ended unknown; a cancellation rate is over the others
-- stream_totals is counted again from the streams stored (as migration 0033 did), its new column with them. Each
-- statement can run again.
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS unknown_outcome SimpleAggregateFunction(sum, UInt64)
    AFTER stuck_loops;
TRUNCATE TABLE stream_totals;
INSERT INTO stream_totals
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, source, coverage, sum(n), sum(chunks), sum(t), sum(content), sum(wire), sum(c), sum(s), sum(o),
    sum(f), sum(l), sum(u), sumMap(by_tokens)
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        source, coverage, count() AS n, sum(content_chunks) AS chunks, sum(tokens) AS t, sum(content_bytes) AS content,
        sum(wire_bytes) AS wire, countIf(outcome IN ('cancelled', 'disconnected')) AS c, countIf(stall_count > 0) AS s,
        countIf(ifNull(gap_max_us, 0) > 400000) AS o, countIf(frontloaded_then_stalled) AS f, countIf(stuck_loop) AS l,
        countIf(outcome = 'unknown') AS u,
        sumMap(content_chunks_by_tokens) AS by_tokens
    FROM stream_metrics
    GROUP BY tenant, side, five_s, service, provider, model, source, coverage
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, source, coverage;
