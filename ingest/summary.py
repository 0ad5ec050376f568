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
    countIf(gap_max_us > {stall_us:UInt32}) / count() AS stalled_share
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
    stalled_share: float
    stored_bytes_per_chunk: float


def summarize(client: Client, *, service: str, side: str, since: datetime, stall_threshold_us: int) -> Summary:
    params = {"service": service, "side": side, "since": since, "stall_us": stall_threshold_us}
    with store.translated_errors():
        streams, ttft50, ttft95, p99p99, stalled = client.query(STREAMS_SQL, parameters=params).result_rows[0]
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
        stalled_share=float(stalled or 0),
        stored_bytes_per_chunk=float(stored or 0),
    )
