"""`streamscope report` on hand-built streams: every panel runs on the real engine, the numbers that can be
worked by hand are, and the HTML is self-contained with a chart per chart panel."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from click.testing import CliRunner

from streamscope import semconv as sc
from streamscope_cli.main import cli
from streamscope_cli.smoothing_report import smoothing_panel
from streamscope_dashboards.macros import QueryContext
from streamscope_dashboards.panels import PANELS
from streamscope_dashboards.panels.attribution import ATTRIBUTED_STALL
from streamscope_dashboards.panels.common import BY_TRACE, SLO_US, VARIABLES
from streamscope_dashboards.report import build_report, interval_for, parse_duration, title_line
from streamscope_dashboards.report_html import render_html
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.analysis.smoothing import Buffer
from streamscope_ingest.blocks.stalls import StallRule
from streamscope_ingest.store import sql
from tests.support import T0, store_spans, stream_span

S = 1_000_000_000  # ns
START = datetime.fromtimestamp(T0 / 1e9, UTC) - timedelta(seconds=5)
END = START + timedelta(minutes=1)  # one-second intervals


def steady(chunks: int, step_ms: float = 20) -> list[float]:
    return [100 + i * step_ms for i in range(chunks)]


@pytest.fixture
def store(store_client):
    spans = []
    # second 0: four streams of 60 chunks, 4 tokens each; second 20: the same with 1 token per chunk
    for n in range(4):
        spans.append(stream_span(n + 1, 1, side="client", offsets_ms=steady(60), tokens=[4] * 60, start_ns=T0))
        spans.append(
            stream_span(n + 11, 1, side="client", offsets_ms=steady(60), tokens=[1] * 60, start_ns=T0 + 20 * S)
        )
    # a second version of the model with a slower, even rhythm: 60 ms gaps
    for n in range(2):
        spans.append(
            stream_span(
                n + 21,
                1,
                side="client",
                offsets_ms=steady(20, step_ms=60),
                tokens=[2] * 20,
                start_ns=T0 + 40 * S,
                attributes={sc.GEN_AI_REQUEST_MODEL: "m-2"},
            )
        )
    # m-2 calls a tool after a 170 ms pause (chunk 10; under 3× its 60 ms median, so no stall), twice
    for n in range(2):
        offsets = steady(12, step_ms=60)
        offsets[10:] = [o + 110 for o in offsets[10:]]
        spans.append(
            stream_span(
                n + 25,
                1,
                side="client",
                offsets_ms=offsets,
                tokens=[2] * 12,
                start_ns=T0 + 40 * S,
                attributes={sc.GEN_AI_REQUEST_MODEL: "m-2", sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: 10},
            )
        )
    # one stalled stream seen from both sides: the server sent on time, the client waited 700 ms once
    client = steady(30)
    client[15:] = [o + 700 for o in client[15:]]
    spans.append(stream_span(30, 1, side="client", offsets_ms=client, tokens=[1] * 30, start_ns=T0 + 30 * S))
    spans.append(
        stream_span(
            30,
            2,
            side="server",
            offsets_ms=steady(30),
            tokens=[1] * 30,
            start_ns=T0 + 30 * S,
            attributes={sc.HTTP_ROUTE: "/v1/chat/completions"},
        )
    )
    # a browser drawing a stream: 1..5 ms of render work per chunk, shown 10..50 ms after it arrived
    spans.append(
        stream_span(
            40,
            3,
            side="browser",
            offsets_ms=steady(5),
            tokens=[1] * 5,
            paint_delay_us=[10_000, 20_000, 30_000, 40_000, 50_000],
            render_us=[1_000, 2_000, 3_000, 4_000, 5_000],
            start_ns=T0 + 50 * S,
        )
    )
    # ... and its server: first chunk emitted 60 ms after the request arrived (the browser had it at 100 ms)
    spans.append(
        stream_span(40, 4, side="server", offsets_ms=[60, 80, 100, 120, 140], tokens=[1] * 5, start_ns=T0 + 50 * S)
    )
    store_spans(store_client, spans)
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC))
    return store_client


def run_on(client):
    return lambda query: sql.parse_result(sql.query_json(client, query))


def test_every_panel_runs_and_the_hand_worked_numbers_hold(store):
    reading: list[str] = []
    report = build_report(run_on(store), START, END, slo_us=400_000, reading=reading.append)
    assert [p.panel.key for p in report.panels] == [p.key for p in PANELS]
    assert reading[:-1] == [p.title for p in PANELS]  # what `streamscope report` shows while it reads
    assert report.ctx.interval == timedelta(seconds=1)
    assert report.trace_id == f"{30:032x}"

    heatmap = report.result("itl_heatmap")
    assert sum(sum(row[1:]) for row in heatmap.rows) == 8 * 59 + 2 * 19 + 2 * 11 + 29  # every client content gap, once
    slow = heatmap.names.index("800")  # the 720 ms gap: over 400, at most 800
    assert sum(row[slow] for row in heatmap.rows) == 1

    stalls = report.result("stalls_by_cause")
    assert [(row[1], row[2]) for row in stalls.rows] == [("connection", 1)]  # a lone late arrival

    changes = report.result("chunking_changes")
    # 4 → 1 tokens per chunk at second 20, on the client side (no node known there)
    assert [row[1:8] for row in changes.rows] == [["client", "", "", "", "counted", 4, 1]]
    assert changes.typed_rows()[0][0] == datetime.fromtimestamp(T0 / 1e9 + 20, UTC)

    timeline = report.result("stream_timeline")
    assert sorted(set(timeline.column("side"))) == ["client", "server"]
    assert report.summary.streams == 13
    assert report.summary.itl_goodput == pytest.approx(12 / 13)

    economics = {
        row[1]: dict(zip(report.result("chunk_economics").names, row)) for row in report.result("chunk_economics").rows
    }
    # model "": 4 streams × 60 chunks × 4 tokens, 4 × 60 × 1, and the stalled stream's 30 × 1
    assert (economics[""]["streams"], economics[""]["chunks"]) == (9, 510)
    assert economics[""]["mean_tokens_per_chunk"] == pytest.approx(round(1230 / 510, 2))
    assert economics[""]["otlp_bytes_per_chunk"] is None  # written straight to the store, not over OTLP
    assert economics[""]["stored_bytes_per_chunk"] > 0

    texture = report.result("model_texture")
    by_model = {row[0]: dict(zip(texture.names, row)) for row in texture.rows}
    # quantiles from the gap histograms: the bucket's middle, within 0.5 %; counts and the longest gap exact
    assert by_model["m-2"]["gaps"] == 38 + 22 and by_model["m-2"]["gap_p50_ms"] == pytest.approx(60, rel=0.005)
    assert by_model["m-2"]["tool_calls"] == 2
    assert by_model["m-2"]["tool_call_pause_ms_p50"] == pytest.approx(170, rel=0.005)  # a bucket's middle
    assert by_model[""]["tool_calls"] in (0, None)
    assert by_model[""]["gap_p50_ms"] == pytest.approx(20, rel=0.005) and by_model[""]["gap_max_ms"] == 720


def test_a_chunking_change_on_one_node_of_two_is_found_there_whichever_side_is_chosen(store_client, storage_dsn):
    """node-b goes from 2 tokens per chunk to 1 at second 20; node-a, busier, stays at 2, so the servers' chunks
    together keep a median of 2. The change shows under node-b's name, the client side chosen (the default)."""
    node = lambda name: {sc.STREAMSCOPE_NODE_NAME: name}  # noqa: E731
    spans = []
    for n, start_s in enumerate((0, 20)):
        for k in range(3):
            spans.append(stream_span(100 + 10 * n + k, 1, side="server", offsets_ms=steady(60), tokens=[2] * 60,
                                     start_ns=T0 + start_s * S, attributes=node("node-a")))  # fmt: skip
    spans.append(stream_span(200, 1, side="server", offsets_ms=steady(60), tokens=[2] * 60, start_ns=T0,
                             attributes=node("node-b")))  # fmt: skip
    spans.append(stream_span(201, 1, side="server", offsets_ms=steady(120), tokens=[1] * 120, start_ns=T0 + 20 * S,
                             attributes=node("node-b")))  # fmt: skip
    store_spans(store_client, spans)
    report = build_report(run_on(store_client), START, END, slo_us=400_000)
    changes = report.result("chunking_changes")
    rows = [dict(zip(changes.names, row)) for row in changes.rows]
    assert [(r["side"], r["node"], r["tokens_per_chunk_before"], r["tokens_per_chunk_after"]) for r in rows] == [
        ("server", "node-b", 2, 1)
    ]
    assert (rows[0]["chunks_before"], rows[0]["chunks_after"]) == (60, 120)
    window = ["--from", f"{START:%Y-%m-%d %H:%M:%S}", "--to", f"{END:%Y-%m-%d %H:%M:%S}"]
    printed = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, *window], terminal_width=200).output
    shown = printed[printed.index("Chunking changes") :].splitlines()[:14]
    assert any("node-b" in line for line in shown) and any("server" in line for line in shown), printed


