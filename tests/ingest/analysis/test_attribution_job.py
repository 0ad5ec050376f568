"""The attribution job on hand-built streams written through the real decoders and writer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from clickhouse_connect.driver.exceptions import OperationalError
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

from streamscope import semconv as sc
from streamscope.errors import StreamscopeError
from streamscope_ingest.analysis.attribution import StallRules, Timeline
from streamscope_ingest.analysis.attribution_job import JOB, AttributionJob
from streamscope_ingest.analysis.pass_inputs import CHUNKS_SQL
from streamscope_ingest.analysis.quality import andes_qoe, fluidity_index
from streamscope_ingest.analysis.smoothing import Buffer, smooth_each
from streamscope_ingest.analysis.verdicts import QualityTargets, measured
from streamscope_ingest.decode.logs import decode_logs
from streamscope_ingest.decode.traces import decode_traces
from streamscope_ingest.store.writer import ClickHouseWriter

T0 = 1_800_000_000_000_000_000  # ns
MS = 1_000_000  # ns


def kv(key: str, value) -> KeyValue:
    if isinstance(value, list):
        return KeyValue(key=key, value=AnyValue(array_value=ArrayValue(values=[AnyValue(int_value=v) for v in value])))
    return KeyValue(key=key, value=AnyValue(string_value=value))


def trace_id(trace: int) -> bytes:
    """A trace id ending in a zero byte, as one in 256 do: looked up in a set of unhexed strings, the engine misses
    such a stored FixedString id; the set must hold FixedStrings too."""
    return bytes([trace]) * 15 + b"\0"


def trace_hex(trace: int) -> str:
    return trace_id(trace).hex()


def span(
    trace: int,
    span_byte: int,
    side: str,
    start_ns: int,
    gaps_ms: list[float],
    node: str = "",
    host_delays_ms: dict[int, float] | None = None,
    endpoint: tuple[str, int] | None = None,
    first_ms: float = 100,
    extra: tuple[KeyValue, ...] = (),
) -> Span:
    """A stream span whose first content came ``first_ms`` after its start; ``host_delays_ms`` (chunk -> ms) marks
    its host as watched, with those delays; ``endpoint`` is the server.address and server.port a client streamed
    from."""
    offsets = (np.cumsum([first_ms, *gaps_ms]) * 1000).astype(np.int64)  # µs
    attributes = [
        kv(sc.STREAMSCOPE_SIDE, side),
        kv(sc.STREAMSCOPE_CHUNKS_OFFSET_US, offsets.tolist()),
        kv(sc.STREAMSCOPE_CHUNKS_TOKENS, [1] * offsets.size),
        kv(sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES, [4] * offsets.size),
    ]
    if node:
        attributes.append(kv(sc.STREAMSCOPE_NODE_NAME, node))
    if endpoint is not None:
        attributes += [
            kv(sc.SERVER_ADDRESS, endpoint[0]),
            KeyValue(key=sc.SERVER_PORT, value=AnyValue(int_value=endpoint[1])),
        ]
    if host_delays_ms is not None:
        delays = [int(host_delays_ms.get(i, 0) * 1000) for i in range(offsets.size)]
        attributes += [kv(sc.STREAMSCOPE_HOST_WATCH, "asyncio"), kv(sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US, delays)]
    attributes += extra
    return Span(
        trace_id=trace_id(trace),
        span_id=bytes([span_byte]) * 8,
        name="chat",
        attributes=attributes,
        start_time_unix_nano=start_ns,
        end_time_unix_nano=start_ns + int(offsets[-1]) * 1000 + MS,
    )


def steady(n: int = 30) -> list[float]:
    return [20.0] * n


def with_gap(at: int, gap: float) -> list[float]:
    gaps = steady()
    gaps[at] = gap
    return gaps


def write(client, spans: list[Span], events: list[LogRecord], tenant: str = "t") -> None:
    writer = ClickHouseWriter(client)
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource=Resource(attributes=[kv("service.name", "app")]), scope_spans=[ScopeSpans(spans=spans)]
            )
        ]
    )
    writer.write([decode_traces(request, tenant=tenant)])
    logs = ExportLogsServiceRequest(
        resource_logs=[
            ResourceLogs(
                resource=Resource(attributes=[kv(sc.STREAMSCOPE_NODE_NAME, "node-1")]),
                scope_logs=[ScopeLogs(log_records=events)],
            )
        ]
    )
    writer.write([decode_logs(logs, tenant=tenant)])


def preemption(start_ns: int, end_ns: int) -> LogRecord:
    return LogRecord(
        time_unix_nano=start_ns,
        event_name=sc.STREAMSCOPE_ENGINE_EVENT_EVENT,
        attributes=[
            kv(sc.STREAMSCOPE_EVENT_KIND, "preemption"),
            KeyValue(key=sc.STREAMSCOPE_EVENT_END_UNIX_NANO, value=AnyValue(int_value=end_ns)),
        ],
    )


def test_the_job_attributes_stalls_writes_quality_and_never_repeats_itself(store_client):
    server_a = span(1, 2, "server", T0 + 5 * MS, with_gap(10, 600), node="node-1")
    client_a = span(1, 1, "client", T0, with_gap(10, 600))
    stall_at = T0 + 5 * MS + (100 + 20 * 10 + 600) * MS  # the server chunk after its 600 ms gap
    server_b = span(3, 4, "server", T0 + 5 * MS, steady(), node="node-1")
    client_b = span(3, 3, "client", T0, with_gap(12, 900))
    lone_server = span(5, 5, "server", T0, steady(), node="node-2")
    write(
        store_client,
        [server_a, client_a, server_b, client_b, lone_server],
        [preemption(stall_at - 300 * MS, stall_at - 50 * MS)],
    )

    targets = QualityTargets(first_deadline_ms=200, token_deadline_ms=50, expected_ttft_ms=200, reading_tokens_per_s=40)
    job = AttributionJob(store_client, settle_s=0, quality=targets)
    written = job.run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query(
        "SELECT trace_id, seq, cause, gap_us, server_gap_us, node_name FROM stalls ORDER BY trace_id"
    ).result_rows
    assert written == 2
    assert rows == [
        (trace_hex(1), 11, "kv_pressure", 600_000, 600_000, "node-1"),
        (trace_hex(3), 13, "connection", 900_000, 20_000, "node-1"),
    ]
    quality = dict(
        store_client.query("SELECT trace_id, (side, stalls, fluidity_index) FROM stream_quality").result_rows
    )
    assert set(quality) == {trace_hex(1), trace_hex(3), trace_hex(5)}  # server spans with a client are not rated twice
    assert quality[trace_hex(5)] == ("server", 0, 1.0)
    # trace 01 by hand: first chunk 100 ms early against 200 (slack 100), nine 20 ms gaps bank 30 each (370),
    # the 600 ms gap is floor((600 - 370 - 50) / 50) + 1 = 4 misses, then 20 gaps on time: 1 - 4 / 34
    side, stalls, fluidity = quality[trace_hex(1)]
    assert (side, stalls) == ("client", 1) and fluidity == pytest.approx(1 - 4 / 34, abs=1e-6)

    # every rated stream replayed behind each buffer depth; trace 01's 600 ms gap, after twenty chunks 20 ms apart
    # (the stream's pace): 250 ms of backlog shortens it to 350 ms, still a stall, 500 ms to 100 ms, none
    smoothing = store_client.query(
        "SELECT depth_ms, (stalls_before, stalls_after, longest_gap_after_us, added_ttft_us, rate_ms) "
        "FROM stream_smoothing WHERE trace_id = {t:String} ORDER BY depth_ms",
        parameters={"t": trace_hex(1)},
    ).result_rows
    assert smoothing == [
        (100, (1, 1, 500_000, 100_000, 20)),
        (250, (1, 1, 350_000, 250_000, 20)),
        (500, (1, 0, 100_000, 500_000, 20)),
    ]
    assert store_client.query("SELECT count() FROM stream_smoothing").result_rows[0][0] == 3 * 3

    assert job.run_once(until=datetime.now(UTC) + timedelta(seconds=2)) == 0  # the watermark moved on
    assert store_client.query("SELECT count() FROM stream_quality").result_rows[0][0] == 3
    assert store_client.query("SELECT count() FROM stream_smoothing").result_rows[0][0] == 3 * 3


def test_another_tenants_spans_in_the_same_trace_never_reach_a_streams_verdict(store_client):
    """A service that got a tenant's ``traceparent`` knows its ids: its spans with them, a client span with the very
    same ids or a server span in the trace, are its own and weigh nothing in the first tenant's verdicts."""
    write(
        store_client,
        [span(1, 1, "client", T0, with_gap(12, 900)), span(1, 2, "server", T0 + 5 * MS, steady(), node="node-1")],
        [],
        tenant="owner",
    )
    forged = [span(1, 1, "client", T0, with_gap(5, 700)), span(1, 3, "server", T0 + 5 * MS, with_gap(12, 900))]
    write(store_client, forged, [], tenant="intruder")
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query(
        "SELECT tenant, seq, cause, gap_us, server_gap_us FROM stalls ORDER BY tenant, seq"
    ).result_rows
    assert [row for row in rows if row[0] == "owner"] == [("owner", 13, "connection", 900_000, 20_000)]
    assert {row[0] for row in rows} <= {"owner", "intruder"}
    assert store_client.query(
        "SELECT tenant, stalls FROM stream_quality WHERE side = 'client' ORDER BY tenant"
    ).result_rows == [("intruder", 1), ("owner", 1)]


