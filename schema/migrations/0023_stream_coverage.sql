-- Where a stream's record came from and how much of its timeline is known:
--   streams.source    the instrumentation that sent it: 'streamscope' (the SDK, the browser snippet, ServerStream)
--                     or another project's GenAI instrumentation read by an adapter
--   streams.coverage  'full': every chunk's time and size; 'partial': chunks lost (the sender dropped span events,
--                     the oldest first, or the SDK's per-stream cap left the last ones out), so counts are a floor,
--                     gaps are only those between chunks kept, and the time to first token is unknown when the
--                     first chunks are gone; 'arrivals': each chunk's time, not its size; 'first_token': the time
--                     to the first token and the duration only; 'duration': the duration only; 'unreadable': the
--                     span said it was a stream but its chunks could not be read as the convention says
-- Figures over chunk timing (gaps, ITL goodput, stalls) read full timelines only; the others say how many were
-- left out. Rows stored before this migration came from the SDK: partial when their timeline was truncated. The
-- defaults are computed on read for parts written before; nothing is rewritten. Each statement can run again.
ALTER TABLE streams ADD COLUMN IF NOT EXISTS source LowCardinality(String) DEFAULT 'streamscope' AFTER host_watch;
ALTER TABLE streams ADD COLUMN IF NOT EXISTS coverage LowCardinality(String)
    DEFAULT if(timeline_truncated, 'partial', 'full') AFTER source;
-- stream_metrics again, with where each stream came from and how much of it is known.
CREATE OR REPLACE VIEW stream_metrics AS
SELECT
    tenant, start_time, trace_id, span_id, service, side, provider,
    if(response_model != '', response_model, request_model) AS model,
    node_name, outcome, source, coverage, tokens, content_chunks, content_chunks_by_tokens, content_bytes, wire_bytes,
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