SSE = {sc.STREAMSCOPE_TRANSPORT: "sse"}


@pytest.fixture
def frozen_store(store_client):
    """Two streams at a 20 ms pace; one freezes for 300 ms once (a stall: over 150 ms and 3x its median)."""
    frozen = steady(40)
    frozen[20:] = [o + 280 for o in frozen[20:]]
    store_spans(
        store_client,
        [
            stream_span(1, 1, side="client", offsets_ms=steady(40), tokens=[1] * 40, start_ns=T0, attributes=SSE),
            stream_span(2, 1, side="client", offsets_ms=frozen, tokens=[1] * 40, start_ns=T0, attributes=SSE),
        ],
    )
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC))
    return store_client


def test_the_smoothing_trade_by_hand(frozen_store):
    store_client = frozen_store
    trade = build_report(run_on(store_client), START, END, slo_us=400_000).result("smoothing_trade")
    rows = {row[0]: dict(zip(trade.names, row)) for row in trade.rows}
    assert sorted(rows) == [100, 250, 500]
    # paced at 20 ms, a buffer keeps its whole lead to the end of a steady stream; the freeze drains it:
    # 100 ms leaves a 200 ms gap (still a stall), 250 ms a 50 ms one, 500 ms none beyond the pace
    picked = ("streams", "stalled_share_before", "stalled_share_after", "stall_count_before", "stall_count_after")
    assert [tuple(rows[d][k] for k in picked) for d in (100, 250, 500)] == [
        (2, 0.5, 0.5, 1, 1),
        (2, 0.5, 0.0, 1, 0),
        (2, 0.5, 0.0, 1, 0),
    ]
    # the median of two, the larger, as its bucket's middle (smoothing_histograms)
    assert [rows[d]["added_end_p50_ms"] for d in (100, 250, 500)] == pytest.approx([100, 250, 500], rel=0.005)
    frozen_trade = store_client.query(
        "SELECT added_end_us, longest_gap_after_us FROM stream_smoothing WHERE trace_id = {t:String} ORDER BY depth_ms",
        parameters={"t": f"{2:032x}"},
    ).result_rows
    assert frozen_trade == [(0, 200_000), (0, 50_000), (220_000, 20_000)]  # 500 ms of lead outlasts the freeze


