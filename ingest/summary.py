"""Fleet summary of stream quality over a time window: the numbers `streamscope demo` prints.

Every figure is one SQL query over ``streams`` and ``chunks``, so it can be reproduced by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from clickhouse_connect.driver.client import Client

from ingest import store

STREAMS_SQL = """
SELECT
    count() AS streams,
    quantileExact(0.5)(ttft_us) AS ttft_p50_us,
    quantileExact(0.95)(ttft_us) AS ttft_p95_us,
    quantileExact(0.99)(gap_p99_us) AS p99_of_p99_us,
    countIf(ifNull(gap_max_us, 0) <= {slo_us:UInt32}) / count() AS itl_goodput,
    quantileExact(0.5)(ttft_us - ttfb_us) AS first_byte_lead_us,
    sum(tokens) / greatest(sum(content_chunks), 1) AS tokens_per_chunk,
    sum(wire_bytes) / greatest(sum(content_bytes), 1) AS wire_per_content_byte,
    countIf(outcome IN ('cancelled', 'disconnected')) / count() AS cancel_rate
FROM streams
WHERE service = {service:String} AND side = {side:String} AND start_time >= {since:DateTime64(6)}
"""

GAPS_SQL = """
SELECT
    count() AS gaps,
    quantileExact(0.5)(gap_us) AS gap_p50_us,
    quantileExact(0.95)(gap_us) AS gap_p95_us,
    quantileExact(0.99)(gap_us) AS gap_p99_us
FROM chunks
WHERE service = {service:String} AND side = {side:String} AND start_time >= {since:DateTime64(6)}
  AND kind = 'content'
"""

STORED_BYTES_SQL = """
SELECT sum(data_compressed_bytes) / greatest(sum(rows), 1)
FROM system.parts
WHERE database = currentDatabase() AND table = 'chunks' AND active
"""


@dataclass(frozen=True)
class Summary:
    streams: int
    ttft_p50_ms: float
    ttft_p95_ms: float
    gap_p50_ms: float
    gap_p95_ms: float
    gap_p99_ms: float
    p99_of_p99_ms: float
    itl_goodput: float
    """Share of streams whose every gap stayed within the ITL SLO."""
    first_byte_lead_ms: float
    """Median time from the first byte to the first content chunk (a buffering gateway widens it)."""
    tokens_per_chunk: float
    wire_per_content_byte: float
    """Bytes on the wire per byte of content: the envelope overhead."""
    cancel_rate: float
    stored_bytes_per_chunk: float


def summarize(client: Client, *, service: str, side: str, since: datetime, slo_us: int) -> Summary:
    params = {"service": service, "side": side, "since": since, "slo_us": slo_us}
    with store.translated_errors():
        (streams, ttft50, ttft95, p99p99, goodput, lead, per_chunk, envelope, cancels) = client.query(
            STREAMS_SQL, parameters=params
        ).result_rows[0]
        _, gap50, gap95, gap99 = client.query(GAPS_SQL, parameters=params).result_rows[0]
        (stored,) = client.query(STORED_BYTES_SQL).result_rows[0]

    def ms(value: float | None) -> float:
        return float(value or 0) / 1000

    return Summary(
        streams=int(streams),
        ttft_p50_ms=ms(ttft50),
        ttft_p95_ms=ms(ttft95),
        gap_p50_ms=ms(gap50),
        gap_p95_ms=ms(gap95),
        gap_p99_ms=ms(gap99),
        p99_of_p99_ms=ms(p99p99),
        itl_goodput=float(goodput or 0),
        first_byte_lead_ms=ms(lead),
        tokens_per_chunk=float(per_chunk or 0),
        wire_per_content_byte=float(envelope or 0),
        cancel_rate=float(cancels or 0),
        stored_bytes_per_chunk=float(stored or 0),
    )
