-- chunk_arrays parts are written compact (one file holding every column) up to 256 MiB uncompressed, not only up
-- to the engine's default 10 MiB: an insert of a group of requests is tens of MiB, and as a wide part it made two
-- files for each column and each array's sizes. Creating those files cost the insert more than writing its data
-- into one, the more so on a file system that merged parts are often deleted from, where finding a free inode
-- takes long (docs/benchmarks.md). Merges make wide parts past the threshold, as reading a few columns of a
-- large part wants. Only new parts change.
ALTER TABLE chunk_arrays MODIFY SETTING min_bytes_for_wide_part = 268435456;
