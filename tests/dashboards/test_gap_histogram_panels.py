"""The panels over ``gap_histograms`` on the embedded store: the ITL heatmap counts what the raw chunks hold, the
texture's gap quantiles are within 0.5 % of ClickHouse's quantileExact (counts and the longest gap exact), and
with routes chosen both answer from the raw chunks (the histograms carry no route). The texture's tool call
pauses are kept with the stream (migration 0031) and counted in ``stream_histograms`` (migration 0032)."""

from __future__ import annotations

import random
from bisect import bisect_left
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from streamscope import semconv as sc
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import DEFAULTS, GAP_BUCKET_RATIO, HISTOGRAM_STEPS_S
from streamscope_dashboards.panels.quality import (
    HISTOGRAM_OVERFLOW_MS,
    ITL_BUCKETS_MS,
    ITL_HEATMAP,
    MODEL_TEXTURE,
    OVERFLOW_BUCKET,
)
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.rollups import gap_histograms
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import T0, store_spans, stream_span, trace_request

S = 1_000_000_000  # ns
START = datetime.fromtimestamp(T0 / 1e9, UTC) - timedelta(seconds=5)
ROUTED = "/v1/routed"


@pytest.fixture
def store(store_client):
    """Client streams of two models with lognormal gaps and rare long ones, over ten minutes; every third trace's
    server span was served on ``ROUTED``."""
    rng = random.Random(7)
    spans = []
    for n in range(40):
        offsets, at = [], 0.0
        for _ in range(150):
            at += rng.lognormvariate(3.4, 0.8) + (900 if rng.random() < 0.01 else 0)
            offsets.append(round(at, 3))
        start = T0 + rng.randrange(600) * S
        model = {sc.GEN_AI_REQUEST_MODEL: f"m-{n % 2}"}
        spans.append(stream_span(n + 1, 1, side="client", offsets_ms=offsets, tokens=[1] * 150, start_ns=start,
                                 attributes=model))  # fmt: skip
        route = {sc.HTTP_ROUTE: ROUTED if n % 3 == 0 else "/v1/other", **model}
        spans.append(stream_span(n + 1, 2, side="server", offsets_ms=offsets, tokens=[1] * 150, start_ns=start,
                                 attributes=route))  # fmt: skip
    store_spans(store_client, spans)
    return store_client


def run(client, panel, interval_s: int, **variables):
    ctx = QueryContext(START, START + timedelta(minutes=11), timedelta(seconds=interval_s))
    result = client.query(resolve(panel.sql, ctx, {**DEFAULTS, **variables}))
    return [dict(zip(result.column_names, row)) for row in result.result_rows]


def raw_heatmap(client, interval_s: int, routed_only: bool = False) -> dict[datetime, Counter]:
    """The heatmap computed here from the client's raw content gaps."""
    routed = f"AND trace_id IN (SELECT trace_id FROM streams WHERE route = '{ROUTED}')" if routed_only else ""
    rows = client.query(
        f"SELECT toUnixTimestamp(start_time), gap_us FROM chunks WHERE side = 'client' AND kind = 'content' {routed}"
    ).result_rows
    heat: dict[datetime, Counter] = {}
    for start_s, gap in rows:
        if gap == 0:
            continue
        time = datetime.fromtimestamp(start_s // interval_s * interval_s, UTC)
        names = [*map(str, ITL_BUCKETS_MS), OVERFLOW_BUCKET]
        heat.setdefault(time, Counter())[names[bisect_left(ITL_BUCKETS_MS, gap / 1000)]] += 1
    return heat


def as_heat(rows) -> dict[datetime, Counter]:
    return {row.pop("time").replace(tzinfo=UTC): Counter({k: v for k, v in row.items() if v}) for row in rows}


@pytest.mark.parametrize("interval_s", [5, 60, 600])
def test_the_heatmap_counts_every_gap_in_its_interval_and_row(store, interval_s):
    assert as_heat(run(store, ITL_HEATMAP, interval_s)) == raw_heatmap(store, interval_s)


def test_with_a_route_chosen_the_heatmap_reads_the_routes_raw_chunks(store):
    routed = as_heat(run(store, ITL_HEATMAP, 60, route=(ROUTED,)))
    assert routed == raw_heatmap(store, 60, routed_only=True)
    assert routed != raw_heatmap(store, 60)


def exact_texture(client, routed_only: bool = False) -> dict[str, tuple]:
    routed = f"AND trace_id IN (SELECT trace_id FROM streams WHERE route = '{ROUTED}')" if routed_only else ""
    rows = client.query(
        "SELECT model, count(), quantilesExact(0.5, 0.95, 0.99)(gap_us), max(gap_us) FROM chunks "
        f"WHERE side = 'client' AND kind = 'content' {routed} GROUP BY model"
    ).result_rows
    return {model: (gaps, [q / 1000 for q in quantiles], top / 1000) for model, gaps, quantiles, top in rows}


def texture(rows) -> dict[str, tuple]:
    return {r["model"]: (r["gaps"], [r["gap_p50_ms"], r["gap_p95_ms"], r["gap_p99_ms"]], r["gap_max_ms"]) for r in rows}


@pytest.mark.parametrize("interval_s", [5, 3600])
def test_the_gap_quantiles_are_within_half_a_percent_of_quantile_exact(store, interval_s):
    exact, read = exact_texture(store), texture(run(store, MODEL_TEXTURE, interval_s))
    assert read.keys() == exact.keys() == {"m-0", "m-1"}
    for model, (gaps, quantiles, top) in exact.items():
        assert read[model][0] == gaps and read[model][2] == top
        assert read[model][1] == pytest.approx(quantiles, rel=0.005)
        assert read[model][1] != quantiles  # bucket middles, not the gaps themselves


def test_with_a_route_chosen_the_gap_quantiles_are_exact(store):
    assert texture(run(store, MODEL_TEXTURE, 60, route=(ROUTED,))) == exact_texture(store, routed_only=True)


def test_tool_calls_of_streams_decoded_before_their_pause_was_kept_count_but_stay_out_of_the_median(store_client):
    def decoded(trace: int, pause_ms: float):
        offsets = [10, 20, 30, 30 + pause_ms, 40 + pause_ms]
        span = stream_span(trace, 1, side="client", offsets_ms=offsets, tokens=[1] * 5, start_ns=T0,
                           attributes={sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: 3})  # fmt: skip
        return decode_traces(trace_request([span]), tenant="")

    earlier = decoded(1, 900)
    earlier.blocks["streams"] = earlier.blocks["streams"].drop_columns(["tool_call_pause_us"])
    ClickHouseWriter(store_client).write([earlier, decoded(2, 250)])
    [row] = run(store_client, MODEL_TEXTURE, 60)
    assert row["tool_calls"] == 2 and row["tool_call_pause_ms_p50"] == pytest.approx(250, rel=0.005)


def test_the_panels_read_the_histograms_as_the_writer_counts_them():
    """The dashboards may not import the decoder (docs/architecture.md), so each keeps the constants it needs."""
    assert ITL_BUCKETS_MS == gap_histograms.ITL_BOUNDS_MS
    assert GAP_BUCKET_RATIO == gap_histograms.BUCKET_RATIO
    assert HISTOGRAM_OVERFLOW_MS == gap_histograms.OVERFLOW_MS
    assert sorted(HISTOGRAM_STEPS_S) == list(gap_histograms.STEPS_S)