def test_an_sglang_node_reporting_only_its_acceptance_length_runs_speculative_decoding(store_client):
    # SGLang exports sglang:spec_accept_length (0 when it does not speculate) and no draft-token counter
    collapsed = [45.0] * 10 + [170.0] * 5 + [45.0] * 15  # five chunks at one token per step instead of three
    write(
        store_client,
        [span(7, 8, "server", T0 + 5 * MS, collapsed, node="sglang-0"), span(7, 7, "client", T0, collapsed)],
        [],
    )
    samples = [
        ["t", datetime.fromtimestamp((T0 + k * 250 * MS) / 1e9, UTC), "sglang-0", "spec_accept_length", length]
        for k, length in enumerate([3.0, 3.0, 1.1, 1.0, 3.0])
    ]
    columns = ["tenant", "time", "node_name", "metric", "value"]
    store_client.insert("engine_samples", samples, column_names=columns)

    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    causes = store_client.query(
        "SELECT DISTINCT cause FROM stalls WHERE trace_id = {t:String}", parameters={"t": trace_hex(7)}
    )
    assert causes.result_rows == [("spec_decode",)]
    # the same node with speculation off (the gauge at 0) has no explanation for the slow stretch
    store_client.command("TRUNCATE TABLE stalls")
    store_client.command("TRUNCATE TABLE attribution_progress")
    store_client.command(
        "ALTER TABLE engine_samples UPDATE value = 0 WHERE node_name = 'sglang-0' SETTINGS mutations_sync = 1"
    )
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    causes = store_client.query(
        "SELECT DISTINCT cause FROM stalls WHERE trace_id = {t:String}", parameters={"t": trace_hex(7)}
    )
    assert causes.result_rows == [("unknown",)]