def test_the_smoothing_trade_leaves_out_streams_whose_timeline_has_holes(frozen_store):
    """A stream whose sender dropped chunks is rated by the job (it has chunks) but its gaps are not all known."""
    holed = stream_span(3, 1, side="client", offsets_ms=steady(40), tokens=[1] * 40, start_ns=T0,
                        attributes={sc.STREAMSCOPE_CHUNKS_DROPPED: 5})  # fmt: skip
    store_spans(frozen_store, [holed])
    AttributionJob(frozen_store, settle_s=0).run_once(until=datetime.now(UTC))
    rated = "SELECT count() FROM stream_smoothing WHERE trace_id = {t:String}"
    assert frozen_store.query(rated, parameters={"t": f"{3:032x}"}).result_rows[0][0] > 0
    trade = build_report(run_on(frozen_store), START, END, slo_us=400_000).result("smoothing_trade")
    assert {row[trade.names.index("streams")] for row in trade.rows} == {2}


@pytest.mark.parametrize(
    ("buffer", "expected"),
    [
        # the job's depth again, from the timelines: the same figures as its row
        (Buffer(250), {"rate_ms": 20, "added_end_p50_ms": 250, "stall_count_after": 0, "longest_gap_p50_after_ms": 50}),
        # revealed at 40 ms a chunk, twice slower than they came: 39 chunks end 780 ms late on the steady stream
        # and 500 ms late on the frozen one (the freeze gave the buffer 280 ms back); no gap over the pace
        (
            Buffer(0, 40),
            {"rate_ms": 40, "added_end_p50_ms": 780, "stall_count_after": 0, "longest_gap_p50_after_ms": 40},
        ),
    ],
)
def test_a_buffer_of_ones_choosing_in_the_report_by_hand(frozen_store, buffer, expected):
    ctx = QueryContext(START, END, timedelta(seconds=1))
    result = smoothing_panel(run_on(frozen_store), ctx, {"side": ("client",)}, buffer).result
    row = dict(zip(result.names, result.rows[0]))
    assert (row["streams"], row["stalled_share_before"], row["stall_count_before"]) == (2, 0.5, 1)
    assert {key: row[key] for key in expected} == expected


