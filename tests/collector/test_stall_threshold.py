"""One definition of a stall: the threshold a deployment sets moves the streams' stall count and the attributed
stalls together, through a running collector and the attribution job, as a user configures them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from itertools import accumulate

import pytest

from streamscope import env
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.analysis.attribution_job import AttributionJob
from tests.support import post, request_of, stream_span, wait_for_rows

GAPS_MS = [120] * 8 + [300] + [120] * 8
"""A stream ticking every 120 ms with one 300 ms gap: under the default 400 ms threshold, and under three times
its median, so only a lower threshold makes it a stall."""


@pytest.mark.parametrize(("threshold_ms", "stalls"), [(None, 0), ("250", 1)])
def test_the_stall_threshold_moves_stall_count_and_the_stalls_table_alike(
    storage_dsn: str, monkeypatch: pytest.MonkeyPatch, threshold_ms: str | None, stalls: int
):
    if threshold_ms is None:
        monkeypatch.delenv(env.STREAMSCOPE_STALL_THRESHOLD_MS, raising=False)
    else:
        monkeypatch.setenv(env.STREAMSCOPE_STALL_THRESHOLD_MS, threshold_ms)
    offsets = [0.0, *accumulate(GAPS_MS)]
    start_ns = time.time_ns() - 60 * 10**9  # ended a minute ago: settled for the job
    span = stream_span(0x5A, 0x5A, side="client", offsets_ms=offsets, tokens=[1] * len(offsets), start_ns=start_ns)
    collector = Collector(
        CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, attribution_interval_s=None)
    ).start()
    try:
        assert post(collector, request_of(span).SerializeToString()).status_code == 200
        client = collector.query_client
        wait_for_rows(client, "SELECT count() FROM streams", 1)
        AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC))
        stall_count = client.query("SELECT stall_count FROM streams").result_rows[0][0]
        attributed = client.query("SELECT count() FROM stalls").result_rows[0][0]
    finally:
        collector.stop()
    assert (stall_count, attributed) == (stalls, stalls)
