"""GenAI semantic-convention histograms over real OTLP/HTTP from the OpenTelemetry SDK: stored as sent, read back
per interval (a cumulative point counts only what it adds), and points that cannot be read are refused by name."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality, Metric
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource

from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import chosen
from streamscope_dashboards.panels.quality import GENAI_METRICS
from streamscope_ingest.store import sql
from tests.support import any_value, metric, post

BOUNDS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12)
"""The OpenTelemetry GenAI util's boundaries for gen_ai.client.operation.duration (seconds)."""


def exporting(collector, service: str) -> tuple[MeterProvider, PeriodicExportingMetricReader]:
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{collector.http_url}/v1/metrics"), export_interval_millis=3_600_000
    )
    return MeterProvider(resource=Resource.create({"service.name": service}), metric_readers=[reader]), reader


def record(provider: MeterProvider, values: list[float]) -> None:
    histogram = provider.get_meter("chat.instrumentation").create_histogram(
        "gen_ai.client.operation.duration", unit="s", explicit_bucket_boundaries_advisory=BOUNDS
    )
    for value in values:
        histogram.record(value, {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m-1"})


def panel(collector, service: str) -> list[list]:
    now = datetime.now(UTC)
    ctx = QueryContext(now - timedelta(minutes=5), now + timedelta(minutes=1), timedelta(seconds=10))
    result = sql.parse_result(
        sql.query_json(collector.query_client, resolve(GENAI_METRICS.sql, ctx, chosen({"service": [service]})))
    )
    timed = result.names.index("timed")  # what a first-chunk time measures: these senders' say nothing apart
    assert all(row[timed] == "" for row in result.rows)
    return [[*row[:timed], *row[timed + 1 :]] for row in result.rows]


def quantile(values: list[float], q: float) -> float:
    """What the panel's interpolation over ``BOUNDS`` gives for ``values``, computed apart from its SQL."""
    counts = np.bincount(np.searchsorted(BOUNDS, values, side="left"), minlength=len(BOUNDS) + 1)
    running = np.cumsum(counts)
    rank = q * running[-1]
    i = int(np.argmax(running >= rank))
    lower = BOUNDS[i - 1] if i > 0 else 0.0
    if i == len(BOUNDS):
        return lower
    return lower + (BOUNDS[i] - lower) * (rank - (running[i] - counts[i])) / counts[i]


def test_cumulative_exports_count_each_measurement_once_and_a_restart_starts_over(collector):
    first = [0.05, 0.3, 0.3, 0.9]
    provider, reader = exporting(collector, "cumulative-app")
    record(provider, first)
    reader.force_flush()
    second = [0.07, 0.2, 3.0]
    record(provider, second)
    reader.force_flush()
    reader.force_flush()  # the same totals again: nothing new
    provider.shutdown()
    restarted, _ = exporting(collector, "cumulative-app")  # a new process: its series start again
    third = [0.5]
    record(restarted, third)
    restarted.shutdown()

    stored = collector.query_client.query(
        "SELECT temporality, count FROM genai_metrics WHERE service = 'cumulative-app' ORDER BY time"
    ).result_rows
    assert [count for _, count in stored] == [4, 7, 7, 7, 1]  # as sent: running totals
    assert {temporality for temporality, _ in stored} == {"cumulative"}
    values = first + second + third
    [row] = panel(collector, "cumulative-app")
    assert row[:7] == ["gen_ai.client.operation.duration", "", "", "chat.instrumentation", "m-1", "s", len(values)]
    assert row[7] == round(sum(values) / len(values), 4)
    assert row[8] == round(quantile(values, 0.5), 4) and row[9] == round(quantile(values, 0.95), 4)


def histogram(name: str, temporality: int, *points: tuple, at_ns: int | None = None, **attributes: str) -> Metric:
    """A histogram metric of ``points``, each (start s, time s, bounds, bucket counts, sum or None), seconds before
    ``at_ns`` (now)."""
    now_ns = at_ns or int(datetime.now(UTC).timestamp()) * 10**9
    m = Metric(name=name, unit="s")
    m.histogram.aggregation_temporality = temporality
    for start_s, time_s, bounds, buckets, total in points:
        point = m.histogram.data_points.add(
            start_time_unix_nano=now_ns - start_s * 10**9,
            time_unix_nano=now_ns - time_s * 10**9,
            count=sum(buckets),
            explicit_bounds=bounds,
            bucket_counts=buckets,
        )
        if total is not None:
            point.sum = total
        named = {"gen_ai.response.model": "m-2", **{key.replace("_", "."): v for key, v in attributes.items()}}
        for key, value in named.items():
            point.attributes.add(key=key, value=any_value(value))
    return m


def send(collector, service: str, *metrics: Metric) -> ExportMetricsServiceResponse:
    request = ExportMetricsServiceRequest()
    resource = request.resource_metrics.add()
    resource.resource.attributes.add(key="service.name", value=any_value(service))
    resource.scope_metrics.add().metrics.extend(metrics)
    response = post(collector, request.SerializeToString(), path="/v1/metrics")
    assert response.status_code == 200
    return ExportMetricsServiceResponse.FromString(response.content)


DELTA = AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA
CUMULATIVE = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE


def test_delta_points_are_summed_as_they_are_and_a_retried_one_counts_once(collector):
    first = (20, 10, [0.1, 1.0], [2, 0, 0], 0.2)
    second = (10, 0, [0.1, 1.0], [1, 2, 0], 0.3)
    ttft, now_ns = "gen_ai.server.time_to_first_token", int(datetime.now(UTC).timestamp()) * 10**9
    send(collector, "delta-app", histogram(ttft, DELTA, first, second, at_ns=now_ns))
    send(collector, "delta-app", histogram(ttft, DELTA, second, at_ns=now_ns))  # the export retried
    [row] = panel(collector, "delta-app")
    assert row[4] == "m-2" and row[6] == 5 and row[7] == 0.1
    assert row[8] == round(0.1 * 2.5 / 3, 4)  # rank 2.5 of 5 is in the first bucket, (0, 0.1], which holds 3
    assert row[9] == round(0.1 + 0.9 * (4.75 - 3) / 2, 4)  # rank 4.75 in (0.1, 1.0], which holds the other 2


def test_a_reset_the_start_time_does_not_show_starts_the_count_over(collector):
    bounds, wider = [0.1, 1.0], [0.1, 1.0, 5.0]
    points = (
        (60, 40, bounds, [2, 2, 0], 1.0),
        (60, 30, bounds, [3, 3, 0], 1.5),  # +2
        (60, 20, bounds, [1, 0, 0], 0.05),  # counts went down: a reset, counted whole
        (60, 10, wider, [1, 0, 0, 1], 6.05),  # the buckets changed: whole again
        (60, 0, wider, [1, 0, 0, 4], 21.05),  # +3, all above the top bound
    )
    send(collector, "reset-app", histogram("gen_ai.client.operation.duration", CUMULATIVE, *points))
    rows = sorted(panel(collector, "reset-app"), key=lambda row: -row[6])  # one row per set of bounds
    assert [(row[6], row[7]) for row in rows] == [(7, round((1.5 + 0.05) / 7, 4)), (5, round(21.05 / 5, 4))]
    assert rows[1][9] == 5.0  # p95 in the bucket above every bound: the top bound, no more is known


def test_a_base_url_in_server_address_is_read_for_its_host_and_a_broken_one_kept_as_sent(collector):
    point = (10, 0, [1.0], [1, 0], 0.5)
    for address in ("http://127.0.0.1:8000/v1/", "http://[::1"):
        send(
            collector,
            "address-app",
            histogram("gen_ai.client.operation.duration", DELTA, point, server_address=address),
        )
    stored = collector.query_client.query(
        "SELECT server_address FROM genai_metrics WHERE service = 'address-app' ORDER BY server_address"
    ).result_rows
    assert stored == [("127.0.0.1",), ("http://[::1",)]


def test_a_point_without_a_sum_is_kept_and_leaves_no_mean(collector):
    send(collector, "unsummed-app", histogram("gen_ai.client.token.usage", DELTA, (10, 0, [10.0], [1, 1], None)))
    [row] = panel(collector, "unsummed-app")
    assert row[6] == 2 and row[7] is None and row[8] == 10.0


def test_points_that_cannot_be_read_are_refused_by_name_and_the_rest_kept(collector):
    def point_metric(bounds: list[float], buckets: list[int], count: int) -> Metric:
        m = Metric(name="gen_ai.client.operation.duration", unit="s")
        m.histogram.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
        now = int(datetime.now(UTC).timestamp() * 1e9)
        m.histogram.data_points.add(
            count=count, sum=1.0, explicit_bounds=bounds, bucket_counts=buckets, time_unix_nano=now
        )
        return m

    def refused(*metrics: Metric) -> ExportMetricsServiceResponse:
        request = ExportMetricsServiceRequest()
        request.resource_metrics.add().scope_metrics.add().metrics.extend(metrics)
        response = post(collector, request.SerializeToString(), path="/v1/metrics")
        assert response.status_code == 200
        return ExportMetricsServiceResponse.FromString(response.content)

    answer = refused(
        point_metric([1.0, 2.0], [1, 1], 2),  # a bucket short
        point_metric([2.0, 1.0], [1, 0, 0], 1),  # bounds out of order
        point_metric([1.0], [1, 1], 5),  # buckets count 2
        point_metric([1.0], [], 0),  # bounds without buckets
        point_metric([1.0], [1, 1], 2),  # this one is fine
    )
    assert answer.partial_success.rejected_data_points == 4
    for reason in (
        "2 bucket counts for 2 bounds",
        "0 bucket counts for 1 bounds",
        "bucket bounds are not finite and increasing",
        "its buckets count 2 measurements, its count says 5",
    ):
        assert reason in answer.partial_success.error_message, answer.partial_success.error_message
    kept = collector.query_client.query(
        "SELECT count, bucket_counts FROM genai_metrics WHERE service = '' AND count = 2"
    ).result_rows
    assert kept == [(2, [1, 1])]

    unspecified = point_metric([1.0], [1, 0], 1)
    unspecified.histogram.aggregation_temporality = AggregationTemporality.AGGREGATION_TEMPORALITY_UNSPECIFIED
    exponential = Metric(name="gen_ai.client.token.usage")
    exponential.exponential_histogram.data_points.add(count=1)
    exponential.exponential_histogram.data_points.add(count=2)  # each point is refused and counted, one line
    counter = Metric(name="gen_ai.client.generation.choices")
    counter.sum.data_points.add(as_int=1)
    before = metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="metrics")
    answer = refused(unspecified, exponential, counter)
    assert answer.partial_success.rejected_data_points == 3
    message = answer.partial_success.error_message
    assert "its aggregation temporality is unspecified" in message
    assert "exponential histograms are not read: export explicit buckets (×2)" in message
    assert metric(collector.http_url, "streamscope_collector_ignored_items_total", signal="metrics") == before + 1
