"""The fleet summary on hand-built streams whose answers are worked out below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from streamscope import semconv as sc
from streamscope_dashboards.fleet import summarize
from streamscope_dashboards.macros import QueryContext
from streamscope_ingest.store import sql
from tests.support import T0, store_spans, stream_span


def stream(n: int, offsets_ms: list[int], tokens: list[int], wire: list[int], outcome: str):
    return stream_span(
        n,
        n,
        side="client",
        offsets_ms=offsets_ms,
        tokens=tokens,
        wire_bytes=wire,
        start_ns=T0 + n,
        attributes={sc.STREAMSCOPE_OUTCOME: outcome},
    )


def test_fleet_summary_by_hand(store_client):
    spans = [
        # role chunk at 50 ms, content at 100, 120, 140: gaps 20, 20; 6 tokens in 3 content chunks
        stream(1, [50, 100, 120, 140], [0, 2, 2, 2], [40, 60, 60, 60], "completed"),
        # first content at 200 ms (first byte then too), one 500 ms gap: breaks a 400 ms SLO
        stream(2, [200, 700, 720], [1, 1, 1], [50, 50, 50], "completed"),
        # cancelled: first content at 300 ms, then 30 ms
        stream(3, [300, 330], [3, 1], [70, 70], "cancelled"),
    ]
    store_spans(store_client, spans)
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(store_client, q)), ctx, slo_us=400_000)
    assert summary.streams == 3
    assert summary.itl_goodput == pytest.approx(2 / 3)  # stream 2's 500 ms gap breaks the SLO
    assert (summary.ttft_p50_ms, summary.ttft_p95_ms) == (200.0, 300.0)  # quantileExact of 100, 200, 300
    assert summary.first_byte_lead_ms == 0.0  # leads 50, 0, 0 ms: the median is 0
    assert summary.tokens_per_chunk == pytest.approx(13 / 8)  # 6 + 3 + 4 tokens over 3 + 3 + 2 content chunks
    assert summary.wire_per_content_byte == pytest.approx(510 / 52)  # 220 + 150 + 140 wire bytes, 4 per token
    assert summary.cancel_rate == pytest.approx(1 / 3)
    assert (summary.gap_p50_ms, summary.gap_p99_ms) == (20.0, 500.0)  # sorted gaps 20, 20, 20, 30, 500
