-- Per-stream derived metrics, on top of the statistics computed at ingest. A plain view over `streams`, so
-- filters on its columns (time, service, side) reach the table's primary key. Dashboards and the report read
-- these names; every value is arithmetic on stored columns.
--   first_byte_lead_us        first byte → first content chunk (a buffering gateway or a long preamble)
--   tokens_per_s, chunks_per_s delivery pace between the first and the last content chunk
--   head_share                share of the stream's tokens that arrived in its first 200 ms of content
--   head_burst_ratio          pace in those 200 ms over the pace of the rest (1 = even; 200 ms is
--                             ingest/timeline.py HEAD_WINDOW_US)
--   frontloaded_then_stalled  a burst at the head (ratio >= 3) and then a stall: a stream that looked fast
--                             on the first screen and then froze
--   stuck_loop                the text repeats itself (the SDK's repetition score: repeated word 3-grams)
CREATE VIEW IF NOT EXISTS stream_metrics AS
SELECT
    tenant, start_time, trace_id, span_id, service, side, provider,
    if(response_model != '', response_model, request_model) AS model,
    node_name, outcome, tokens, content_chunks, content_bytes, wire_bytes,
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

-- Cancelled client (or browser) streams with what the server did after: tokens it generated after the
-- cancel (the cancellation tax) and how long the cancel took to reach it. Clocks differ between hosts, so the
-- client's cancel is placed on the server's clock through content: the server emitted the client's last
-- received byte at `aligned_us`, and the client cancelled `cancel_offset_us - last_content_us` after it
-- arrived. propagation_us = server noticed − (aligned_us + that wait): the network's round trip plus the
-- server's reaction time (never a raw timestamp difference across hosts).
CREATE VIEW IF NOT EXISTS cancellations AS
SELECT
    c.tenant AS tenant, c.start_time AS start_time, c.trace_id AS trace_id, c.span_id AS span_id,
    c.service AS service, c.side AS side, c.provider AS provider,
    if(c.response_model != '', c.response_model, c.request_model) AS model,
    s.node_name AS node_name, c.cancel_offset_us AS cancel_offset_us, c.content_bytes AS received_bytes,
    s.content_bytes AS emitted_bytes, s.tokens_after_cancel AS tokens_after_cancel,
    arrayFirst((offset, sent) -> sent >= c.content_bytes, s.offsets, s.sent) AS aligned_us,
    if(s.cancel_offset_us IS NULL OR c.last_content_us IS NULL OR c.cancel_offset_us IS NULL
           OR empty(s.sent) OR s.sent[-1] < c.content_bytes,
       NULL,
       toInt64(s.cancel_offset_us) - toInt64(aligned_us) - (toInt64(c.cancel_offset_us) - toInt64(c.last_content_us)))
        AS propagation_us
FROM streams AS c
LEFT JOIN (
    SELECT
        any(st.tenant) AS tenant, st.trace_id AS trace_id, any(st.node_name) AS node_name,
        any(st.content_bytes) AS content_bytes, any(st.tokens_after_cancel) AS tokens_after_cancel,
        any(st.cancel_offset_us) AS cancel_offset_us,
        any(t.offsets) AS offsets, any(t.sent) AS sent
    FROM streams AS st
    INNER JOIN (
        SELECT
            trace_id, span_id,
            arrayCumSum(arrayMap(x -> toUInt64(x.2), arraySort(groupArrayIf((seq, gap_us), kind IN ('first', 'content')))))
                AS offsets,
            arrayCumSum(arrayMap(x -> toUInt64(x.2), arraySort(groupArrayIf((seq, content_bytes), kind IN ('first', 'content')))))
                AS sent
        FROM chunks
        WHERE side = 'server' AND trace_id IN (
            SELECT trace_id FROM streams WHERE side IN ('client', 'browser') AND outcome IN ('cancelled', 'disconnected')
        )
        GROUP BY trace_id, span_id
    ) AS t ON t.trace_id = st.trace_id AND t.span_id = st.span_id
    WHERE st.side = 'server'
    GROUP BY st.trace_id
) AS s ON s.trace_id = c.trace_id AND s.tenant = c.tenant
WHERE c.side IN ('client', 'browser') AND c.outcome IN ('cancelled', 'disconnected');