def test_gap_quantiles_read_from_histogram_buckets_never_pass_the_longest_gap(store_client):
    """Every gap 20.96 ms: just above its bucket's lower edge (1.01^1000 µs), below the bucket's geometric middle
    (21.06 ms), which the histogram's quantiles read; no quantile may exceed the longest gap."""
    store_spans(
        store_client, [stream_span(1, 1, side="client", offsets_ms=[20.96 * i for i in range(1, 41)], tokens=[1] * 40)]
    )
    report = build_report(run_on(store_client), START, END, slo_us=400_000)
    texture = report.result("model_texture")
    (row,) = [dict(zip(texture.names, row)) for row in texture.rows]
    assert row["gap_max_ms"] == pytest.approx(20.96, abs=0.001)
    assert [row[f"gap_{q}_ms"] for q in ("p50", "p95", "p99")] == [row["gap_max_ms"]] * 3


@pytest.mark.parametrize("name", VARIABLES)
def test_a_buffer_of_ones_choosing_keeps_the_streams_each_filter_keeps(frozen_store, name):
    """Each dashboard variable narrows the chosen buffer's streams as it narrows the panels (a filter on a column
    the streams table lacks, ``model``, once made its query fail). Both streams pass every filter set to their own
    value (both came over SSE); no client stream has a route."""
    ctx = QueryContext(START, END, timedelta(seconds=1))
    columns = [n for n in VARIABLES if n not in BY_TRACE]
    own = dict(
        zip(columns, frozen_store.query(f"SELECT {', '.join(columns)} FROM stream_metrics LIMIT 1").result_rows[0])
    )
    value = {**own, "route": "/v1/chat/completions", "transport": "sse"}[name]
    result = smoothing_panel(run_on(frozen_store), ctx, {"side": ("client",), name: (value,)}, Buffer(250)).result
    streams = dict(zip(result.names, result.rows[0]))["streams"] if result.rows else 0
    assert streams == (0 if name == "route" else 2)


def test_the_report_command_adds_the_chosen_buffer_or_says_what_is_wrong(frozen_store, storage_dsn, tmp_path):
    window = ["--from", f"{START:%Y-%m-%d %H:%M:%S}", "--to", f"{END:%Y-%m-%d %H:%M:%S}"]
    html = ["--html", str(tmp_path / "r.html")]
    result = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, *window, *html, "--smoothing", "300,33"])
    assert result.exit_code == 0, result.output
    assert "Behind a 300 ms smoothing buffer" in result.output
    assert "Behind a 300 ms smoothing buffer" in (tmp_path / "r.html").read_text()
    refused = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, *window, *html, "--smoothing", "300,fast"])
    assert refused.exit_code == 2 and "milliseconds must be numbers" in refused.output
    assert "Traceback" not in refused.output