def test_a_job_far_behind_catches_up_in_bounded_passes_without_skipping_or_repeating(store_client):
    for trace in range(1, 8):  # seven inserts, seven instants of ingestion
        write(store_client, [span(trace, trace, "client", T0, with_gap(5, 700))], [])
    job = AttributionJob(store_client, settle_s=0, pass_streams=3)
    until = datetime.now(UTC) + timedelta(seconds=1)

    def rated() -> int:
        return store_client.query("SELECT count() FROM stream_quality").result_rows[0][0]

    stalls, caught_up = job.run_pass(until)
    first_pass = rated()
    assert not caught_up and 3 <= first_pass < 7 and stalls == first_pass  # one 700 ms stall per stream
    assert job.watermark() < until
    assert job.run_once(until) == 7 - first_pass
    assert store_client.query("SELECT count(), uniqExact(trace_id) FROM stream_quality").result_rows == [(7, 7)]
    assert job.run_pass(until) == (0, True)


def test_a_pass_that_finds_no_stream_writes_nothing_and_skips_none(store_client):
    # an idle collector's job runs every few seconds: each pass over an empty window made two parts of progress
    job = AttributionJob(store_client, settle_s=0)

    def progress_rows() -> int:
        return store_client.query("SELECT count() FROM attribution_progress").result_rows[0][0]

    for _ in range(3):
        assert job.run_pass(datetime.now(UTC) + timedelta(seconds=1)) == (0, True)
    assert progress_rows() == 0
    write(store_client, [span(1, 1, "client", T0, with_gap(5, 700))], [])  # stored after those passes' windows
    assert job.run_once(datetime.now(UTC) + timedelta(seconds=2)) == 1
    assert progress_rows() == 2  # where the pass would end, then that it got there
    for _ in range(3):
        assert job.run_pass(datetime.now(UTC) + timedelta(seconds=3)) == (0, True)
    assert progress_rows() == 2 and store_client.query("SELECT count() FROM stream_quality").result_rows == [(1,)]


