"""OTLP metric requests to ``engine_samples`` rows (the GPU agent's gauges) and ``genai_metrics`` rows (other
instrumentations' GenAI histograms), one row per data point.

Metrics named ``streamscope.<source>.<metric>`` on a resource carrying ``streamscope.node.name`` are
samples; metrics named ``gen_ai.*`` are read by ``genai_metrics``; everything else (an application's own
metrics) is counted and ignored. A data point with a non-finite value is rejected on its own.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pyarrow as pa
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import Metric

from streamscope import semconv as sc
from streamscope_ingest.blocks import columns
from streamscope_ingest.blocks.batch import DecodedBatch, Rejection, ignored_kind
from streamscope_ingest.decode.attributes import attribute_map, stringify
from streamscope_ingest.decode.genai_metrics import PREFIX as GENAI_PREFIX
from streamscope_ingest.decode.genai_metrics import GenAIPoints
from streamscope_ingest.decode.limits import DEFAULT_LIMITS, SpanLimits


def decode_metrics(
    request: ExportMetricsServiceRequest, *, tenant: str, limits: SpanLimits = DEFAULT_LIMITS
) -> DecodedBatch:
    rows: list[dict[str, Any]] = []
    rejected: list[Rejection] = []
    ignored: Counter[str] = Counter()
    genai = GenAIPoints()
    for resource_metrics in request.resource_metrics:
        resource = attribute_map(resource_metrics.resource.attributes)
        resource_text = {key: stringify(value) for key, value in resource.items()}
        node = stringify(resource.get(sc.STREAMSCOPE_NODE_NAME))
        base = {
            "tenant": tenant,
            "node_name": node,
            "host": stringify(resource.get("host.name")),
            "engine_url": stringify(resource.get(sc.STREAMSCOPE_ENGINE_URL)),
        }
        for scope_metrics in resource_metrics.scope_metrics:
            for metric in scope_metrics.metrics:
                if metric.name.startswith(GENAI_PREFIX):
                    genai.add(metric, resource_text, scope_metrics.scope.name, tenant=tenant, limits=limits)
                    continue
                named = _sample_name(metric.name)
                points = _number_points(metric)
                if named is None or points is None:
                    ignored[ignored_kind("metric(s) named", metric.name)] += 1
                    continue
                if not node:
                    rejected.append(
                        Rejection(f"metric {metric.name}", f"its resource has no {sc.STREAMSCOPE_NODE_NAME}")
                    )
                    continue
                source, name = named
                for point in points:
                    value = point.as_double if point.WhichOneof("value") == "as_double" else float(point.as_int)
                    if not math.isfinite(value):
                        rejected.append(Rejection(f"a {metric.name} data point", "its value is not finite"))
                        continue
                    attrs = attribute_map(point.attributes)
                    index = attrs.get(sc.STREAMSCOPE_GPU_INDEX, -1)
                    rows.append(
                        {
                            **base,
                            "time": point.time_unix_nano // 1000,
                            "source": source,
                            "metric": name,
                            "engine": stringify(attrs.get(sc.STREAMSCOPE_ENGINE_ID)),
                            "gpu_uuid": stringify(attrs.get(sc.STREAMSCOPE_GPU_UUID)),
                            "gpu_index": index if isinstance(index, int) and -1 <= index < 2**15 else -1,
                            "value": value,
                        }
                    )
    genai.keep_days(limits)
    blocks = {"engine_samples": _block(rows, columns.ENGINE_SAMPLES)}
    if genai.rows:
        blocks["genai_metrics"] = _block(genai.rows, columns.GENAI_METRICS)
    return DecodedBatch(
        blocks=blocks,
        ignored=ignored + genai.ignored,
        rejected=rejected + genai.rejected,
        warnings=genai.warnings,
    )


def _block(rows: list[dict[str, Any]], schema: pa.Schema) -> pa.Table:
    return pa.Table.from_pylist(rows, schema=schema) if rows else schema.empty_table()


def _sample_name(name: str) -> tuple[str, str] | None:
    if not name.startswith(sc.METRIC_PREFIX):
        return None
    source, _, metric = name[len(sc.METRIC_PREFIX) :].partition(".")
    return (source, metric) if source in sc.METRIC_SOURCES and metric else None


def _number_points(metric: Metric) -> Any:
    kind = metric.WhichOneof("data")
    if kind == "gauge":
        return metric.gauge.data_points
    if kind == "sum":
        return metric.sum.data_points
    return None