def json_stream(trace: int, document: str, outcome: str, fields_ms: list[int], valid_ms: int | None):
    progress = {
        sc.STREAMSCOPE_JSON_DOCUMENT: document,
        sc.STREAMSCOPE_JSON_OUTCOME: outcome,
        sc.STREAMSCOPE_JSON_FIELD_COUNT: len(fields_ms),
        sc.STREAMSCOPE_JSON_FIELD_NAMES: [f"f{i}" for i in range(len(fields_ms))],
        sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US: [ms * 1000 for ms in fields_ms],
        sc.GEN_AI_REQUEST_MODEL: "m-j",
    }
    if valid_ms is not None:
        progress[sc.STREAMSCOPE_JSON_VALID_OFFSET_US] = valid_ms * 1000
    if not fields_ms:
        del progress[sc.STREAMSCOPE_JSON_FIELD_NAMES], progress[sc.STREAMSCOPE_JSON_FIELD_OFFSETS_US]
    return stream_span(trace, 1, side="client", offsets_ms=steady(10), tokens=[1] * 10, attributes=progress)


def test_structured_output_by_hand(store_client):
    store_spans(
        store_client,
        [
            json_stream(1, "content", "valid", [160, 200], 260),
            json_stream(2, "content", "truncated", [180], None),
            json_stream(3, "tool_call", "malformed", [], None),
            stream_span(4, 1, side="client", offsets_ms=steady(10), tokens=[1] * 10),  # no JSON followed
        ],
    )
    result = build_report(run_on(store_client), START, END, slo_us=400_000).result("structured_output")
    rows = [dict(zip(result.names, row)) for row in result.rows]
    # every stream's first token at 100 ms; the median of two is the larger (quantileExact)
    assert rows == [
        {
            "model": "m-j",
            "document": "content",
            "streams": 2,
            "ttft_p50_ms": 100,
            "first_field_p50_ms": 180,
            "first_field_after_ttft_p50_ms": 80,
            "valid_p50_ms": 260,  # of the one that became valid
            "valid_share": 0.5,
            "truncated_share": 0.5,
            "malformed_share": 0,
        },
        {
            "model": "m-j",
            "document": "tool_call",
            "streams": 1,
            "ttft_p50_ms": 100,
            "first_field_p50_ms": None,
            "first_field_after_ttft_p50_ms": None,
            "valid_p50_ms": None,
            "valid_share": 0,
            "truncated_share": 0,
            "malformed_share": 1,
        },
    ]


def test_retracted_text_by_hand(store_client):
    def withdrawing(trace: int, offsets_ms, content, retracted, retracted_tokens, estimated: bool = False):
        attributes = {
            sc.STREAMSCOPE_CHUNKS_RETRACTED_BYTES: retracted,
            sc.STREAMSCOPE_CHUNKS_RETRACTED_TOKENS: retracted_tokens,
            sc.GEN_AI_REQUEST_MODEL: "m-r",
            sc.STREAMSCOPE_TOKENS_ESTIMATED: estimated,
        }
        tokens = [1 if c else 0 for c in content]
        return stream_span(
            trace, 1, side="client", offsets_ms=offsets_ms, tokens=tokens, content_bytes=content, attributes=attributes
        )

    store_spans(
        store_client,
        [
            # 9 bytes withdrawn at 300 ms, the oldest shown since 140 ms: 160 ms on screen
            withdrawing(1, [100, 120, 140, 160, 300, 320], [10, 6, 6, 6, 0, 5], [0, 0, 0, 0, 9, 0], [0, 0, 0, 0, 3, 0]),
            # 12 bytes at 90 ms (the oldest since 50: 40 ms), then the 4 written at 90 at 110 (20 ms)
            withdrawing(2, [50, 70, 90, 110], [8, 8, 4, 4], [0, 0, 12, 4], [0, 0, 3, 1]),
            withdrawing(3, [10, 20], [4, 4], [0, 0], [0, 0]),
            # its 40 shown tokens are estimates: out of the share, whose tokens are counted
            withdrawing(4, [10, 20, 30, 40], [40, 40, 40, 40], [0, 0, 0, 0], [0, 0, 0, 0], estimated=True),
        ],
    )
    result = build_report(run_on(store_client), START, END, slo_us=400_000).result("retracted_text")
    assert [dict(zip(result.names, row)) for row in result.rows] == [
        {
            "model": "m-r",
            "streams": 4,
            "retracting_share": 0.5,
            "withdrawals": 3,
            "retracted_tokens_per_stream": 1.75,  # 7 tokens over 4 streams
            "retracted_token_share": 0.6364,  # of the 11 tokens shown and counted
            "shown_before_retraction_p50_ms": 40,  # of 20, 40 and 160 ms
            "shown_before_retraction_p95_ms": 160,
        }
    ]


