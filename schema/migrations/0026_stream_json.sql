-- A JSON document followed as it streamed (structured output, or the first tool call's arguments), from the
-- streamscope.json.* span attributes:
--   json_document     'content' or 'tool_call'; '' when the stream carried none that was followed
--   json_outcome      'valid' (closed, nothing after it), 'truncated' (the stream ended first), 'malformed'
--   json_valid_us     µs from the span start to the chunk that closed the document; NULL if it never closed
--   json_field_count  top-level fields (or array elements) whose values were complete
--   json_fields       the first 32 of them, in the order they completed, with json_field_us: µs from the span
--                     start to the chunk that completed each (json_field_us[1] is the time to the first usable field)
-- Rows written before have none. Each statement can run again.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_document LowCardinality(String) DEFAULT '' AFTER coverage;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_outcome LowCardinality(String) DEFAULT '' AFTER json_document;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_valid_us Nullable(UInt64) DEFAULT NULL AFTER json_outcome;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_field_count UInt32 DEFAULT 0 AFTER json_valid_us;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_fields Array(String) DEFAULT [] AFTER json_field_count;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS json_field_us Array(UInt64) DEFAULT [] AFTER json_fields;
