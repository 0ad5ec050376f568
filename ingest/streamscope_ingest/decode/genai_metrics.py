"""GenAI semantic-convention histograms to ``genai_metrics`` rows: one row per data point, as it was sent.

Instrumentations that record no chunk timeline still export ``gen_ai.client.operation.duration``,
``gen_ai.client.token.usage`` and, some of them, ``gen_ai.server.time_to_first_token`` and the like. Their points
are stored as they came, cumulative or delta (the view ``genai_metric_intervals`` gives each point's own interval),
so no state is kept here and a restarted collector loses nothing. A point that cannot be read as a histogram is
rejected with its reason; ``gen_ai.*`` metrics of other kinds are counted as ignored.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.proto.metrics.v1.metrics_pb2 import (
    AggregationTemporality,
    DataPointFlags,
    HistogramDataPoint,
    Metric,
)

from streamscope_ingest.blocks.batch import Rejection, ignored_kind
from streamscope_ingest.decode.attributes import attribute_map, stringify
from streamscope_ingest.decode.limits import SpanLimits

PREFIX = "gen_ai."
_TEMPORALITY = {
    AggregationTemporality.AGGREGATION_TEMPORALITY_DELTA: "delta",
    AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE: "cumulative",
}


@dataclass
class GenAIPoints:
    """What the ``gen_ai.*`` metrics of one request gave: rows, rejections, warnings and what was ignored."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[Rejection] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)

    def add(self, metric: Metric, resource: dict[str, str], scope: str, *, tenant: str, limits: SpanLimits) -> None:
        kind = metric.WhichOneof("data")
        if kind == "exponential_histogram":
            self._reject_all(metric, "exponential histograms are not read: export explicit buckets")
            return
        if kind != "histogram":
            self.ignored[ignored_kind(f"{kind or 'empty'} metric(s) named", metric.name)] += 1
            return
        temporality = _TEMPORALITY.get(metric.histogram.aggregation_temporality)
        if temporality is None:
            self._reject_all(metric, "its aggregation temporality is unspecified")
            return
        series = _series_of(resource, scope, metric.name, temporality)
        base = {
            "tenant": tenant,
            "metric": metric.name,
            "unit": metric.unit,
            "temporality": temporality,
            "service": resource.get("service.name", ""),
            "source": scope,
        }
        for point in metric.histogram.data_points:
            if point.flags & DataPointFlags.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK:
                self.ignored[ignored_kind("data point(s) with no recorded value of", metric.name)] += 1
                continue
            if problem := _unreadable(point):
                self.rejected.append(Rejection(f"a {metric.name} data point", problem))
                continue
            attributes = {key: stringify(value) for key, value in attribute_map(point.attributes).items()}
            if warning := limits.truncate(f"a {metric.name} data point", attributes):
                self.warnings.append(warning)
            self.rows.append(
                {
                    **base,
                    "time": point.time_unix_nano // 1000,
                    "start_time": point.start_time_unix_nano // 1000,
                    "series": _point_series(series, attributes),
                    "operation": attributes.get("gen_ai.operation.name", ""),
                    "provider": attributes.get("gen_ai.provider.name") or attributes.get("gen_ai.system", ""),
                    "model": attributes.get("gen_ai.response.model") or attributes.get("gen_ai.request.model", ""),
                    "server_address": _host(attributes.get("server.address", "")),
                    "token_type": attributes.get("gen_ai.token.type", ""),
                    "error_type": attributes.get("error.type", ""),
                    "count": point.count,
                    "sum": point.sum if point.HasField("sum") else None,
                    "min": point.min if point.HasField("min") else None,
                    "max": point.max if point.HasField("max") else None,
                    "bounds": list(point.explicit_bounds),
                    "bucket_counts": list(point.bucket_counts),
                    "attributes": attributes,
                }
            )

    def _reject_all(self, metric: Metric, reason: str) -> None:
        """Reject each data point of ``metric`` (partial_success counts data points, not metrics)."""
        points = getattr(metric, metric.WhichOneof("data") or "histogram").data_points
        self.rejected += [Rejection(f"a {metric.name} data point", reason) for _ in range(max(len(points), 1))]

    def keep_days(self, limits: SpanLimits) -> None:
        """Reject the points outside the request's busiest days, as stream spans are (each day is a partition)."""
        kept = limits.days_kept([row["time"] for row in self.rows])
        for row, keep in zip(self.rows, kept, strict=True):
            if not keep:
                self.rejected.append(Rejection(f"a {row['metric']} data point", limits.days_message()))
        self.rows = [row for row, keep in zip(self.rows, kept, strict=True) if keep]


def _unreadable(point: HistogramDataPoint) -> str | None:
    """Why a histogram point cannot be stored as it says, or None."""
    bounds, counts = list(point.explicit_bounds), list(point.bucket_counts)
    if (counts or bounds) and len(counts) != len(bounds) + 1:
        return f"{len(counts)} bucket counts for {len(bounds)} bounds (one more count than bounds is needed)"
    if not all(math.isfinite(b) for b in bounds) or any(b >= c for b, c in itertools.pairwise(bounds)):
        return "its bucket bounds are not finite and increasing"
    if counts and sum(counts) != point.count:
        return f"its buckets count {sum(counts)} measurements, its count says {point.count}"
    if not math.isfinite(point.sum) or point.start_time_unix_nano > point.time_unix_nano:
        return "its sum is not finite or it starts after it ends"
    return None


def _host(address: str) -> str:
    """The host of ``server.address``: some instrumentations put the client's base URL there."""
    if "://" not in address:
        return address
    try:
        return urlsplit(address).hostname or ""
    except ValueError:  # not a URL after all: kept as sent
        return address


def _series_of(resource: dict[str, str], scope: str, metric: str, temporality: str) -> hashlib.blake2b:
    """The part of a series' identity its metric's points share, hashed once per metric (``_point_series``)."""
    digest = hashlib.blake2b(digest_size=8)
    for part in (sorted(resource.items()), scope, metric, temporality):
        digest.update(repr(part).encode())
        digest.update(b"\0")
    return digest


def _point_series(metric_series: hashlib.blake2b, attributes: dict[str, str]) -> int:
    """A stable 64-bit identity of one series: a cumulative point continues the points of its series."""
    digest = metric_series.copy()
    digest.update(repr(sorted(attributes.items())).encode())
    digest.update(b"\0")
    return int.from_bytes(digest.digest(), "little")