def test_render_time_per_chunk_in_browsers(store):
    rows = build_report(run_on(store), START, END, slo_us=400_000).result("browser_render").rows
    assert [(series, value) for _, series, value in rows] == [
        ("arrival to paint p50", 30),
        ("arrival to paint p95", 50),
        ("render p50", 3),
        ("render p95", 5),
    ]


def test_gpu_to_glass_splits_the_browsers_first_token_into_engine_network_and_screen(store):
    rows = build_report(run_on(store), START, END, slo_us=400_000).result("gpu_to_glass").rows
    # the engine emitted the first chunk 60 ms in, the browser had it 100 ms in and painted it 10 ms later
    assert [(series, value) for _, series, value in rows] == [("1 engine", 60), ("2 network", 40), ("3 screen", 10)]


def test_dashboard_variables_narrow_every_panel(store):
    report = build_report(run_on(store), START, END, slo_us=400_000, variables={"model": ["m-2"]})
    assert report.summary.streams == 4 and report.summary.itl_goodput == 1.0
    assert [row[0] for row in report.result("model_texture").rows] == ["m-2"]
    assert report.result("stalls_by_cause").rows == []  # the one stall is on another model


def test_side_and_route_narrow_every_panel(store):
    default = build_report(run_on(store), START, END, slo_us=400_000)
    assert default.summary.streams == 13 and "side client" in title_line(default)
    server = build_report(run_on(store), START, END, slo_us=400_000, variables={"side": ["server"]})
    assert server.summary.streams == 2 and server.summary.itl_goodput == 1.0  # the servers sent on time
    assert server.result("stalls_by_cause").rows == [] and "side server" in title_line(server)
    # only the stalled stream's trace has a server span, served on the chat route
    routed = build_report(run_on(store), START, END, slo_us=400_000, variables={"route": ["/v1/chat/completions"]})
    assert routed.summary.streams == 1 and routed.summary.itl_goodput == 0.0
    assert [row[1] for row in routed.result("stall_causes").rows] == [1]
    gaps = lambda report: sum(sum(row[1:]) for row in report.result("itl_heatmap").rows)  # noqa: E731
    assert gaps(routed) == 29 < gaps(default)  # chunks too: the 29 gaps of the routed trace's client stream
    assert "route /v1/chat/completions" in title_line(routed)


def test_a_transport_narrows_every_panel_and_the_command_takes_it(store_client, storage_dsn):
    """Two streams over a WebSocket, one of them frozen for 300 ms, beside three over SSE that never stall: with
    the WebSocket chosen, the figures are the two streams' (read from their raw rows: the pre-aggregated tables
    carry no transport)."""
    frozen = steady(40)
    frozen[20:] = [o + 280 for o in frozen[20:]]
    websocket = {sc.STREAMSCOPE_TRANSPORT: "websocket"}
    spans = [
        stream_span(1, 1, side="client", offsets_ms=steady(40), tokens=[1] * 40, attributes=websocket),
        stream_span(2, 1, side="client", offsets_ms=frozen, tokens=[1] * 40, attributes=websocket),
    ]
    spans += [
        stream_span(n, 1, side="client", offsets_ms=steady(30), tokens=[2] * 30, attributes=SSE) for n in (3, 4, 5)
    ]
    store_spans(store_client, spans)
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC))
    every = build_report(run_on(store_client), START, END, slo_us=400_000)
    chosen = build_report(run_on(store_client), START, END, slo_us=400_000, variables={"transport": ["websocket"]})
    assert every.summary.streams == 5 and chosen.summary.streams == 2
    gaps = lambda report: sum(sum(row[1:]) for row in report.result("itl_heatmap").rows)  # noqa: E731
    assert (gaps(every), gaps(chosen)) == (2 * 39 + 3 * 29, 2 * 39)
    economics = chosen.result("chunk_economics")
    assert [dict(zip(economics.names, row))["chunks"] for row in economics.rows] == [80]
    assert (
        [(row[1], row[2]) for row in chosen.result("stalls_by_cause").rows]
        == [(row[1], row[2]) for row in every.result("stalls_by_cause").rows]
        != []
    )  # the one stall is the WebSocket's
    sse = build_report(run_on(store_client), START, END, slo_us=400_000, variables={"transport": ["sse"]})
    assert sse.summary.streams == 3 and sse.result("stalls_by_cause").rows == []
    window = ["--from", f"{START:%Y-%m-%d %H:%M:%S}", "--to", f"{END:%Y-%m-%d %H:%M:%S}"]
    printed = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, "--transport", "websocket", *window])
    assert printed.exit_code == 0 and "transport websocket" in printed.output, printed.output
    wrong = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, "--transport", "carrier-pigeon", *window])
    assert wrong.exit_code == 2 and "--transport" in wrong.output and "Traceback" not in wrong.output


