"""``stream_histograms``, ``smoothing_histograms`` (migrations 0032, 0033, 0037) and ``stream_totals`` (0033,
0037, 0039, 0040): every stream is counted at every step in the bucket the migrations document, and summed, checked
against a Python reading of the stored rows; the attribution job counts the smoothing rows of timed streams only; the
migrations' copies count what the writer and the job count; a replayed insert is not counted twice."""

from __future__ import annotations

import math
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial

import pytest
from opentelemetry.proto.common.v1.common_pb2 import KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_dashboards.panels.common import SLO_US as PANELS_SLO_US
from streamscope_ingest.analysis.attribution_job import AttributionJob
from streamscope_ingest.blocks import columns
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.rollups.stream_histograms import SLO_US
from streamscope_ingest.store import migrations
from streamscope_ingest.store.writer import ClickHouseWriter
from tests.support import T0, any_value, store_spans, stream_span, trace_request

S = 1_000_000_000  # ns
STEPS_S = (5, 60, 300, 3600)
ZERO, MOST = -32768, 32767


def spans():
    """Client and server streams of two models starting in different 5 s, minute and hour intervals: with and
    without stalls, one calling a tool, one whose tokens are all 0 (a pace of 0), one with a single chunk (no
    pace), one whose last chunks were dropped (partial), three whose tokens were estimated and counted in total
    (one of them partial, one with reasoning tokens in its total)."""
    made = []
    for n, start_s in enumerate((0, 3, 7, 61, 302, 3599, 3601)):
        offsets = [0, 10, 20 + n, 45, 95 + 7 * n, 95.5 + 7 * n, 700 + 100 * n, 710 + 100 * n]
        attributes: dict = {sc.GEN_AI_REQUEST_MODEL: f"m-{n % 2}"}
        if n == 2:
            attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] = 5
        if n == 4:
            attributes[sc.STREAMSCOPE_CHUNKS_DROPPED] = 3
        if n in (1, 3, 4):  # tokens estimated from bytes, the answer's total told (kept whole: 1 and 3)
            attributes |= {sc.STREAMSCOPE_TOKENS_ESTIMATED: True, sc.GEN_AI_USAGE_OUTPUT_TOKENS: 5 + n}
        if n == 3:  # some of them spent reasoning, which the stream may not have shown
            attributes[sc.GEN_AI_USAGE_REASONING_OUTPUT_TOKENS] = 2
        tokens = [0] * len(offsets) if n == 5 else [1, 2, 1, 3, 1, 1, 2, 1]
        if n == 6:
            offsets, tokens = offsets[:1], tokens[:1]
        for side, span in (("client", 1), ("server", 2)):
            node = {sc.STREAMSCOPE_NODE_NAME: f"node-{n % 3}"} if side == "server" else {}
            made.append(stream_span(n + 1, span, side=side, offsets_ms=offsets, tokens=tokens,
                                    content_bytes=[4] * len(tokens), start_ns=T0 + start_s * S,
                                    attributes=attributes | node))  # fmt: skip
    return made


def ended_unknown() -> Span:
    """Another instrumentation's span of a stream that says nothing of how it ended (outcome unknown)."""
    attributes = {sc.GEN_AI_OPERATION_NAME: "chat", sc.GEN_AI_REQUEST_MODEL: "m-0"}
    return Span(
        trace_id=bytes([9] * 16),
        span_id=bytes([9] * 8),
        name="chat m-0",
        start_time_unix_nano=T0,
        end_time_unix_nano=T0 + S,
        attributes=[KeyValue(key=key, value=any_value(value)) for key, value in attributes.items()],
    )


def log_bucket(value: float) -> int:
    return ZERO if value == 0 else max(-MOST, min(MOST, math.floor(math.log(value) / math.log(1.01)) + 1))


def index_bucket(value: float) -> int:
    return max(-MOST, min(MOST, math.floor(value * 10_000)))