def test_a_pass_that_ends_among_streams_stored_together_takes_them_all_and_skips_none(store_client):
    for first in (1, 4):  # two inserts of three streams: three streams in each instant of ingestion
        write(store_client, [span(t, t, "client", T0, with_gap(5, 700)) for t in range(first, first + 3)], [])
    job = AttributionJob(store_client, settle_s=0, pass_streams=2)

    assert job.run_once(datetime.now(UTC) + timedelta(seconds=1)) == 6
    assert store_client.query("SELECT count(), uniqExact(trace_id) FROM stream_quality").result_rows == [(6, 6)]


def test_a_watched_clients_own_host_delays_reach_the_verdict(store_client):
    """Three clients read a chunk late (each from its own node, so no host is shared); the one whose host says it
    was not running then is client_host."""
    server = span(7, 2, "server", T0 + 5 * MS, steady(), node="node-1")
    late = with_gap(12, 450)
    busy = span(7, 1, "client", T0, late, host_delays_ms={13: 440})
    server_b = span(8, 2, "server", T0 + 5 * MS, steady(), node="node-2")
    quiet = span(8, 1, "client", T0, late, host_delays_ms={13: 3})
    unwatched = span(9, 1, "client", T0, late)
    server_c = span(9, 2, "server", T0 + 5 * MS, steady(), node="node-3")
    write(store_client, [server, busy, server_b, quiet, server_c, unwatched], [])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query("SELECT trace_id, cause, evidence FROM stalls ORDER BY trace_id").result_rows
    assert [(trace, cause) for trace, cause, _ in rows] == [
        (trace_hex(7), "client_host"),
        (trace_hex(8), "connection"),
        (trace_hex(9), "connection"),
    ]
    assert dict(rows[0][2])["host_delay_ms"] == "440.0" and "host_delay_ms" not in dict(rows[2][2])


@pytest.mark.parametrize("shared", [True, False])
def test_streams_held_together_by_the_endpoint_they_streamed_from_are_the_paths(store_client, shared):
    """Three watched clients, each served by its own node, read a chunk 450 ms late at the same instant: through
    one gateway (the same server.address and port), the gateway held them all, which their shared endpoint
    shows; through three, nothing ties them and each is a connection of its own."""
    spans = []
    for trace in (11, 12, 13):
        gateway = ("gw.example", 8443) if shared else (f"gw-{trace}.example", 8443)
        spans.append(span(trace, 2, "server", T0 + 5 * MS, steady(), node=f"node-{trace}"))
        spans.append(span(trace, 1, "client", T0, with_gap(12, 450), host_delays_ms={}, endpoint=gateway))
    write(store_client, spans, [])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query("SELECT cause, evidence['held_together_with'] FROM stalls ORDER BY trace_id").result_rows
    together = "2 of 2 streams in flight on endpoint gw.example:8443" if shared else ""
    assert rows == [("connection", together)] * 3


