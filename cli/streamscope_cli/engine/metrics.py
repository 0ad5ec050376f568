"""The simulated engine's /metrics, in vLLM's v1 exposition (default) or SGLang's.

Metric definitions live in the two classes' constructors; ``record_step`` and ``record_request`` only copy
scheduler facts onto them (vLLM's stats / loggers split). Each engine has its own registry: nothing here
touches prometheus_client's global one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from streamscope_cli.engine.scheduler import Scheduler, StepResult

VLLM_ITL_BUCKETS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
VLLM_TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
VLLM_ITERATION_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SGLANG_ITL_BUCKETS = (
    0.002,
    0.004,
    0.006,
    0.008,
    0.01,
    0.015,
    0.02,
    0.025,
    0.03,
    0.035,
    0.04,
    0.06,
    0.08,
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
)
SGLANG_TTFT_BUCKETS = (
    0.1,
    0.2,
    0.4,
    0.6,
    0.8,
    1.0,
    2.0,
    4.0,
    6.0,
    8.0,
    10.0,
    20.0,
    40.0,
    60.0,
    80.0,
    100.0,
    200.0,
    400.0,
)
E2E_BUCKETS = (
    0.3,
    0.5,
    0.8,
    1.0,
    1.5,
    2.0,
    2.5,
    5.0,
    10.0,
    15.0,
    20.0,
    30.0,
    40.0,
    50.0,
    60.0,
    120.0,
    240.0,
    480.0,
    960.0,
    1920.0,
    7680.0,
)


class EngineMetrics(Protocol):
    registry: CollectorRegistry

    def record_step(self, step: StepResult, scheduler: Scheduler, gaps_s: dict[str, float]) -> None:
        """After each step; ``gaps_s`` holds, per request that produced tokens, seconds since its previous ones."""

    def record_first_token(self, seconds: float) -> None: ...

    def record_finished(self, reason: str, e2e_s: float) -> None: ...


def exposition(metrics: EngineMetrics) -> bytes:
    return generate_latest(metrics.registry)


class _Labelled:
    """Builds instruments in one registry, each bound to one fixed label set."""

    def __init__(self, registry: CollectorRegistry, labels: dict[str, str]) -> None:
        self.registry, self.labels = registry, labels

    def gauge(self, name: str, doc: str) -> Gauge:
        return Gauge(name, doc, list(self.labels), registry=self.registry).labels(**self.labels)

    def counter(self, name: str, doc: str) -> Counter:
        return Counter(name, doc, list(self.labels), registry=self.registry).labels(**self.labels)

    def histogram(self, name: str, doc: str, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(name, doc, list(self.labels), buckets=buckets, registry=self.registry).labels(**self.labels)

    def makers(self) -> tuple:
        return self.gauge, self.counter, self.histogram


class VllmMetrics:
    """vLLM v1 names and labels (model_name, engine), as in vllm/v1/metrics/loggers.py."""

    def __init__(self, model: str, engine: str = "0", spec_draft_tokens: int = 0) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine": engine}
        names = list(labels)
        self._labels = labels

        gauge, counter, histogram = _Labelled(self.registry, labels).makers()

        self.running = gauge("vllm:num_requests_running", "Number of requests in model execution batches.")
        self.waiting = gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.")
        self.kv_usage = gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.")
        self.preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self.prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self.prefix_queries = counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of tokens.")
        self.prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of tokens.")
        by_source = Counter(
            "vllm:prompt_tokens_by_source",
            "Number of prompt tokens by source.",
            [*names, "source"],
            registry=self.registry,
        )
        self.prompt_computed = by_source.labels(**labels, source="local_compute")
        self.prompt_cache_hit = by_source.labels(**labels, source="local_cache_hit")
        self.prompt_cached = counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        self._success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            [*names, "finished_reason"],
            registry=self.registry,
        )
        self.iteration_tokens = histogram(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", VLLM_ITERATION_BUCKETS
        )
        self.ttft = histogram(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", VLLM_TTFT_BUCKETS
        )
        self.itl = histogram(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", VLLM_ITL_BUCKETS
        )
        self.e2e = histogram(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", E2E_BUCKETS
        )
        self._spec = spec_draft_tokens > 0
        if self._spec:
            self.spec_drafts = counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.")
            self.spec_draft_tokens = counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.")
            self.spec_accepted = counter("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.")
            per_position = Counter(
                "vllm:spec_decode_num_accepted_tokens_per_pos",
                "Accepted tokens per draft position.",
                [*names, "position"],
                registry=self.registry,
            )
            self.spec_per_position = [per_position.labels(**labels, position=str(p)) for p in range(spec_draft_tokens)]

    def record_step(self, step: StepResult, scheduler: Scheduler, gaps_s: dict[str, float]) -> None:
        self.running.set(len(scheduler.running))
        self.waiting.set(len(scheduler.waiting))
        self.kv_usage.set(scheduler.kv_usage)
        self.preemptions.inc(len(step.preempted))
        self.prompt_tokens.inc(step.new_prompt_tokens)
        self.prompt_computed.inc(step.new_prompt_tokens - step.new_cached_tokens)
        self.prompt_cache_hit.inc(step.new_cached_tokens)
        self.prompt_cached.inc(step.new_cached_tokens)
        self.generation_tokens.inc(sum(step.emitted.values()))
        self.prefix_queries.inc(step.prefix_queries)
        self.prefix_hits.inc(step.prefix_hits)
        if step.scheduled_tokens:
            self.iteration_tokens.observe(step.scheduled_tokens)
        for gap in gaps_s.values():
            self.itl.observe(gap)
        if self._spec:
            self.spec_drafts.inc(step.spec_drafts)
            self.spec_draft_tokens.inc(step.spec_draft_tokens)
            self.spec_accepted.inc(step.spec_accepted)
            for counter, accepted in zip(self.spec_per_position, step.spec_accepted_per_position):
                counter.inc(accepted)

    def record_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def record_finished(self, reason: str, e2e_s: float) -> None:
        self._success.labels(**self._labels, finished_reason=reason).inc()
        self.e2e.observe(e2e_s)


class SglangMetrics:
    """SGLang names (sglang/srt/metrics/collector.py), for exercising an SGLang scraper."""

    def __init__(self, model: str, engine: str = "0", spec_draft_tokens: int = 0) -> None:
        self.registry = CollectorRegistry()
        labels = {"model_name": model, "engine_type": "unified", "tp_rank": engine}

        gauge, counter, histogram = _Labelled(self.registry, labels).makers()

        self.running = gauge("sglang:num_running_reqs", "The number of running requests.")
        self.queued = gauge("sglang:num_queue_reqs", "The number of requests in the waiting queue.")
        self.token_usage = gauge("sglang:token_usage", "The token usage.")
        self.used_tokens = gauge("sglang:num_used_tokens", "The number of used tokens.")
        self.cache_hit_rate = gauge("sglang:cache_hit_rate", "The prefix cache hit rate.")
        self.spec_accept_length = gauge("sglang:spec_accept_length", "The average acceptance length.")
        self.spec_accept_rate = gauge("sglang:spec_accept_rate", "The average acceptance rate.")
        self.retracted = counter("sglang:num_retracted_requests", "Number of retracted requests.")
        self.prompt_tokens = counter("sglang:prompt_tokens", "Number of prefill tokens processed.")
        self.generation_tokens = counter("sglang:generation_tokens", "Number of generation tokens processed.")
        self.cached_tokens = counter("sglang:cached_tokens", "Number of cached prompt tokens.")
        self.requests = counter("sglang:num_requests", "Number of requests processed.")
        self.aborted = counter("sglang:num_aborted_requests", "Number of requests aborted.")
        self.ttft = histogram(
            "sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", SGLANG_TTFT_BUCKETS
        )
        self.itl = histogram(
            "sglang:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", SGLANG_ITL_BUCKETS
        )
        self.e2e = histogram(
            "sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency.", E2E_BUCKETS
        )
        self._queries = 0
        self._hits = 0

    def record_step(self, step: StepResult, scheduler: Scheduler, gaps_s: dict[str, float]) -> None:
        self.running.set(len(scheduler.running))
        self.queued.set(len(scheduler.waiting))
        self.token_usage.set(scheduler.kv_usage)
        self.used_tokens.set(scheduler.used_blocks * scheduler.config.block_size)
        self.retracted.inc(len(step.preempted))
        self.prompt_tokens.inc(step.new_prompt_tokens)
        self.generation_tokens.inc(sum(step.emitted.values()))
        self.cached_tokens.inc(step.new_cached_tokens)
        self._queries += step.prefix_queries
        self._hits += step.prefix_hits
        if self._queries:
            self.cache_hit_rate.set(self._hits / self._queries)
        if step.spec_drafts:
            self.spec_accept_length.set(1 + step.spec_accepted / step.spec_drafts)
            self.spec_accept_rate.set(step.spec_accepted / step.spec_draft_tokens)
        for request_id, gap in gaps_s.items():
            # SGLang spreads a multi-token chunk's interval evenly over its tokens
            tokens = max(step.emitted.get(request_id, 1), 1)
            for _ in range(tokens):
                self.itl.observe(gap / tokens)

    def record_first_token(self, seconds: float) -> None:
        self.ttft.observe(seconds)

    def record_finished(self, reason: str, e2e_s: float) -> None:
        self.requests.inc()
        if reason == "abort":
            self.aborted.inc()
        self.e2e.observe(e2e_s)


FLAVORS: dict[str, Callable[[str, str, int], EngineMetrics]] = {"vllm": VllmMetrics, "sglang": SglangMetrics}


def make_metrics(flavor: str, model: str, engine: str = "0", spec_draft_tokens: int = 0) -> EngineMetrics:
    try:
        return FLAVORS[flavor](model, engine, spec_draft_tokens)
    except KeyError:
        raise ValueError(f"unknown metrics flavor {flavor!r}: use {' or '.join(FLAVORS)}") from None
