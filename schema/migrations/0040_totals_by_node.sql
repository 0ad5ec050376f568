-- stream_totals.node_name   the engine node that served the streams (the server side's; empty where no node is
--                           known, as on the client side), a key of the sums: a change at one node of several (its
--                           tokens per chunk: chunking_changes) is no longer averaged away by the others.
-- stream_totals is counted again from the streams stored (as migration 0039 did). Each statement can run again.
ALTER TABLE stream_totals ADD COLUMN IF NOT EXISTS node_name LowCardinality(String) AFTER tokens_estimated,
    MODIFY ORDER BY (step, tenant, side, interval_start, service, provider, model, source, coverage, tokens_estimated,
        node_name);
TRUNCATE TABLE stream_totals;
INSERT INTO stream_totals
SELECT step, tenant, side, toDateTime(intDiv(toUInt32(five_s), step) * step, 'UTC') AS interval_start, service,
    provider, model, source, coverage, tokens_estimated, node_name, sum(n), sum(chunks), sum(t), sum(content),
    sum(wire), sum(c), sum(s), sum(o), sum(f), sum(l), sum(u), sum(wc), sum(wb), sum(ct), sum(cc), sumMap(by_tokens)
FROM (
    SELECT tenant, side, toStartOfInterval(start_time, toIntervalSecond(5)) AS five_s, service, provider, model,
        source, coverage, tokens_estimated, node_name, count() AS n, sum(content_chunks) AS chunks, sum(tokens) AS t,
        sum(content_bytes) AS content, sum(wire_bytes) AS wire, countIf(outcome IN ('cancelled', 'disconnected')) AS c,
        countIf(stall_count > 0) AS s, countIf(ifNull(gap_max_us, 0) > 400000) AS o,
        countIf(frontloaded_then_stalled) AS f, countIf(stuck_loop) AS l, countIf(outcome = 'unknown') AS u,
        sumIf(content_chunks, wire_bytes > 0) AS wc, sumIf(content_bytes, wire_bytes > 0) AS wb,
        sum(ifNull(counted_tokens, 0)) AS ct, sumIf(content_chunks, counted_tokens IS NOT NULL) AS cc,
        sumMap(content_chunks_by_tokens) AS by_tokens
    FROM stream_metrics
    GROUP BY tenant, side, five_s, service, provider, model, source, coverage, tokens_estimated, node_name
)
ARRAY JOIN [5, 60, 300, 3600] AS step
GROUP BY step, tenant, side, interval_start, service, provider, model, source, coverage, tokens_estimated, node_name;