@pytest.mark.parametrize("seed", range(24))
def test_a_streams_quality_is_that_of_its_arrivals_whether_or_not_smoothing_measured_it(seed):
    """The job takes a stream's quality indices from its smoothing's "before" figures where they are the same
    measure (no paints, every chunk with tokens brought content); elsewhere it measures them apart."""
    rng = np.random.default_rng(seed)
    size = int(rng.integers(0, 150))
    offsets = np.cumsum(rng.lognormal(np.log(40_000), 1.0, size).astype(np.int64)) + 200_000
    if seed % 4 == 1 and size > 3:  # an aside's own gap can put it past the content after it
        offsets[1], offsets[2] = offsets[2] + 5_000, offsets[1]
    content = rng.integers(1, 60, size) * (rng.random(size) > 0.1)
    counts = rng.choice([0, 1, 2, 4], size=size)
    if seed % 2:
        counts[content == 0] = 0  # every chunk with tokens brought content
    paint = [rng.integers(0, 30_000, size), np.zeros(size, np.int64), None][seed % 3]  # painted late, at once, unknown
    timeline = Timeline(0, offsets, content, paint)
    targets = QualityTargets(300, 20, 300, 60).in_us()  # tight: the measures tell the timelines apart
    buffers = [Buffer(100), Buffer(500)]
    (fluidity, andes), smoothed = measured(timeline, counts, buffers, StallRules(), targets)
    assert fluidity == fluidity_index(offsets, counts, targets.first_deadline_us, targets.token_deadline_us)
    assert andes == andes_qoe(offsets, counts, targets.expected_ttft_us, targets.reading_tokens_per_s)
    assert smoothed == smooth_each(timeline, counts, buffers, StallRules(), targets)


def test_the_jobs_chunk_offsets_are_the_timeline_views_for_every_kind_of_chunk(store_client):
    """The job reads offsets from each stream's arrays; ``chunk_timeline`` is their definition (content moves the
    clock on; a lead, aside or retract chunk sits its own gap after the content before it)."""
    kinds = ["lead", "first", "content", "aside", "content", "retract", "content", "aside"]
    for trace, gaps in (("0a" * 16, [5, 100, 40, 7, 30, 3, 2_000_000, 9]), ("b0" * 16, [0, 1, 1, 0, 1, 0, 1, 0])):
        store_client.command(
            "INSERT INTO chunk_arrays (tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider,"
            " model, kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us) VALUES"
            f" ('t', now64(6), unhex('{trace}'), unhex('0102030405060708'), 's', 'client', 'p', 'm', {kinds},"
            f" {gaps}, {[1] * 8}, {[4] * 8}, {[0] * 8}, {[0] * 8}, {[0] * 8})"
        )
    view = store_client.query(
        "SELECT trace_id, span_id, groupArray(offset_us) FROM (SELECT * FROM chunk_timeline ORDER BY seq)"
        " GROUP BY trace_id, span_id ORDER BY trace_id"
    ).result_rows
    now_us = int(datetime.now(UTC).timestamp() * 1e6)
    bounds = {"first": now_us - 60 * 10**6, "last": now_us + 60 * 10**6}
    traces = {"traces": ["0a" * 16, "b0" * 16], "tenants": ["t"]}
    ours = store_client.query(CHUNKS_SQL, parameters={**traces, **bounds}).result_rows
    assert sorted((trace, span, list(offsets)) for _, trace, span, offsets, *_ in ours) == [
        (trace, span, list(offsets)) for trace, span, offsets in view
    ]
    assert view[0][2] == [5, 100, 140, 147, 170, 173, 2_000_170, 2_000_179]  # as the view's rule reads


class _ProgressLostOnce:
    """The job's insert client, whose first write of the job's progress fails after the pass's rows were stored:
    the store went away between two inserts."""

    def __init__(self, client) -> None:
        self._client = client
        self.failed = False

    def __getattr__(self, name: str):
        return getattr(self._client, name)

    def insert(self, table: str, data, *args, **kwargs):
        if table == "attribution_progress" and data[0][0] == JOB and not self.failed:
            self.failed = True
            raise OperationalError("the store went away")
        return self._client.insert(table, data, *args, **kwargs)


def _attributed(client) -> dict[str, int]:
    return {
        table: client.query(f"SELECT {count} FROM {table}").result_rows[0][0]
        for table, count in (
            ("stalls", "count()"),
            ("stream_quality", "count()"),
            ("stream_smoothing", "count()"),
            ("smoothing_histograms", "sum(streams)"),
        )
    }


