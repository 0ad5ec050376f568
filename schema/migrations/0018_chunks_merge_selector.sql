-- chunks takes one insert per group of requests (a few hundred thousand rows at most), and the engine merges
-- those parts in the background. With the default merge_selector_base (5), each row is rewritten by merges
-- several times while it is young: with 4 senders those merges took more CPU per chunk than decoding it
-- (benchmarks/ingest.py). A base of 20 waits for more parts of a like size before merging them, so a row is
-- rewritten fewer times; the table keeps a dozen or so active parts per partition instead of a few
-- (docs/benchmarks.md).
ALTER TABLE chunks MODIFY SETTING merge_selector_base = 20;
