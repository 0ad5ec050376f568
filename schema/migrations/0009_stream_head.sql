-- The shape of a stream's delivery, computed at ingest from its chunks (reproducible from `chunks`):
--   last_content_us  offset of the last content chunk, so first → last content is ttft_us .. last_content_us
--   head_tokens      tokens in content chunks within 200 ms of the first one (burst-at-head)
ALTER TABLE streams ADD COLUMN IF NOT EXISTS last_content_us Nullable(UInt64) AFTER repetition_score;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS head_tokens UInt32 AFTER last_content_us;
