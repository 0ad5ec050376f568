-- Each stream's content chunks (kinds first and content) counted by token count, computed at ingest:
--   content_chunks_by_tokens  token count -> content chunks that carried that many tokens
-- Summed over streams (sumMap), the counts give the exact median tokens per chunk of any set of streams, as
-- quantileExact(0.5)(tokens) over their chunks would, from one row per stream instead of one per chunk: the
-- tokens-per-chunk panels and the chunking alert read 50,000 rows instead of 10 million (docs/benchmarks.md).
--
-- Streams stored before this migration get their counts from their chunks. A mutation cannot read another
-- table without naming its database, so streams is rebuilt with them, as 0017 rebuilt chunks: copied into
-- streams_0019 with the counts joined in, swapped in by name, and the old table dropped. Each step can run
-- again after a crash. Ids are compared as FixedString: a String from unhex() would lose a trailing zero byte.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS content_chunks_by_tokens Map(UInt16, UInt32) AFTER first_tool_call_seq;
DROP TABLE IF EXISTS streams_0019;
CREATE TABLE streams_0019 AS streams;
INSERT INTO streams_0019
SETTINGS insert_deduplicate = 0
SELECT s.* REPLACE (h.counts AS content_chunks_by_tokens)
FROM streams AS s
LEFT JOIN (
    SELECT tenant, trace_id_bytes, span_id_bytes,
        CAST(sumMap(map(tokens, toUInt32(1))), 'Map(UInt16, UInt32)') AS counts
    FROM chunks
    WHERE kind IN ('first', 'content')
    GROUP BY tenant, trace_id_bytes, span_id_bytes
) AS h ON h.tenant = s.tenant AND h.trace_id_bytes = toFixedString(unhex(s.trace_id), 16)
    AND h.span_id_bytes = toFixedString(unhex(s.span_id), 8);
EXCHANGE TABLES streams AND streams_0019;
DROP TABLE streams_0019;
-- stream_metrics again, with the counts.
CREATE OR REPLACE VIEW stream_metrics AS
SELECT
    tenant, start_time, trace_id, span_id, service, side, provider,
    if(response_model != '', response_model, request_model) AS model,
    node_name, outcome, tokens, content_chunks, content_chunks_by_tokens, content_bytes, wire_bytes,
    ttfb_us, ttft_us, gap_p50_us, gap_p95_us, gap_p99_us, gap_max_us, jitter_ratio, stall_count,
    cancel_offset_us, tokens_after_cancel, repetition_score,
    ttft_us - ttfb_us AS first_byte_lead_us,
    if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL) AS content_s,
    tokens / content_s AS tokens_per_s,
    content_chunks / content_s AS chunks_per_s,
    head_tokens / nullIf(tokens, 0) AS head_share,
    if(last_content_us > ttft_us + 200000 AND tokens > head_tokens,
       (head_tokens / 0.2) / ((tokens - head_tokens) / ((last_content_us - ttft_us - 200000) / 1e6)),
       NULL) AS head_burst_ratio,
    toBool(ifNull(head_burst_ratio >= 3, false) AND stall_count > 0) AS frontloaded_then_stalled,
    toBool(ifNull(repetition_score >= 0.5, false)) AS stuck_loop,
    wire_bytes / nullIf(content_bytes, 0) AS wire_per_content_byte
FROM streams;