def test_a_pass_repeated_after_a_store_fault_counts_nothing_twice(store_client):
    write(
        store_client,
        [span(1, 1, "client", T0, with_gap(10, 600)), span(3, 3, "client", T0, with_gap(12, 900))],
        [],
    )
    faulty = _ProgressLostOnce(store_client)
    job = AttributionJob(store_client, settle_s=0, insert_client=faulty)
    until = datetime.now(UTC) + timedelta(seconds=1)
    with pytest.raises(StreamscopeError):
        job.run_once(until=until)
    once = _attributed(store_client)
    assert faulty.failed and once["stalls"] == 2 and once["smoothing_histograms"] > 0

    assert job.run_once(until=until) == 2  # the watermark did not move: the same pass again
    assert _attributed(store_client) == once


def test_a_pass_retried_later_over_more_streams_counts_the_first_ones_once(store_client):
    write(store_client, [span(1, 1, "client", T0, with_gap(10, 600))], [])
    faulty = _ProgressLostOnce(store_client)
    job = AttributionJob(store_client, settle_s=0, insert_client=faulty)
    with pytest.raises(StreamscopeError):
        job.run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    write(store_client, [span(3, 3, "client", T0, with_gap(12, 900))], [])  # arrives meanwhile

    job.run_once(until=datetime.now(UTC) + timedelta(seconds=2))
    clean = AttributionJob(store_client, settle_s=0)
    assert clean.run_once(until=datetime.now(UTC) + timedelta(seconds=3)) == 0
    stalls = store_client.query("SELECT trace_id, count() FROM stalls GROUP BY trace_id ORDER BY trace_id")
    assert stalls.result_rows == [(trace_hex(1), 1), (trace_hex(3), 1)]
    rated = store_client.query("SELECT trace_id, count() FROM stream_quality GROUP BY trace_id ORDER BY trace_id")
    assert rated.result_rows == [(trace_hex(1), 1), (trace_hex(3), 1)]
    assert _attributed(store_client)["stream_smoothing"] == 2 * 3


def test_behind_a_gateway_with_no_server_span_the_gateways_side_is_the_engines(store_client):
    """An engine that records nothing (llama-server behind ``streamscope gateway --node``): the gateway's reads are
    its emissions. A gap the gateway saw too is the engine's, judged with its node's events; a gap only the client
    saw is the path's; a gateway span's own chunks are never judged as a reader's."""
    stall_at = T0 + 5 * MS + (100 + 20 * 10 + 600) * MS
    spans = [
        span(21, 1, "client", T0, with_gap(10, 600)),
        span(21, 2, "gateway", T0 + 5 * MS, with_gap(10, 600), node="node-1"),
        span(22, 1, "client", T0, with_gap(12, 900)),
        span(22, 2, "gateway", T0 + 5 * MS, steady(), node="node-1"),
    ]
    write(store_client, spans, [preemption(stall_at - 300 * MS, stall_at - 50 * MS)])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query(
        "SELECT trace_id, side, seq, cause, server_gap_us, node_name FROM stalls ORDER BY trace_id"
    ).result_rows
    assert rows == [
        (trace_hex(21), "client", 11, "kv_pressure", 600_000, "node-1"),
        (trace_hex(22), "client", 13, "connection", 20_000, "node-1"),
    ]


def test_with_server_and_gateway_spans_the_server_is_the_upstream_and_the_gateway_splits_the_path(store_client):
    spans = [
        span(23, 1, "client", T0, with_gap(12, 900)),
        span(23, 2, "gateway", T0 + 3 * MS, with_gap(12, 900)),
        span(23, 3, "server", T0 + 5 * MS, steady(), node="node-1"),
    ]
    write(store_client, spans, [])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query("SELECT cause, server_gap_us, evidence['held_at'] FROM stalls").result_rows
    assert rows == [("connection", 20_000, "gateway")]


