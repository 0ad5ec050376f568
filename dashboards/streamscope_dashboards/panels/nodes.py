"""The Serving nodes board's panels: the GPU agents' engine and GPU telemetry, per node."""

from __future__ import annotations

from streamscope_dashboards.panels.common import TENANT_FILTER, Panel


def node_metric(key: str, title: str, description: str, metric: str, aggregate: str, unit: str) -> Panel:
    """One engine or GPU metric of ``engine_samples`` per node (and GPU) over time."""
    return Panel(
        key,
        title,
        description,
        "timeseries",
        f"""SELECT $__timeInterval(time) AS time,
    if(gpu_uuid = '', node_name, concat(node_name, ' gpu', toString(gpu_index))) AS series,
    {aggregate}(value) AS {metric}
FROM engine_samples
WHERE $__timeFilter(engine_samples.time) AND metric = '{metric}' AND {TENANT_FILTER}
GROUP BY time, series
ORDER BY time, series""",
        unit=unit,
    )


KV_USAGE = node_metric("kv_usage", "KV-cache usage", "Peak KV-cache usage per node.", "kv_usage", "max", "percentunit")

REQUESTS_WAITING = node_metric(
    "requests_waiting", "Requests waiting", "Queued requests per node.", "requests_waiting", "max", "short"
)

SPEC_ACCEPTANCE = node_metric(
    "spec_acceptance",
    "Draft acceptance",
    "Speculative decoding acceptance per node (a collapse slows every stream on it).",
    "spec_acceptance",
    "min",
    "percentunit",
)

PREEMPTIONS = node_metric(
    "preemptions", "Preemptions", "Requests preempted per interval (KV pressure).", "preemptions", "sum", "short"
)

STEP_TOKENS = node_metric(
    "step_tokens_max",
    "Largest step",
    "Tokens in the largest engine step per interval: a prefill joining the batch shows as a spike.",
    "step_tokens_max",
    "max",
    "short",
)

GPU_UTILIZATION = node_metric(
    "gpu_utilization", "GPU utilisation", "Share of time a kernel ran, per GPU.", "utilization", "avg", "percentunit"
)

GPU_MEMORY = node_metric(
    "gpu_memory", "GPU memory used", "Device memory in use, per GPU.", "memory_used_bytes", "max", "bytes"
)

GPU_POWER = node_metric("gpu_power", "GPU power", "Board power draw, per GPU.", "power_watts", "avg", "watt")

ENGINE_EVENTS = Panel(
    "engine_events",
    "Engine and GPU events",
    "What the GPU agents saw on the serving nodes: preemptions, KV high-water, prefill bursts, spec-decode "
    "acceptance drops, queue spikes, restarts, XIDs, throttling.",
    "table",
    f"""SELECT start_time, node_name, kind, round(magnitude, 3) AS magnitude
FROM engine_events
WHERE $__timeFilter(start_time) AND {TENANT_FILTER}
ORDER BY start_time DESC
LIMIT 200""",
)
