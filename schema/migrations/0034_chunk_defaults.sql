-- chunk_arrays.paint_delay_us and render_us default to zeros, one a chunk, as the per-chunk arrays added after them
-- do: the writer leaves a column that holds only zeros out of its insert, and the store fills the same zeros
-- (ingest/streamscope_ingest/decode/columns.py, without_zero_defaults). Only the DEFAULT changes; no part is
-- rewritten. Each statement can run again.
ALTER TABLE chunk_arrays MODIFY COLUMN paint_delay_us Array(UInt32)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1));
ALTER TABLE chunk_arrays MODIFY COLUMN render_us Array(UInt32)
    DEFAULT arrayWithConstant(length(gap_us), 0) CODEC(T64, ZSTD(1));
