"""The panels over ``stream_histograms``, ``smoothing_histograms`` (migration 0032) and ``stream_totals`` (0033) on
the embedded store: ``model_texture``'s pace, stall rate and tool calls, ``smoothing_trade``, the tokens per chunk
and their changes, chunk economics, stream shape and cancellation read as the exact figures over the stored rows
say (counts, sums and shares exact, medians within 0.5 % for times and rates, within a step of 1/10,000 for
quality indices, exact for tokens per chunk); a range that cuts hours and minutes counts each stream whose 5 s
interval meets it, once; with routes chosen every one answers from the raw rows."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest

from streamscope import semconv as sc
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import DEFAULTS, TOKENS_PER_S
from streamscope_dashboards.panels.cost import CANCELLATION, CHUNK_ECONOMICS, CHUNKING_CHANGES, TOKENS_PER_CHUNK
from streamscope_dashboards.panels.quality import (
    FLEET_STATS,
    ITL_GOODPUT,
    MODEL_TEXTURE,
    SMOOTHING_TRADE,
    STREAM_SHAPE,
    STREAM_SOURCES,
    TTFT_OVER_TIME,
)
from streamscope_ingest.analysis.attribution_job import AttributionJob
from tests.support import T0, store_spans, stream_span

S = 1_000_000_000  # ns
START = datetime.fromtimestamp(T0 / 1e9, UTC)
HOURS = 3
ROUTED = "/v1/routed"


@pytest.fixture
def store(store_client):
    """Client streams of two models over three hours at random pace, some with a stall, every fifth calling a tool,
    every seventh missing its last chunks, every sixth cancelled, m-1's chunks carrying three times the tokens in
    the last hour, every eighth repeating itself, every fourth rushing its head then slower (every eighth then
    stalling too),
    every ninth pausing 300 ms, every tenth with its tokens estimated; every third trace's server span was served
    on ``ROUTED``."""
    rng = random.Random(11)
    spans = []
    for n in range(90):
        chunks = rng.randrange(20, 60)
        offsets, at = [], 0.0
        for i in range(chunks):
            stall = 700 if rng.random() < 0.03 or (n % 8 == 0 and i == 12) else 0
            stall += 300 if n % 9 == 4 and i == 5 else 0  # over attribution's 150 ms, within the 400 ms SLO
            slowed = 3 if n % 4 == 0 else 1  # after a rushed head, a third of the pace: a burst at the head
            at += 2 if n % 4 == 0 and i < 12 else rng.lognormvariate(3.2, 0.6) * slowed + stall
            offsets.append(round(at, 3))
        attributes: dict = {sc.GEN_AI_REQUEST_MODEL: f"m-{n % 2}",
                            sc.STREAMSCOPE_FIRST_BYTE_OFFSET_US: round(offsets[0] * 1000 * rng.random())}  # fmt: skip
        if n % 5 == 0:
            attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] = chunks // 2
        if n % 7 == 0:
            attributes[sc.STREAMSCOPE_CHUNKS_DROPPED] = 2
        if n % 6 == 1:
            attributes[sc.STREAMSCOPE_OUTCOME] = "cancelled"
        if n % 8 == 3:
            attributes[sc.STREAMSCOPE_REPETITION_SCORE] = 0.7
        if n % 10 == 7:
            attributes[sc.STREAMSCOPE_TOKENS_ESTIMATED] = True
        start = T0 + rng.randrange(HOURS * 3600) * S
        tokens = [rng.randrange(1, 4) * (3 if n % 2 and start >= T0 + 2 * 3600 * S else 1) for _ in offsets]
        wire = [20 * t + rng.randrange(40) for t in tokens]
        spans.append(stream_span(n + 1, 1, side="client", offsets_ms=offsets, tokens=tokens, wire_bytes=wire,
                                 start_ns=start, attributes=attributes))  # fmt: skip
        route = {sc.HTTP_ROUTE: ROUTED if n % 3 == 0 else "/v1/other", **attributes}
        spans.append(stream_span(n + 1, 2, side="server", offsets_ms=offsets, tokens=tokens, start_ns=start,
                                 attributes=route))  # fmt: skip
    store_spans(store_client, spans)
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(minutes=1))
    return store_client


WHOLE = (START - timedelta(minutes=1), START + timedelta(hours=HOURS, minutes=1))
CUT = (START + timedelta(minutes=67, seconds=23), START + timedelta(hours=2, minutes=41, seconds=2))
"""A range that starts and ends inside hours, minutes and 5 s intervals."""


def run(client, panel, within: tuple[datetime, datetime], interval_s: int = 5, **variables) -> list[dict]:
    ctx = QueryContext(*within, timedelta(seconds=interval_s))
    result = client.query(resolve(panel.sql, ctx, {**DEFAULTS, **variables}))
    return [dict(zip(result.column_names, row)) for row in result.result_rows]


def meeting(within: tuple[datetime, datetime]) -> str:
    """Client streams whose 5 s interval meets the range: what the histograms count for it."""
    first, last = (int(t.timestamp()) for t in within)
    return f"side = 'client' AND intDiv(toUnixTimestamp(start_time), 5) * 5 BETWEEN {first - 4} AND {last}"


def routed(only: bool) -> str:
    return f" AND trace_id IN (SELECT trace_id FROM streams WHERE route = '{ROUTED}')" if only else ""


def exact_streams(client, within, routed_only: bool = False) -> dict[str, tuple]:
    rows = client.query(
        f"SELECT model, quantileExact(0.5)(tokens_per_s), countIf(stall_count > 0) / count(), "
        f"countIf(first_tool_call_seq IS NOT NULL), quantileExact(0.5)(tool_call_pause_us) / 1000 "
        f"FROM (SELECT *, if(response_model != '', response_model, request_model) AS model, "
        f"{TOKENS_PER_S} AS tokens_per_s FROM streams) WHERE {meeting(within)}{routed(routed_only)} GROUP BY model"
    ).result_rows
    return {model: rest for model, *rest in rows}


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_the_texture_reads_each_models_pace_stalls_and_tool_calls_as_the_streams_say(store, within):
    exact, shown = exact_streams(store, within), run(store, MODEL_TEXTURE, within)
    assert {row["model"] for row in shown} == exact.keys() == {"m-0", "m-1"}
    for row in shown:
        pace, stalled, tool_calls, pause = exact[row["model"]]
        assert row["tokens_per_s_p50"] == pytest.approx(pace, rel=0.005, abs=0.05)
        assert (row["stall_rate"], row["tool_calls"]) == (round(stalled, 3), tool_calls) and tool_calls > 0
        assert row["tool_call_pause_ms_p50"] == pytest.approx(pause, rel=0.005)
        assert row["tool_call_pause_ms_p50"] != pause  # a bucket's middle, not the pause itself
    assert 0 < max(row["stall_rate"] for row in shown) < 1


def test_the_panels_pace_is_stream_metrics(store):
    differ = f"SELECT count() FROM stream_metrics AS m JOIN (SELECT trace_id, span_id, {TOKENS_PER_S} AS pace " \
        "FROM streams) AS s USING (trace_id, span_id) WHERE NOT (m.tokens_per_s <=> s.pace)"  # fmt: skip
    assert store.query(differ).result_rows[0][0] == 0


def test_with_a_route_chosen_the_texture_is_exact(store):
    exact = exact_streams(store, WHOLE, routed_only=True)
    for row in run(store, MODEL_TEXTURE, WHOLE, route=(ROUTED,)):
        pace, stalled, tool_calls, pause = exact[row["model"]]
        assert (row["tokens_per_s_p50"], row["stall_rate"]) == (round(pace, 1), round(stalled, 3))
        assert (row["tool_calls"], row["tool_call_pause_ms_p50"]) == (tool_calls, pause)


def exact_smoothing(client, within, routed_only: bool = False) -> dict[float, dict]:
    """Per depth: streams, stall shares and counts exact; the medians (as the panel's columns, unrounded)."""
    timed = "(trace_id, span_id) IN (SELECT trace_id, span_id FROM streams WHERE coverage = 'full')"
    result = client.query(
        "SELECT depth_ms, count() AS streams, quantileExact(0.5)(added_end_us) / 1000 AS added_end_p50_ms, "
        "countIf(stalls_before > 0) / count() AS stalled_share_before, "
        "countIf(stalls_after > 0) / count() AS stalled_share_after, "
        "sum(stalls_before) AS stall_count_before, sum(stalls_after) AS stall_count_after, "
        "quantileExact(0.5)(longest_gap_before_us) / 1000 AS longest_gap_p50_before_ms, "
        "quantileExact(0.5)(longest_gap_after_us) / 1000 AS longest_gap_p50_after_ms, "
        "quantileExact(0.5)(fluidity_before) AS fluidity_p50_before, "
        "quantileExact(0.5)(fluidity_after) AS fluidity_p50_after, "
        "quantileExact(0.5)(andes_before) AS andes_qoe_p50_before, "
        "quantileExact(0.5)(andes_after) AS andes_qoe_p50_after "
        f"FROM stream_smoothing WHERE {timed} AND {meeting(within)}{routed(routed_only)} GROUP BY depth_ms"
    )
    return {row[0]: dict(zip(result.column_names, row)) for row in result.result_rows}


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_the_smoothing_trade_reads_each_depth_as_the_timed_streams_say(store, within):
    exact, shown = exact_smoothing(store, within), run(store, SMOOTHING_TRADE, within)
    assert [row["depth_ms"] for row in shown] == sorted(exact) and len(shown) > 1
    untimed = store.query("SELECT count() FROM streams WHERE coverage = 'partial'").result_rows[0][0]
    assert untimed > 0
    for row in shown:
        expected = exact[row["depth_ms"]]
        for name in ("streams", "stall_count_before", "stall_count_after"):
            assert row[name] == expected[name], name
        for name in ("stalled_share_before", "stalled_share_after"):
            assert row[name] == round(expected[name], 3), name
        for name in ("added_end_p50_ms", "longest_gap_p50_before_ms", "longest_gap_p50_after_ms"):
            assert row[name] == pytest.approx(expected[name], rel=0.005, abs=0.05), name
        for name in ("fluidity_p50_before", "fluidity_p50_after", "andes_qoe_p50_before", "andes_qoe_p50_after"):
            assert row[name] == pytest.approx(expected[name], abs=0.0011), name
    assert any(row["stall_count_before"] > row["stall_count_after"] for row in shown)


def test_with_a_route_chosen_the_smoothing_trade_is_exact(store):
    exact = exact_smoothing(store, WHOLE, routed_only=True)
    for row in run(store, SMOOTHING_TRADE, WHOLE, route=(ROUTED,)):
        expected = exact[row["depth_ms"]]
        assert row["streams"] == expected["streams"]
        assert row["fluidity_p50_before"] == round(expected["fluidity_p50_before"], 3)
        assert row["longest_gap_p50_after_ms"] == round(expected["longest_gap_p50_after_ms"], 1)


def exact_metrics(client, within, columns: str, keys: tuple[str, ...] = ("model",), where: str = "") -> dict:
    """``columns`` over the client streams (``stream_metrics``) whose 5 s interval meets the range, per ``keys``."""
    grouped = ", ".join(keys)
    result = client.query(
        f"SELECT {grouped}, {columns} FROM stream_metrics WHERE {meeting(within)}{where} GROUP BY {grouped}"
    )
    width = len(keys)
    return {row[:width]: dict(zip(result.column_names[width:], row[width:])) for row in result.result_rows}


def near(expected: float, rounding: float) -> object:
    """A log bucket's middle (within 0.5 %) as the panel rounds it (to ``rounding``)."""
    return pytest.approx(expected, abs=abs(expected) * 0.005 + rounding / 2)


SERIES = "concat(provider, ' ', model, if(tokens_estimated, ' (estimated)', ''))"


@pytest.mark.parametrize("interval_s", [5, 3600])
def test_tokens_per_chunk_and_its_changes_are_the_streams_medians(store, interval_s):
    shown = run(store, TOKENS_PER_CHUNK, WHOLE, interval_s)
    exact = exact_metrics(
        store,
        WHOLE,
        "arrayFirst((k, c) -> c > intDiv(sum(content_chunks), 2), mapKeys(sumMap(content_chunks_by_tokens)), "
        "arrayCumSum(mapValues(sumMap(content_chunks_by_tokens)))) AS median",
        (f"toUnixTimestamp(toStartOfInterval(start_time, toIntervalSecond({interval_s})))", SERIES),
        " AND content_chunks > 0 AND coverage IN ('full', 'partial')",
    )
    assert {(int(row["time"].timestamp()), row["series"]): row["median_tokens_per_chunk"] for row in shown} == {
        key: value["median"] for key, value in exact.items()
    }
    changes = run(store, CHUNKING_CHANGES, WHOLE, interval_s)
    if interval_s == 3600:  # m-1's chunks carry three times the tokens from the third hour, seen from each side
        assert [(row["side"], row["model"], row["tokens_per_chunk_before"] * 3) for row in changes] == [
            (side, "m-1", row["tokens_per_chunk_after"]) for side, row in zip(("client", "server"), changes)
        ] and len(changes) == 2


ALL_ROUTES = {"route": (ROUTED, "/v1/other")}
"""Every route chosen: the panels read the raw rows, and every client stream's server span is on one of them."""


@pytest.mark.parametrize(
    "panel", [TOKENS_PER_CHUNK, CHUNKING_CHANGES, CANCELLATION, ITL_GOODPUT, STREAM_SOURCES], ids=lambda p: p.key
)
def test_the_exact_panels_read_the_same_from_the_totals_and_the_raw_rows(store, panel):
    from_totals, raw = run(store, panel, WHOLE, 3600), run(store, panel, WHOLE, 3600, **ALL_ROUTES)
    assert from_totals == raw and from_totals


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_chunk_economics_sums_the_sized_streams(store, within):
    exact = exact_metrics(
        store,
        within,
        "count() AS streams, sum(content_chunks) AS chunks, "
        "round(sumIf(tokens, NOT tokens_estimated) / sumIf(content_chunks, NOT tokens_estimated), 2) AS counted_mean, "
        "round(sumIf(tokens, tokens_estimated) / nullIf(sumIf(content_chunks, tokens_estimated), 0), 2) "
        "AS estimated_mean, "
        "round(sum(wire_bytes) / sum(content_chunks), 1) AS wire, round(sum(wire_bytes) / sum(content_bytes), 2) "
        "AS wire_per_content, quantileExact(0.5)(chunks_per_s) AS pace",
        ("provider", "model"),
        " AND coverage IN ('full', 'partial')",
    )
    shown = run(store, CHUNK_ECONOMICS, within)
    assert len(shown) == len(exact) == 2
    for row in shown:
        expected = exact[(row["provider"], row["model"])]
        assert (row["streams"], row["chunks"], row["mean_tokens_per_chunk"], row["estimated_tokens_per_chunk"]) == (
            expected["streams"], expected["chunks"], expected["counted_mean"], expected["estimated_mean"]
        )  # fmt: skip
        assert (row["wire_bytes_per_chunk"], row["wire_per_content_byte"]) == (
            expected["wire"], expected["wire_per_content"]
        )  # fmt: skip
        assert row["chunks_per_s_p50"] == near(expected["pace"], 0.1)


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_stream_shape_counts_each_models_streams_and_takes_their_medians(store, within):
    exact = exact_metrics(
        store,
        within,
        "count() AS streams, countIf(frontloaded_then_stalled) AS frontloaded, countIf(stuck_loop) AS stuck, "
        "round(countIf(stall_count > 0) / count(), 3) AS stall_rate, quantileExact(0.5)(tokens_per_s) AS pace, "
        "quantileExact(0.5)(first_byte_lead_us) / 1000 AS lead, quantileExact(0.5)(head_burst_ratio) AS burst",
    )
    shown = run(store, STREAM_SHAPE, within)
    assert [row["model"] for row in shown] == sorted((m for (m,) in exact), key=lambda m: (-exact[(m,)]["streams"], m))
    for row in shown:
        expected = exact[(row["model"],)]
        assert (row["streams"], row["frontloaded_then_stalled"], row["stuck_loops"], row["stall_rate"]) == (
            expected["streams"], expected["frontloaded"], expected["stuck"], expected["stall_rate"]
        )  # fmt: skip
        assert row["tokens_per_s_p50"] == near(expected["pace"], 0.1)
        assert row["first_byte_lead_ms_p50"] == near(expected["lead"], 0.1)
        assert row["head_burst_ratio_p50"] == near(expected["burst"], 0.01)
    assert sum(row["frontloaded_then_stalled"] for row in shown) > 0 and sum(row["stuck_loops"] for row in shown) > 0


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_cancellation_counts_the_cancelled_streams(store, within):
    exact = exact_metrics(
        store, within, "count() AS streams, countIf(outcome IN ('cancelled', 'disconnected')) AS cancelled", ("side",)
    )[("client",)]
    [row] = run(store, CANCELLATION, within)
    assert (row["streams"], row["cancelled"], row["cancel_rate"]) == (
        exact["streams"], exact["cancelled"], round(exact["cancelled"] / exact["streams"], 3)
    ) and exact["cancelled"] > 0  # fmt: skip


@pytest.mark.parametrize("panel", [CHUNK_ECONOMICS, STREAM_SHAPE], ids=lambda p: p.key)
def test_with_every_route_chosen_the_tables_read_the_raw_rows(store, panel):
    raw = run(store, panel, WHOLE, **ALL_ROUTES)
    exact = {
        CHUNK_ECONOMICS.key: "round(quantileExact(0.5)(chunks_per_s), 1) AS chunks_per_s_p50",
        STREAM_SHAPE.key: "round(quantileExact(0.5)(head_burst_ratio), 2) AS head_burst_ratio_p50",
    }[panel.key]
    keys = ("provider", "model") if panel is CHUNK_ECONOMICS else ("model",)
    where = " AND coverage IN ('full', 'partial')" if panel is CHUNK_ECONOMICS else ""
    medians = exact_metrics(store, WHOLE, exact, keys, where)
    name = exact.rsplit(" AS ", 1)[1]
    assert {tuple(row[k] for k in keys): row[name] for row in raw} == {
        key: value[name] for key, value in medians.items()
    }


@pytest.mark.parametrize("within", [WHOLE, CUT])
def test_fleet_stats_count_exactly_and_take_the_quantiles_from_the_buckets(store, within):
    timed = "coverage IN ('full', 'arrivals')"
    [expected] = exact_metrics(
        store,
        within,
        f"count() AS streams, quantileExact(0.5)(ttft_us) / 1000 AS ttft_p50_ms, "
        f"quantileExact(0.95)(ttft_us) / 1000 AS ttft_p95_ms, "
        f"quantileExactIf(0.99)(gap_p99_us, {timed}) / 1000 AS p99_of_p99_ms, "
        f"countIf(ifNull(gap_max_us, 0) <= 400000 AND {timed}) / countIf({timed}) AS itl_goodput, "
        f"countIf(stall_count > 0 AND {timed}) / countIf({timed}) AS stall_rate, countIf(NOT {timed}) AS incomplete",
        ("side",),
    ).values()
    [row] = run(store, FLEET_STATS, within)
    for name in ("streams", "itl_goodput", "stall_rate", "incomplete"):
        assert row[name] == expected[name], name
    for name in ("ttft_p50_ms", "ttft_p95_ms", "p99_of_p99_ms"):
        assert row[name] == pytest.approx(expected[name], rel=0.005) and row[name] != expected[name], name
    assert 0 < row["itl_goodput"] < 1 and row["incomplete"] > 0
    [raw] = run(store, FLEET_STATS, within, **ALL_ROUTES)
    assert raw == pytest.approx(expected)


@pytest.mark.parametrize("interval_s", [5, 3600])
def test_ttft_over_time_takes_each_intervals_quantiles_from_the_buckets(store, interval_s):
    exact = exact_metrics(
        store,
        WHOLE,
        "quantileExact(0.5)(ttft_us) / 1000 AS p50, quantileExact(0.95)(ttft_us) / 1000 AS p95",
        (f"toUnixTimestamp(toStartOfInterval(start_time, toIntervalSecond({interval_s})))",),
        " AND ttft_us IS NOT NULL",
    )
    shown = {
        (int(row["time"].timestamp()), row["series"]): row["value"]
        for row in run(store, TTFT_OVER_TIME, WHOLE, interval_s)
    }
    assert shown == pytest.approx(
        {(time, series): value[series] for (time,), value in exact.items() for series in ("p50", "p95")}, rel=0.005
    )
    raw = {
        (int(row["time"].timestamp()), row["series"]): row["value"]
        for row in run(store, TTFT_OVER_TIME, WHOLE, interval_s, **ALL_ROUTES)
    }
    assert raw == {(time, series): value[series] for (time,), value in exact.items() for series in ("p50", "p95")}
