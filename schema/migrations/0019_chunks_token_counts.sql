-- The tokens-per-chunk panels take a median of `tokens` per interval, provider and model over every content
-- chunk in the range: 10 million rows grouped by three keys, the slowest panels of all (benchmarks/
-- query_latency.py). A stream's chunks share its labels and start time, and carry a few distinct token counts,
-- so this projection keeps one row per stream, kind and token count, with how many chunks had it: five rows
-- for a stream of 200 chunks in the benchmark. The engine answers a query grouped by these columns from it, and the
-- panels take their median weighted by those counts: the same exact median, from a fortieth of the rows.
-- It costs the insert its aggregation and the disk about 0.1 byte a chunk (docs/benchmarks.md). A filter on a
-- column it lacks (the route, through trace ids) reads the table itself.
ALTER TABLE chunks ADD PROJECTION IF NOT EXISTS token_counts (
    SELECT tenant, service, side, provider, model, start_time, kind, tokens, count()
    GROUP BY tenant, service, side, provider, model, start_time, kind, tokens
);
ALTER TABLE chunks MATERIALIZE PROJECTION token_counts;