def expected_streams(client) -> Counter:
    """The rows migrations 0032 and 0033 document, computed here from ``stream_metrics`` and ``streams``."""
    rows = client.query(
        "SELECT toUnixTimestamp(m.start_time), m.side, m.model, m.stall_count, m.tokens_per_s, "
        "s.first_tool_call_seq IS NOT NULL, s.tool_call_pause_us, m.first_byte_lead_us, m.head_burst_ratio, "
        "if(m.coverage IN ('full', 'partial'), m.chunks_per_s, NULL), m.ttft_us, "
        "if(m.coverage IN ('full', 'arrivals'), m.gap_p99_us, NULL) FROM stream_metrics AS m "
        "JOIN streams AS s USING (trace_id, span_id)"
    ).result_rows
    counted: Counter = Counter()
    for start_s, side, model, stalls, pace, tool_call, pause, lead, burst, chunk_pace, ttft, p99 in rows:
        figures = {"stall_count": min(stalls, MOST), "tool_call": int(tool_call)}
        for name, value in (("tokens_per_s", pace), ("tool_call_pause_us", pause), ("head_burst_ratio", burst),
                            ("first_byte_lead_us", None if lead is None else max(lead, 0)),
                            ("chunks_per_s", chunk_pace), ("ttft_us", ttft), ("gap_p99_us", p99)):  # fmt: skip
            if value is not None:
                figures[name] = log_bucket(value)
        for figure, bucket in figures.items():
            for step in STEPS_S:
                counted[(step, side, start_s // step * step, model, figure, bucket)] += 1
    return counted


def expected_totals(client) -> Counter:
    """Each step's interval, side, model, source, coverage and node with its streams' sums, as migrations 0033,
    0037, 0039 and 0040 document."""
    rows = client.query(
        "SELECT toUnixTimestamp(start_time), side, model, source, coverage, node_name, content_chunks, tokens, "
        "content_bytes, wire_bytes, outcome IN ('cancelled', 'disconnected'), stall_count > 0, "
        "ifNull(gap_max_us, 0) > 400000, frontloaded_then_stalled, stuck_loop, outcome = 'unknown', "
        "content_chunks * (wire_bytes > 0), content_bytes * (wire_bytes > 0), ifNull(counted_tokens, 0), "
        "content_chunks * (counted_tokens IS NOT NULL), content_chunks_by_tokens FROM stream_metrics"
    ).result_rows
    summed: Counter = Counter()
    for start_s, side, model, source, coverage, node, *sums, by_tokens in rows:
        for step in STEPS_S:
            key = (step, side, start_s // step * step, model, source, coverage, node)
            summed[(*key, "streams")] += 1
            for name, value in zip(TOTALS[1:], sums):
                summed[(*key, name)] += int(value)
            for tokens, chunks in by_tokens.items():
                summed[(*key, f"tokens {tokens}")] += chunks
    return summed


TOTALS = columns.STREAM_SUMS


def stored_totals(client) -> Counter:
    key = "step, side, toUnixTimestamp(interval_start), model, source, coverage, node_name"
    sums = ", ".join(f"sum({name})" for name in TOTALS)
    rows = client.query(
        f"SELECT {key}, {sums}, sumMap(content_chunks_by_tokens) FROM stream_totals GROUP BY {key}"
    ).result_rows
    summed: Counter = Counter()
    for row in rows:
        for name, value in zip(TOTALS, row[7:-1]):
            summed[(*row[:7], name)] = value
        for tokens, chunks in row[-1].items():
            summed[(*row[:7], f"tokens {tokens}")] = chunks
    return +summed


def stored(client, table: str, key: str) -> Counter:
    rows = client.query(f"SELECT {key}, sum(streams) FROM {table} GROUP BY {key}").result_rows
    return Counter({tuple(row[:-1]): row[-1] for row in rows})


STREAM_KEY = "step, side, toUnixTimestamp(interval_start), model, figure, bucket"
SMOOTHING_KEY = "step, side, toUnixTimestamp(interval_start), model, depth_ms, figure, bucket"


def attributed(client) -> None:
    AttributionJob(client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(minutes=1))


def test_every_stream_is_counted_at_every_step_in_its_figures_buckets(store_client):
    store_spans(store_client, spans())
    counts = stored(store_client, "stream_histograms", STREAM_KEY)
    assert counts == expected_streams(store_client)
    figures = Counter(key[4] for key in counts if key[0] == 3600)
    assert figures["tool_call_pause_us"] == 2  # one stream on each side called a tool
    assert {key[5] for key in counts if key[4] == "tokens_per_s"} >= {ZERO}  # a pace of 0
    assert sum(n for key, n in counts.items() if key[0] == 5 and key[4] == "stall_count") == 14
    assert sum(n for key, n in counts.items() if key[0] == 5 and key[4] == "tokens_per_s") == 12  # one lone chunk
    assert sum(n for key, n in counts.items() if key[0] == 5 and key[4] == "chunks_per_s") == 12  # all sized


def test_every_stream_is_summed_at_every_step(store_client):
    store_spans(store_client, spans())
    summed = stored_totals(store_client)
    assert summed == +expected_totals(store_client)
    assert sum(n for key, n in summed.items() if key[0] == 60 and key[7] == "streams") == 14
    assert {key[5] for key in summed} == {"full", "partial"} and {key[4] for key in summed} == {"streamscope"}
    assert {key[6] for key in summed if key[1] == "server"} == {"node-0", "node-1", "node-2"}
    assert {key[6] for key in summed if key[1] == "client"} == {""}
    assert sum(n for key, n in summed.items() if key[0] == 60 and key[7] == "over_slo") > 0
    # the estimated streams' told totals: the whole one's, not the partial one's (its 8 chunks a side kept)
    hourly = Counter()
    for key, n in summed.items():
        hourly[key[7]] += n if key[0] == 3600 else 0
    assert hourly["content_chunks"] - hourly["counted_chunks"] == 4 * 8  # 3's and 4's
    assert hourly["tokens"] - hourly["counted_tokens"] == 2 * (12 - 6) + 4 * 12  # 1's told 6 of 12; none of the others


def test_the_slo_the_writer_counts_is_the_migrations_and_the_dashboards():
    [migration] = [m for m in migrations.available() if m.name == "stream_totals"]
    assert f"ifNull(gap_max_us, 0) > {SLO_US})" in " ".join(migration.statements())
    assert SLO_US == PANELS_SLO_US


def expected_smoothing(client) -> Counter:
    """The smoothing rows of streams whose every arrival is known, counted as migration 0032 documents."""
    rows = client.query(
        "SELECT toUnixTimestamp(start_time), side, model, depth_ms, added_end_us, stalls_before, stalls_after, "
        "longest_gap_before_us, longest_gap_after_us, fluidity_before, fluidity_after, andes_before, andes_after "
        "FROM stream_smoothing WHERE (trace_id, span_id) IN "
        "(SELECT trace_id, span_id FROM streams WHERE coverage IN ('full', 'arrivals'))"
    ).result_rows
    counted: Counter = Counter()
    for start_s, side, model, depth, end, *values in rows:
        stalls, longest, indices = values[:2], values[2:4], values[4:]
        buckets = {"added_end_us": log_bucket(end)}
        buckets |= {f"stalls_{w}": min(v, MOST) for w, v in zip(("before", "after"), stalls)}
        buckets |= {f"longest_gap_{w}_us": log_bucket(v) for w, v in zip(("before", "after"), longest)}
        names = ("fluidity_before", "fluidity_after", "andes_before", "andes_after")
        buckets |= {name: index_bucket(v) for name, v in zip(names, indices) if v is not None}
        for figure, bucket in buckets.items():
            for step in STEPS_S:
                counted[(step, side, start_s // step * step, model, depth, figure, bucket)] += 1
    return counted


def test_the_job_counts_the_smoothing_of_timed_streams_only(store_client):
    store_spans(store_client, spans())
    attributed(store_client)
    counts = stored(store_client, "smoothing_histograms", SMOOTHING_KEY)
    assert counts == expected_smoothing(store_client)
    partial = "SELECT count() FROM stream_smoothing WHERE trace_id = (SELECT trace_id FROM streams " \
        "WHERE coverage = 'partial' LIMIT 1)"  # fmt: skip
    assert store_client.query(partial).result_rows[0][0] > 0  # its rows are stored, not counted
    depths = store_client.query("SELECT uniqExact(depth_ms) FROM stream_smoothing").result_rows[0][0]
    counted_streams = sum(n for key, n in counts.items() if key[0] == 3600 and key[5] == "stalls_before")
    timed = store_client.query(
        "SELECT uniqExact(trace_id, span_id) FROM stream_smoothing WHERE (trace_id, span_id) IN "
        "(SELECT trace_id, span_id FROM streams WHERE coverage = 'full')"
    ).result_rows[0][0]
    assert counted_streams == timed * depths and timed > 0


@pytest.mark.parametrize(
    ("migration", "table", "counts"),
    [
        ("outcome_and_rest_stalls", "stream_histograms", partial(stored, table="stream_histograms", key=STREAM_KEY)),
        ("totals_by_node", "stream_totals", stored_totals),
        ("stream_histograms", "smoothing_histograms", partial(stored, table="smoothing_histograms", key=SMOOTHING_KEY)),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_the_migrations_copy_counts_what_was_counted_as_rows_were_written(store_client, migration, table, counts):
    store_spans(store_client, spans())
    store_spans(store_client, [ended_unknown()], scope="opentelemetry.util.genai.handler")
    attributed(store_client)
    as_written = counts(store_client)
    assert as_written
    [copying] = [m for m in migrations.available() if m.name == migration]
    statements = copying.statements()
    truncate = statements.index(f"TRUNCATE TABLE {table}")
    store_client.command(statements[truncate])
    assert counts(store_client) == Counter()
    store_client.command(statements[truncate + 1])
    assert counts(store_client) == as_written


def test_an_insert_replayed_under_its_token_is_counted_once(store_client):
    batch = decode_traces(trace_request(spans()[:6]), tenant="t")
    writer = ClickHouseWriter(store_client)
    writer.insert(batch, token="segment-1")
    once = stored(store_client, "stream_histograms", STREAM_KEY), stored_totals(store_client)
    writer.insert(batch, token="segment-1")  # a crash before the spool's confirmation: the segment again
    assert (stored(store_client, "stream_histograms", STREAM_KEY), stored_totals(store_client)) == once
    assert sum(once[0].values()) > 0 and sum(once[1].values()) > 0
