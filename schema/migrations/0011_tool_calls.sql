-- Where a stream's first tool call starts, from the span's streamscope.first_tool_call_chunk:
--   first_tool_call_seq  seq (in chunks) of the first chunk carrying part of a tool call; NULL when the stream
--                        called no tool, or when its timeline lost leading chunk events so the index cannot be
--                        placed. The pause before the tool call is that chunk's chunks.gap_us.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS first_tool_call_seq Nullable(UInt32) AFTER head_tokens;