def test_html_is_self_contained_with_a_chart_per_chart_panel(store):
    page = render_html(build_report(run_on(store), START, END, slo_us=400_000))
    charts = [p.key for p in PANELS if p.kind != "table"]
    for key in charts:
        section = re.search(rf'<section id="{key}">(.*?)</section>', page, re.DOTALL)
        assert section and "<svg" in section.group(1), key
    assert "<script" not in page and not re.search(r'(src|href)="(https?:)?//', page)  # nothing to fetch


def _labels(page: str, key: str) -> list[str]:
    """The text of a chart's labels and ticks (matplotlib's SVG names each text it draws in a comment)."""
    section = re.search(rf'<section id="{key}">(.*?)</section>', page, re.DOTALL)
    assert section, key
    return re.findall(r"<!-- (.*?) -->", section.group(1))


@pytest.mark.parametrize(
    ("key", "variables"), [("stream_p99_histogram", {"model": ["m-2"]}), ("stalls_by_cause", None)]
)
def test_charts_of_counts_tick_whole_numbers_only(store, key, variables):
    page = render_html(build_report(run_on(store), START, END, slo_us=400_000, variables=variables))
    ticks = [label for label in _labels(page, key) if re.fullmatch(r"[−-]?[\d.]+", label)]
    assert ticks and all(re.fullmatch(r"\d+", tick) for tick in ticks), ticks  # one stall: no 0.2, 0.4, ...


def test_wide_tables_wrap_their_headers_and_scroll_rather_than_being_cut(store):
    page = render_html(build_report(run_on(store), START, END, slo_us=400_000))
    economics = re.search(r'<section id="chunk_economics">(.*?)</section>', page, re.DOTALL)
    assert economics and '<div class="table"><table>' in economics.group(1)
    assert "<th>stored_<wbr>bytes_<wbr>per_<wbr>chunk</th>" in economics.group(1)
    assert "div.table { overflow-x: auto; }" in page


def test_the_report_says_which_tokens_per_chunk_is_a_median_and_which_a_mean(store):
    report = build_report(run_on(store), START, END, slo_us=400_000)
    medians = report.result("tokens_per_chunk")
    assert medians.names[2] == "median_tokens_per_chunk" and report.panels[3].panel.title.endswith("(median)")
    assert sorted({row[2] for row in medians.rows}) == [1, 2, 4]  # model "": 4 then 1 token; m-2: 2 tokens
    assert "mean_tokens_per_chunk" in report.result("chunk_economics").names
    assert "tokens per chunk (mean) / wire bytes per content byte" in dict(report.summary.rows(400_000))


def test_the_stall_panels_state_attributions_threshold_beside_the_slos():
    rule = StallRule()
    stated = re.search(r"longer than (\d+) ms, or .*at least (\d+) ms and (\d+)x", ATTRIBUTED_STALL)
    assert stated and tuple(int(n) for n in stated.groups()) == (
        rule.threshold_us // 1000,
        rule.relative_floor_us // 1000,
        int(rule.relative_factor),
    )
    assert f"{SLO_US // 1000} ms SLO" in ATTRIBUTED_STALL
    for panel in PANELS:
        if panel.key in ("stalls_by_cause", "stall_causes"):
            assert ATTRIBUTED_STALL in panel.description


