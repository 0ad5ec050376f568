-- Inserts are idempotent: the collector names each insert with a deduplication token (its spool segment and
-- the table), and each table remembers the last 10,000 tokens it took, so an insert repeated after a crash
-- (the store had the rows, the spool did not hear it) adds nothing. Replicated tables do this by default;
-- plain MergeTree needs the window set.
ALTER TABLE chunks MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE streams MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE ground_truth MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE engine_samples MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE engine_events MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE stalls MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE stream_quality MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE ingest_requests MODIFY SETTING non_replicated_deduplication_window = 10000;
ALTER TABLE alerts MODIFY SETTING non_replicated_deduplication_window = 10000;
