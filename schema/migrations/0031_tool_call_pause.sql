-- The pause before a stream's first tool call, kept with the stream:
--   streams.tool_call_pause_us  the gap before the chunk at first_tool_call_seq (what model_texture's median pause
--                               reads, without reading the stream's chunks); NULL without a tool call, and for
--                               rows written before (their tool calls are still counted)
-- Nothing is rewritten. The statement can run again.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS tool_call_pause_us Nullable(UInt32) DEFAULT NULL AFTER first_tool_call_seq;