def test_a_first_token_a_queue_held_is_a_slow_start_of_its_own_cause(store_client):
    """Behind a gateway, a stream whose first token came 2.4 s after its request while the node's agent saw requests
    waiting for a slot: a slow start, ``queue``, with its wait split by the sides; a stream on time is none."""
    spans = [
        span(31, 1, "client", T0, steady(), first_ms=2_406),
        span(31, 2, "gateway", T0 + 3 * MS, steady(), node="node-1", first_ms=2_400),
        span(32, 1, "client", T0 + 3_000 * MS, steady(), first_ms=106),
        span(32, 2, "gateway", T0 + 3_003 * MS, steady(), node="node-1", first_ms=100),
    ]
    write(store_client, spans, [])
    samples = [
        ["t", datetime.fromtimestamp((T0 + k * 250 * MS) / 1e9, UTC), "node-1", "requests_waiting", waiting]
        for k, waiting in enumerate([0, 2, 3, 3, 3, 3, 3, 3, 1, 0, 0])
    ]
    store_client.insert("engine_samples", samples, column_names=["tenant", "time", "node_name", "metric", "value"])

    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query(
        "SELECT trace_id, side, node_name, ttft_us, upstream_us, path_us, host_us, cause, evidence['node_events'] "
        "FROM slow_starts"
    ).result_rows
    assert rows == [(trace_hex(31), "client", "node-1", 2_406_000, 2_400_000, 6_000, 0, "queue", "requests_waiting")]
    assert store_client.query("SELECT count() FROM stalls").result_rows == [(0,)]


@pytest.mark.parametrize(
    ("time_in_queue", "cause", "said"),
    [
        (AnyValue(double_value=0.02), "kv_pressure", "20.0"),
        (AnyValue(double_value=2.1), "queue", "2100.0"),
        (None, "queue", ""),
        (AnyValue(double_value=-1.0), "queue", ""),
        (AnyValue(string_value="soon"), "queue", ""),
    ],
)
def test_a_servers_own_time_in_queue_tells_whether_the_request_was_one_of_those_waiting(
    store_client, time_in_queue, cause, said
):
    """A first token 2.4 s late while the node had requests waiting and preempted some: the server span's time in
    queue (vLLM's attribute) says whether this request waited to be admitted (``queue``) or was admitted at once and
    held after (``kv_pressure``); without it, or with one that is no time, the node's samples speak."""
    extra = () if time_in_queue is None else (KeyValue(key=sc.GEN_AI_LATENCY_TIME_IN_QUEUE, value=time_in_queue),)
    spans = [
        span(33, 1, "client", T0, steady(), first_ms=2_406),
        span(33, 2, "server", T0 + 3 * MS, steady(), node="node-1", first_ms=2_400, extra=extra),
    ]
    write(store_client, spans, [preemption(T0 + 400 * MS, T0 + 600 * MS)])
    samples = [
        ["t", datetime.fromtimestamp((T0 + k * 250 * MS) / 1e9, UTC), "node-1", "requests_waiting", waiting]
        for k, waiting in enumerate([0, 2, 3, 3, 3, 3, 3, 3, 1, 0, 0])
    ]
    store_client.insert("engine_samples", samples, column_names=["tenant", "time", "node_name", "metric", "value"])

    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    rows = store_client.query("SELECT cause, evidence['time_in_queue_ms'] FROM slow_starts").result_rows
    assert rows == [(cause, said)]


def test_a_slow_first_token_in_a_stream_a_gateway_buffered_is_that_gateways(store_client):
    """A gateway that hands the stream over every 600 ms held its first chunk too: the slow start, 1.1 s, is the
    gateway's buffering like the stream's stalls, not a stalled connection."""
    sent = 500 + 20 * np.arange(90)  # ms after the server's start, on its clock
    flushes = 1_100 + 600 * np.arange(6)
    flush = np.searchsorted(flushes, sent)
    in_flush = np.arange(90) - np.searchsorted(flush, flush)  # each chunk's place in its flush
    arrived = flushes[flush] + 3 + 0.1 * in_flush  # 3 ms on, read in order
    spans = [
        span(34, 1, "client", T0, np.diff(arrived).tolist(), first_ms=float(arrived[0])),
        span(34, 2, "server", T0 + 3 * MS, [20.0] * 89, node="node-1", first_ms=500),
    ]
    write(store_client, spans, [])
    AttributionJob(store_client, settle_s=0).run_once(until=datetime.now(UTC) + timedelta(seconds=1))
    assert {cause for (cause,) in store_client.query("SELECT cause FROM stalls").result_rows} == {"network_buffering"}
    rows = store_client.query("SELECT cause, evidence['path_late_ms'] FROM slow_starts").result_rows
    assert len(rows) == 1 and rows[0][0] == "network_buffering"
