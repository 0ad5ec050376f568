"""The fleet summary on hand-built streams whose answers are worked out below."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_dashboards.fleet import summarize
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import chosen
from streamscope_dashboards.panels.cost import CHUNK_ECONOMICS
from streamscope_dashboards.panels.quality import FLEET_STATS, MODEL_TEXTURE, STREAM_SOURCES
from streamscope_ingest import store
from streamscope_ingest.store import sql
from streamscope_ingest.store.migrations import MIGRATIONS_TABLE
from tests.support import T0, any_value, store_spans, stream_span


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
    # sorted gaps 20, 20, 20, 30, 500, each read as its gap_histograms bucket's middle
    assert (summary.gap_p50_ms, summary.gap_p99_ms) == (pytest.approx(20, rel=0.005), pytest.approx(500, rel=0.005))


def test_with_a_route_chosen_the_gaps_are_read_from_the_chunks_exactly(store_client):
    """The gap histograms carry no route (the server span's): with one chosen, the summary reads the chunks of the
    client streams whose trace was served on it."""
    routed = {sc.HTTP_ROUTE: "/v1/chat"}
    servers = [
        stream_span(n, 100 + n, side="server", offsets_ms=[10, 20], tokens=[1, 1], start_ns=T0 + n, attributes=routed)
        for n in (1, 2)
    ]
    clients = [
        stream(1, [100, 120, 140, 160], [1, 1, 1, 1], [40, 40, 40, 40], "completed"),  # gaps 20, 20, 20
        stream(2, [200, 700], [1, 1], [50, 50], "completed"),  # a 500 ms gap
        stream(3, [300, 333], [1, 1], [50, 50], "completed"),  # not on the route
    ]
    store_spans(store_client, servers + clients)
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(
        lambda q: sql.parse_result(sql.query_json(store_client, q)),
        ctx,
        slo_us=400_000,
        variables={"route": ["/v1/chat"]},
    )
    assert (summary.gap_p50_ms, summary.gap_p95_ms, summary.gap_p99_ms) == (20.0, 500.0, 500.0)  # 20, 20, 20, 500


def test_partial_timelines_are_counted_apart_and_left_out_of_per_stream_gap_figures(store_client):
    """A stream whose chunks were cut short by the SDK's cap has gaps only between the chunks kept: its longest
    gap says nothing about the SLO, so goodput and the per-stream p99 read full timelines, and the summary says
    how many were left out."""
    spans = [
        stream(1, [100, 120, 140], [1, 1, 1], [60, 60, 60], "completed"),
        stream(2, [100, 700, 720], [1, 1, 1], [60, 60, 60], "completed"),  # a 600 ms gap: breaks the SLO
        stream_span(  # 20 ms gaps as far as it was kept; 3,000 chunks past the cap never recorded
            3,
            3,
            side="client",
            offsets_ms=[100, 120],
            tokens=[1, 1],
            start_ns=T0 + 3,
            attributes={sc.STREAMSCOPE_CHUNKS_DROPPED: 3000},
        ),
    ]
    store_spans(store_client, spans)
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(store_client, q)), ctx, slo_us=400_000)
    assert (summary.streams, summary.incomplete_streams) == (3, 1)
    assert summary.itl_goodput == pytest.approx(1 / 2)  # streams 1 and 2 only
    assert summary.p99_of_p99_ms == 600.0
    assert summary.ttft_p50_ms == 100.0  # the cap drops the tail: the first chunk is still the first
    assert ("streams without every chunk's time (left out of goodput and per-stream p99)", "1") in summary.rows(400_000)


def test_the_sources_panel_says_where_streams_came_from_and_how_much_each_knew(store_client):
    spans = [
        stream(1, [100, 120, 140], [1, 1, 1], [60, 60, 60], "completed"),
        stream(2, [100, 120], [1, 1], [60, 60], "completed"),
        stream_span(
            3, 3, side="client", offsets_ms=[100], tokens=[1], start_ns=T0 + 3,
            attributes={sc.STREAMSCOPE_CHUNKS_DROPPED: 10},
        ),
    ]  # fmt: skip
    store_spans(store_client, spans)
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    rows = sql.parse_result(sql.query_json(store_client, resolve(STREAM_SOURCES.sql, ctx, chosen()))).rows
    assert [tuple(row) for row in rows] == [("streamscope", "full", 2, 0.667), ("streamscope", "partial", 1, 0.333)]


def genai_span(n: int, duration_ms: int, attributes: dict) -> Span:
    """A request span of another instrumentation, as its source sends it: no chunk, its own timing attributes."""
    values = {sc.GEN_AI_OPERATION_NAME: "chat", "gen_ai.request.model": "m", **attributes}
    return Span(
        trace_id=bytes([n]) * 16,
        span_id=bytes([n]) * 8,
        name="chat m",
        kind=Span.SPAN_KIND_CLIENT,
        start_time_unix_nano=T0 + n,
        end_time_unix_nano=T0 + n + duration_ms * 1_000_000,
        attributes=[KeyValue(key=key, value=any_value(value)) for key, value in values.items()],
    )


def test_figures_no_stream_can_give_are_unknown_not_zero(store_client):
    """Streams known by their first token or their duration say nothing of gaps or of the first byte: the summary
    gives those figures as unknown, not as 0 ms and 0% goodput, and a TTFT only from the streams that know one."""
    store_spans(
        store_client, [genai_span(1, 900, {"gen_ai.client.operation.time_to_first_chunk": 0.25})], scope="gen_ai"
    )
    store_spans(store_client, [genai_span(2, 700, {})], scope="opentelemetry.util.genai")
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(store_client, q)), ctx, slo_us=400_000)
    assert (summary.streams, summary.incomplete_streams) == (2, 2)
    assert (summary.ttft_p50_ms, summary.ttft_p95_ms) == (250.0, 250.0)
    unknown = (summary.gap_p50_ms, summary.gap_p99_ms, summary.p99_of_p99_ms, summary.itl_goodput)
    assert unknown == (None, None, None, None) and summary.first_byte_lead_ms is None
    assert summary.stored_bytes_per_chunk is None  # their rows take room, but there is no chunk to share it
    rows = dict(summary.rows(400_000))
    assert rows["gap p50 / p95 / p99"] == "unknown"
    assert rows["ITL goodput (every gap within 400 ms)"] == "unknown"
    assert rows["p99 across streams of per-stream p99"] == "unknown"
    assert rows["first byte to first content, median"] == "unknown"
    assert rows["stored bytes per chunk, all tables"] == "unknown"
    stats = store_client.query(resolve(FLEET_STATS.sql, ctx, chosen()))  # as the Grafana plugin reads it: NaN is NaN
    figures = dict(zip(stats.column_names, stats.result_rows[0], strict=True))
    # the panel's TTFT is its stream_histograms bucket's middle, within 0.5 %
    assert (figures["streams"], figures["ttft_p50_ms"], figures["incomplete"]) == (2, pytest.approx(250, rel=0.005), 2)
    assert (figures["p99_of_p99_ms"], figures["itl_goodput"], figures["stall_rate"]) == (None, None, None)


def test_an_empty_range_has_no_ttft(store_client):
    store_spans(store_client, [stream(1, [100, 120], [1, 1], [60, 60], "completed")])
    later = datetime.fromtimestamp(T0 / 1e9 + 600, UTC)
    ctx = QueryContext(later, later + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(store_client, q)), ctx, slo_us=400_000)
    assert summary.streams == 0 and (summary.ttft_p50_ms, summary.itl_goodput, summary.cancel_rate) == (None,) * 3
    assert dict(summary.rows(400_000))["TTFT p50 / p95"] == "unknown"


def test_a_pause_before_a_tool_call_is_a_stall_of_the_answer_everywhere(store_client):
    """The user waits on a pause before a tool call as on any other: it is a stall in the stream's count, breaks
    ITL goodput like one, and the texture table shows its length beside the stall rate it is part of."""
    tool_call = stream_span(1, 1, side="client", offsets_ms=[100, 120, 140, 740, 760], tokens=[1] * 5, start_ns=T0,
                            attributes={sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK: 3})  # fmt: skip
    store_spans(store_client, [tool_call])
    (row,) = store_client.query("SELECT stall_count, tool_call_pause_us, gap_max_us FROM streams").result_rows
    assert row == (1, 600_000, 600_000)
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(store_client, q))  # noqa: E731
    assert summarize(run, ctx, slo_us=400_000).itl_goodput == 0.0
    texture = run(resolve(MODEL_TEXTURE.sql, ctx, chosen()))
    (shown,) = [dict(zip(texture.names, r, strict=True)) for r in texture.rows]
    assert (shown["stall_rate"], shown["tool_calls"]) == (1.0, 1)
    assert shown["tool_call_pause_ms_p50"] == pytest.approx(600, rel=0.005)  # a log bucket's middle


def test_stored_bytes_per_chunk_counts_every_table_and_falls_as_parts_merge(store_client, storage_dsn):
    """What storing a chunk costs is every table its stream fills (its chunks, its row, the rollups counted from
    them), not the chunks' table alone. Each write is a part of its own until the store merges them, and a merged
    part compresses better: the figure says how many parts it is over beyond the merged ones while there are."""
    for n in (1, 2):
        store_spans(store_client, [stream(n, [50, 100, 120, 140], [0, 2, 2, 2], [40, 60, 60, 60], "completed")])
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(store_client, q))  # noqa: E731

    def on_disk() -> dict[str, tuple[int, int]]:
        rows = store_client.query(
            "SELECT table, sum(data_compressed_bytes), count() - uniqExact(partition_id) FROM system.parts "
            "WHERE database = currentDatabase() AND active AND rows > 0 AND table != {skip:String} GROUP BY table",
            parameters={"skip": MIGRATIONS_TABLE},
        ).result_rows
        return {table: (size, extra) for table, size, extra in rows}

    unmerged, tables = summarize(run, ctx, slo_us=400_000), on_disk()
    assert {"chunk_arrays", "streams", "gap_histograms"} <= tables.keys()
    assert unmerged.stored_bytes_per_chunk == pytest.approx(sum(size for size, _ in tables.values()) / 8)
    assert unmerged.unmerged_parts == sum(extra for _, extra in tables.values()) >= len(tables)
    assert dict(unmerged.rows(400_000))["stored bytes per chunk, all tables"].endswith(
        f"(over {unmerged.unmerged_parts} more parts than merged: falls as they merge)"
    )
    writer = store.connect(store.parse_dsn(storage_dsn))  # (the summary's reads leave the other read-only)
    for table in tables:
        writer.command(f"OPTIMIZE TABLE {table} FINAL")
    writer.close()
    merged = summarize(run, ctx, slo_us=400_000)
    assert merged.unmerged_parts == 0
    assert "parts" not in dict(merged.rows(400_000))["stored bytes per chunk, all tables"]
    assert merged.stored_bytes_per_chunk < unmerged.stored_bytes_per_chunk


def test_wire_bytes_a_wrapper_never_saw_are_unknown_not_zero(store_client):
    """The OpenAI client's wrapper reads parsed events, never the wire: its streams record 0 wire bytes, which the
    wire ratios leave out (with only such streams they are unknown) instead of counting as no overhead."""
    store_spans(store_client, [stream(1, [100, 120, 140], [2, 2, 2], [0, 0, 0], "completed")], service="openai-app")
    store_spans(store_client, [stream(2, [100, 120], [1, 1], [50, 50], "completed")], service="sse-app")
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(store_client, q))  # noqa: E731
    assert summarize(run, ctx, slo_us=400_000).wire_per_content_byte == pytest.approx(100 / 8)  # stream 2's alone
    alone = summarize(run, ctx, slo_us=400_000, variables={"service": ["openai-app"]})
    assert alone.wire_per_content_byte is None and alone.tokens_per_chunk == 2.0
    economics = run(resolve(CHUNK_ECONOMICS.sql, ctx, chosen({"service": ["openai-app"]})))
    (row,) = [dict(zip(economics.names, r, strict=True)) for r in economics.rows]
    assert (row["chunks"], row["wire_bytes_per_chunk"], row["wire_per_content_byte"]) == (3, None, None)


def test_tokens_estimated_from_bytes_are_never_averaged_with_counted_ones(store_client):
    """A wrapper that sees no token counts estimates them from the bytes (about 4 a token) and says so: the
    summary gives the counted tokens per chunk and the estimated apart, never one mean of both."""
    counted = stream(1, [100, 120, 140], [2, 2, 2], [40, 40, 40], "completed")
    estimated = stream_span(2, 2, side="client", offsets_ms=[100, 120, 140], tokens=[3, 3, 3], start_ns=T0 + 2,
                            attributes={sc.STREAMSCOPE_TOKENS_ESTIMATED: True})  # fmt: skip
    store_spans(store_client, [counted, estimated])
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    summary = summarize(lambda q: sql.parse_result(sql.query_json(store_client, q)), ctx, slo_us=400_000)
    assert (summary.tokens_per_chunk, summary.estimated_tokens_per_chunk) == (2.0, 3.0)
    shown = dict(summary.rows(400_000))["tokens per chunk (mean) / wire bytes per content byte"]
    assert shown.startswith("2.00 counted (3.00 estimated from bytes) / ")


def test_a_streams_own_count_of_its_tokens_makes_its_mean_counted(store_client):
    """A wrapper that estimates each chunk's tokens from its bytes may still be told the answer's total (OpenAI's
    usage): that count, over the stream's content chunks, is its counted mean (a true 2 per chunk, where 16 bytes a
    chunk read 4), in the summary and chunk economics on either route. A stream whose chunks were not all kept, or
    that did not end as completed, has no count its chunks can be divided by."""

    def estimated(n: int, *, usage: int, outcome: str = "completed", dropped: int = 0):
        attributes = {sc.STREAMSCOPE_TOKENS_ESTIMATED: True, sc.GEN_AI_USAGE_OUTPUT_TOKENS: usage,
                      sc.STREAMSCOPE_OUTCOME: outcome, sc.GEN_AI_REQUEST_MODEL: "m-u"}  # fmt: skip
        if dropped:
            attributes[sc.STREAMSCOPE_CHUNKS_DROPPED] = dropped
        return stream_span(n, n, side="client", offsets_ms=[100, 120, 140, 160], tokens=[4, 4, 4, 4],
                           start_ns=T0 + n, attributes=attributes)  # fmt: skip

    counted = stream_span(1, 1, side="client", offsets_ms=[100, 120], tokens=[3, 3], start_ns=T0 + 1,
                          attributes={sc.STREAMSCOPE_OUTCOME: "completed", sc.GEN_AI_REQUEST_MODEL: "m-u"})  # fmt: skip
    served = [stream_span(n, 100 + n, side="server", offsets_ms=[90], tokens=[1], start_ns=T0 + n,
                          attributes={sc.HTTP_ROUTE: "/v1/chat/completions"}) for n in (1, 2, 3, 4)]  # fmt: skip
    store_spans(store_client, [counted, estimated(2, usage=8), estimated(3, usage=8, dropped=2),
                               estimated(4, usage=8, outcome="cancelled"), *served])  # fmt: skip
    since = datetime.fromtimestamp(T0 / 1e9 - 1, UTC)
    ctx = QueryContext(since, since + timedelta(minutes=1), timedelta(seconds=10))
    run = lambda q: sql.parse_result(sql.query_json(store_client, q))  # noqa: E731
    summary = summarize(run, ctx, slo_us=400_000)
    assert summary.tokens_per_chunk == pytest.approx((6 + 8) / (2 + 4))  # stream 1's, and stream 2's usage
    assert summary.estimated_tokens_per_chunk == 4.0  # every estimated stream's bytes
    for variables in ({}, {"route": ["/v1/chat/completions"]}):  # stream_totals; the streams of a server route
        economics = run(resolve(CHUNK_ECONOMICS.sql, ctx, chosen(variables)))
        rows = [dict(zip(economics.names, r, strict=True)) for r in economics.rows]
        assert [(r["mean_tokens_per_chunk"], r["estimated_tokens_per_chunk"]) for r in rows] == [
            (round(14 / 6, 2), 4.0)
        ], variables