def test_report_command_prints_tables_and_writes_html(store, storage_dsn, tmp_path):
    out = tmp_path / "r.html"
    result = CliRunner().invoke(
        cli,
        [
            "report",
            "--model",
            "",
            "--side",
            "client",
            "--storage",
            storage_dsn,
            "--from",
            f"{START:%Y-%m-%d %H:%M:%S}",
            "--to",
            f"{END:%Y-%m-%d %H:%M:%S}",
            "--html",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "Stall attribution" in result.output and "connection" in result.output and "side client" in result.output
    assert out.read_text().startswith("<!doctype html>")


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--since", "soon"], "is not a duration"), (["--from", "2030-01-02", "--to", "2030-01-01"], "must start")],
)
def test_report_command_refuses_a_bad_range_plainly(storage_dsn, args, message):
    result = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, *args])
    assert result.exit_code != 0 and message in result.output
    assert "Traceback" not in result.output


def test_intervals_and_durations():
    assert parse_duration("15m") == timedelta(minutes=15)
    with pytest.raises(ValueError):
        parse_duration("0s")
    assert interval_for(START, START + timedelta(hours=1)) == timedelta(minutes=1)
    assert interval_for(START, START + timedelta(minutes=10)) == timedelta(seconds=10)


def test_the_report_writes_no_file_unless_asked(store, storage_dsn, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    window = ["--from", f"{START:%Y-%m-%d %H:%M:%S}", "--to", f"{END:%Y-%m-%d %H:%M:%S}"]
    result = CliRunner().invoke(cli, ["report", "--storage", storage_dsn, *window])
    assert result.exit_code == 0, result.output
    assert list(tmp_path.iterdir()) == [] and "add --html PATH" in result.output


def test_the_terminal_report_at_80_columns_cuts_nothing_and_prints_the_worst_traces_whole(store):
    from rich.console import Console

    from streamscope_dashboards.report_terminal import print_report

    report = build_report(run_on(store), START, END, slo_us=400_000)
    console = Console(width=80, record=True, color_system=None)
    print_report(report, console)
    text = console.export_text()
    assert "…" not in text  # no header or cell cut short
    (longest,) = store.query(
        "SELECT trace_id FROM stalls WHERE side = 'client' ORDER BY gap_us DESC LIMIT 1"
    ).result_rows[0]
    assert report.stalled_traces[0] == longest
    assert longest in text.splitlines()  # whole, on a line of its own, to paste into `streamscope replay`
    assert "nothing in this range" in text and "\nnone" not in text


def test_slow_first_tokens_by_cause_with_the_wait_split_where_it_was_spent(store_client):
    """Three streams queued 2.4 to 3.0 s for a slot behind a gateway (the node's agent saw requests waiting), one on
    time: the panel lists the queue's three, with the engine's part of the wait apart from the path's."""
    spans = []
    for n, (first_ms, at_s) in enumerate([(2_400, 0), (3_000, 2), (2_600, 4), (100, 8)]):
        gateway = [first_ms + 20 * i for i in range(10)]
        node = {sc.STREAMSCOPE_NODE_NAME: "llama-0"}
        start = T0 + at_s * S
        spans.append(
            stream_span(
                n + 1,
                2,
                side="gateway",
                offsets_ms=gateway,
                tokens=[1] * 10,
                start_ns=start + 3_000_000,
                attributes=node,
            )
        )
        client = [o + 10 for o in gateway]  # the gateway 3 ms from the client, each way, and its own 4 ms
        spans.append(stream_span(n + 1, 1, side="client", offsets_ms=client, tokens=[1] * 10, start_ns=start))
    store_spans(store_client, spans)
    waiting = [
        ["t", datetime.fromtimestamp((T0 + k * S // 4) / 1e9, UTC), "llama-0", "requests_waiting", 3.0]
        for k in range(1, 20)
    ]
    store_client.insert("engine_samples", waiting, column_names=["tenant", "time", "node_name", "metric", "value"])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC))

    result = build_report(run_on(store_client), START, END, slo_us=400_000).result("slow_starts")
    (row,) = [dict(zip(result.names, row)) for row in result.rows]
    assert (row["cause"], row["slow_starts"], row["worst_ttft_ms"]) == ("queue", 3, 3_010)
    assert row["median_engine_ms"] == 2_600 and row["median_path_ms"] == 10 and row["median_host_ms"] == 0
