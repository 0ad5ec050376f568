"""Scrape an inference engine's Prometheus ``/metrics`` and turn it into normalized, per-interval Samples.

One endpoint may serve vLLM, SGLang, TGI or llama.cpp, and several instances of one engine (vLLM data-parallel
engines, SGLang ranks). Gauges are reported as read; counters and histograms as their increase since the previous
scrape of the same engine, so a restart never yields a negative value or a spike (see ``samples.py``). llama.cpp
serves no KV-cache gauge: its context usage is read from ``/slots`` beside its ``/metrics`` (``slots.py``).
The source is injected (``fetch``), so tests and the agent's own loop need no network to exercise it.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import httpx
from prometheus_client.parser import text_string_to_metric_families

from streamscope_gpu_agent.samples import (
    AGENT_ENGINE_UP,
    AGENT_SCRAPE_DURATION,
    AGENT_SCRAPE_ERRORS,
    ENGINE_CONTEXT_USAGE,
    ENGINE_GENERATION_TOKENS,
    ENGINE_ITL_COUNT,
    ENGINE_ITL_SUM,
    ENGINE_KV_USAGE,
    ENGINE_PREEMPTIONS,
    ENGINE_PREFIX_HITS,
    ENGINE_PREFIX_QUERIES,
    ENGINE_PROMPT_TOKENS,
    ENGINE_PROMPT_TOKENS_CACHED,
    ENGINE_PROMPT_TOKENS_COMPUTED,
    ENGINE_REQUESTS_ABORTED,
    ENGINE_REQUESTS_FAILED,
    ENGINE_REQUESTS_FINISHED,
    ENGINE_REQUESTS_REJECTED,
    ENGINE_REQUESTS_RUNNING,
    ENGINE_REQUESTS_WAITING,
    ENGINE_REQUESTS_WAITING_FOR_KV,
    ENGINE_SPEC_ACCEPT_LENGTH,
    ENGINE_SPEC_ACCEPTANCE,
    ENGINE_SPEC_ACCEPTED_TOKENS,
    ENGINE_SPEC_DRAFT_TOKENS,
    ENGINE_STEP_TOKENS,
    ENGINE_STEP_TOKENS_MAX,
    ENGINE_STEPS,
    ENGINE_STEPS_BEYOND_BUCKETS,
    ENGINE_TTFT_COUNT,
    ENGINE_TTFT_SUM,
    Sample,
)
from streamscope_gpu_agent.slots import context_usage, slots_url

__all__ = ["EngineScraper", "Fetch", "ScrapeResult", "http_fetch"]

logger = logging.getLogger(__name__)

Fetch = Callable[[str, float], str]
"""``fetch(url, timeout_s)`` returns the exposition text and raises on any failure."""

ENGINE_PREFIXES: Final = (("vllm:", "vllm"), ("sglang:", "sglang"), ("tgi_", "tgi"), ("llamacpp:", "llamacpp"))
ID_LABELS: Final = {
    "vllm": ("engine",),
    "sglang": ("engine_type", "tp_rank", "pp_rank", "dp_rank", "moe_ep_rank"),
    "tgi": (),
    "llamacpp": (),
}
"""Labels that tell engine instances apart behind one endpoint (``model_name`` does not)."""
ALL_INSTANCES: Final = "all"
"""The engine index of series counted over all of an endpoint's instances of one engine."""
SIGNIFICANT_DIGITS: Final = {"llamacpp": 6}
"""Engines that write their values rounded: llama.cpp streams each double through a C++ ostream at its default
precision, so from a million on its counters move in steps of ten (of a hundred from ten million)."""
RATIO_TOLERANCE: Final = 0.02
"""A ratio of two increases that rounding leaves less certain than this is not reported."""

_SPEC_DRAFTS = "_spec_drafts"
"""Read, never emitted: vLLM's and llama.cpp's draft count, from which the acceptance length follows."""
_TGI_BATCH_TOKENS = "_tgi_batch_tokens"
_TGI_BATCH_TOKEN_BUDGET = "_tgi_batch_token_budget"
"""Read, never emitted: TGI's tokens the running batch may grow to and the budget its KV cache was sized for at
warm-up, whose ratio is TGI's only KV-cache usage."""

Labels = tuple[tuple[str, str], ...]
Identity = tuple[str, Labels]
"""(engine kind, its id labels): the key counters are tracked by, stable even when display names change."""
SeriesKey = tuple[str, str, Labels]


@dataclass(frozen=True, slots=True)
class _Rule:
    """How one source family maps onto normalized metrics."""

    kind: str
    """gauge, counter or histogram."""
    metric: str = ""
    """The target of a gauge or counter, or of a histogram's ``_count``."""
    sum_metric: str = ""
    max_metric: str = ""
    """Histograms: the upper bound of the highest bucket that gained an observation in the interval."""
    only: tuple[str, frozenset[str]] | None = None
    """Count only series whose label has one of these values."""
    replaced_by: str = ""
    """A newer family that wins when one engine exposes both (vLLM kept deprecated names for a while)."""

    def accepts(self, labels: Labels) -> bool:
        return self.only is None or dict(labels).get(self.only[0]) in self.only[1]


def _gauge(metric: str, replaced_by: str = "", only: tuple[str, frozenset[str]] | None = None) -> tuple[_Rule]:
    return (_Rule("gauge", metric, replaced_by=replaced_by, only=only),)


def _counter(metric: str, replaced_by: str = "", only: tuple[str, frozenset[str]] | None = None) -> tuple[_Rule]:
    return (_Rule("counter", metric, replaced_by=replaced_by, only=only),)


def _histogram(count_metric: str = "", sum_metric: str = "", replaced_by: str = "") -> tuple[_Rule]:
    return (_Rule("histogram", count_metric, sum_metric, replaced_by=replaced_by),)


RULES: Final[dict[str, tuple[_Rule, ...]]] = {
    # vLLM v1: vllm/v1/metrics/loggers.py, vllm/v1/spec_decode/metrics.py
    "vllm:kv_cache_usage_perc": _gauge(ENGINE_KV_USAGE),
    "vllm:gpu_cache_usage_perc": _gauge(ENGINE_KV_USAGE, replaced_by="vllm:kv_cache_usage_perc"),
    "vllm:num_requests_running": _gauge(ENGINE_REQUESTS_RUNNING),
    "vllm:num_requests_waiting": _gauge(ENGINE_REQUESTS_WAITING),
    "vllm:num_requests_waiting_by_reason": _gauge(
        ENGINE_REQUESTS_WAITING_FOR_KV, only=("reason", frozenset({"capacity"}))
    ),
    "vllm:num_preemptions": _counter(ENGINE_PREEMPTIONS),
    "vllm:prompt_tokens": _counter(ENGINE_PROMPT_TOKENS),
    # vllm/v1/metrics/stats.py: prompt_tokens counts cached tokens too; these say which were computed
    "vllm:prompt_tokens_by_source": _counter(
        ENGINE_PROMPT_TOKENS_COMPUTED, only=("source", frozenset({"local_compute"}))
    ),
    "vllm:prompt_tokens_cached": _counter(ENGINE_PROMPT_TOKENS_CACHED),
    "vllm:generation_tokens": _counter(ENGINE_GENERATION_TOKENS),
    "vllm:prefix_cache_queries": _counter(ENGINE_PREFIX_QUERIES),
    "vllm:prefix_cache_hits": _counter(ENGINE_PREFIX_HITS),
    "vllm:gpu_prefix_cache_queries": _counter(ENGINE_PREFIX_QUERIES, replaced_by="vllm:prefix_cache_queries"),
    "vllm:gpu_prefix_cache_hits": _counter(ENGINE_PREFIX_HITS, replaced_by="vllm:prefix_cache_hits"),
    "vllm:spec_decode_num_draft_tokens": _counter(ENGINE_SPEC_DRAFT_TOKENS),
    "vllm:spec_decode_num_accepted_tokens": _counter(ENGINE_SPEC_ACCEPTED_TOKENS),
    "vllm:spec_decode_num_drafts": _counter(_SPEC_DRAFTS),
    "vllm:request_success": (
        _Rule("counter", ENGINE_REQUESTS_FINISHED),
        _Rule("counter", ENGINE_REQUESTS_ABORTED, only=("finished_reason", frozenset({"abort"}))),
    ),
    "vllm:iteration_tokens_total": (_Rule("histogram", ENGINE_STEPS, ENGINE_STEP_TOKENS, ENGINE_STEP_TOKENS_MAX),),
    "vllm:inter_token_latency_seconds": _histogram(ENGINE_ITL_COUNT, ENGINE_ITL_SUM),
    "vllm:time_per_output_token_seconds": _histogram(
        ENGINE_ITL_COUNT, ENGINE_ITL_SUM, replaced_by="vllm:inter_token_latency_seconds"
    ),
    "vllm:time_to_first_token_seconds": _histogram(ENGINE_TTFT_COUNT, ENGINE_TTFT_SUM),
    # SGLang: python/sglang/srt/metrics/collector.py
    "sglang:token_usage": _gauge(ENGINE_KV_USAGE),
    "sglang:num_running_reqs": _gauge(ENGINE_REQUESTS_RUNNING),
    "sglang:num_queue_reqs": _gauge(ENGINE_REQUESTS_WAITING),
    "sglang:spec_accept_rate": _gauge(ENGINE_SPEC_ACCEPTANCE),
    "sglang:spec_accept_length": _gauge(ENGINE_SPEC_ACCEPT_LENGTH),
    "sglang:num_retracted_requests": _counter(ENGINE_PREEMPTIONS),
    "sglang:prompt_tokens": _counter(ENGINE_PROMPT_TOKENS),
    "sglang:generation_tokens": _counter(ENGINE_GENERATION_TOKENS),
    "sglang:cached_tokens": (_Rule("counter", ENGINE_PREFIX_HITS), _Rule("counter", ENGINE_PROMPT_TOKENS_CACHED)),
    "sglang:num_requests": _counter(ENGINE_REQUESTS_FINISHED),
    "sglang:num_aborted_requests": _counter(ENGINE_REQUESTS_ABORTED),
    "sglang:inter_token_latency_seconds": _histogram(ENGINE_ITL_COUNT, ENGINE_ITL_SUM),
    "sglang:time_to_first_token_seconds": _histogram(ENGINE_TTFT_COUNT, ENGINE_TTFT_SUM),
    # TGI: docs/source/reference/metrics.md. The input length is observed at validation, generated tokens when a
    # request ends.
    "tgi_queue_size": _gauge(ENGINE_REQUESTS_WAITING),
    "tgi_batch_current_size": _gauge(ENGINE_REQUESTS_RUNNING),
    "tgi_batch_current_max_tokens": _gauge(_TGI_BATCH_TOKENS),
    "tgi_batch_max_total_tokens": _gauge(_TGI_BATCH_TOKEN_BUDGET),
    "tgi_request_success": _counter(ENGINE_REQUESTS_FINISHED),
    # err values in router/src/infer and backends/v3/src/queue.rs; validation and template are the client's errors
    "tgi_request_failure": (
        _Rule("counter", ENGINE_REQUESTS_ABORTED, only=("err", frozenset({"dropped"}))),
        _Rule("counter", ENGINE_REQUESTS_FAILED, only=("err", frozenset({"generation", "incomplete"}))),
        _Rule("counter", ENGINE_REQUESTS_REJECTED, only=("err", frozenset({"overloaded"}))),
    ),
    "tgi_request_generated_tokens": _histogram(sum_metric=ENGINE_GENERATION_TOKENS),
    "tgi_request_input_length": _histogram(sum_metric=ENGINE_PROMPT_TOKENS),
    "tgi_batch_forward_duration": _histogram(count_metric=ENGINE_STEPS),
    # llama.cpp: tools/server/server-task.cpp (server_task_result_metrics::to_metrics) and server-common.h. Its
    # prompt_tokens are the tokens computed, the cached ones counted apart; generated and drafted tokens are added
    # when their request ends. Deferred requests wait for a free slot.
    "llamacpp:requests_processing": _gauge(ENGINE_REQUESTS_RUNNING),
    "llamacpp:requests_deferred": _gauge(ENGINE_REQUESTS_WAITING),
    "llamacpp:prompt_tokens": (
        _Rule("counter", ENGINE_PROMPT_TOKENS_COMPUTED),
        _Rule("counter", ENGINE_PROMPT_TOKENS),
    ),
    "llamacpp:prompt_tokens_cached": (
        _Rule("counter", ENGINE_PROMPT_TOKENS_CACHED),
        _Rule("counter", ENGINE_PROMPT_TOKENS),
    ),
    "llamacpp:tokens_predicted": _counter(ENGINE_GENERATION_TOKENS),
    "llamacpp:n_decode": _counter(ENGINE_STEPS),
    "llamacpp:spec_decode_num_draft_tokens": _counter(ENGINE_SPEC_DRAFT_TOKENS),
    "llamacpp:spec_decode_num_accepted_tokens": _counter(ENGINE_SPEC_ACCEPTED_TOKENS),
    "llamacpp:spec_decode_num_drafts": _counter(_SPEC_DRAFTS),
}
"""Source family (counters without ``_total``) -> rules; families not listed here are ignored."""


def _sample_names(rules: dict[str, tuple[_Rule, ...]]) -> dict[str, tuple[str, str]]:
    """Exposed sample name -> (family, part): part is gauge, counter, bucket, count or sum."""
    names: dict[str, tuple[str, str]] = {}
    for family, (rule, *_) in rules.items():
        if rule.kind == "gauge":
            names[family] = (family, "gauge")
        elif rule.kind == "counter":  # TGI's exporter names counters as recorded, without _total
            names[family] = names[f"{family}_total"] = (family, "counter")
        else:  # a summary's _count and _sum serve as well as a histogram's
            names.update({f"{family}_{part}": (family, part) for part in ("bucket", "count", "sum")})
    return names


_SAMPLE_NAMES: Final = _sample_names(RULES)


@dataclass(frozen=True, slots=True)
class _Point:
    family: str
    part: str
    labels: Labels
    value: float

    @property
    def key(self) -> SeriesKey:
        return self.family, self.part, self.labels


@dataclass(frozen=True, slots=True)
class ScrapeResult:
    samples: list[Sample]
    ok: bool
    duration_s: float
    error: str = ""
    """Why the scrape failed; empty when ok."""
    restarted: list[str] = field(default_factory=list)
    """Engines whose counters went down since their previous scrape: their deltas count from the restart."""
    engines: list[str] = field(default_factory=list)
    since_ns: int = 0
    """Scrape time of the previous successful scrape, which counter increases run from (0 when there was none):
    after failed scrapes the interval is longer than one period, and rates must divide by the real one."""


def http_fetch(url: str, timeout_s: float, client: httpx.Client | None = None) -> str:
    """GET ``url`` (on ``client`` to reuse its connection); a non-2xx status raises, so an error page is never read
    as metrics."""
    response = (client or httpx).get(url, timeout=timeout_s)
    if not response.is_success:
        raise httpx.HTTPStatusError(
            f"HTTP {response.status_code} from {url}", request=response.request, response=response
        )
    return response.text


class EngineScraper:
    """Scrapes one endpoint; keeps each engine's previous cumulative values to report per-interval increases."""

    def __init__(
        self,
        url: str,
        *,
        fetch: Fetch | None = None,
        timeout_s: float = 1.0,
        clock: Callable[[], int] = time.time_ns,
    ) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._fetch = fetch or http_fetch
        self._clock = clock
        self._totals: dict[Identity, dict[SeriesKey, float]] = {}
        self._up: bool | None = None
        self._slots_up: bool | None = None
        self._last_ok_ns = 0

    def scrape(self) -> ScrapeResult:
        """Fetch, parse and normalize once; never raises: a failure comes back as ``ok=False`` with the reason."""
        started = time.perf_counter()
        try:
            text = self._fetch(self.url, self.timeout_s)
        except Exception as exc:  # whatever the transport raises, the agent reports it and keeps sampling
            return self._failed(self._clock(), started, f"fetching {self.url} failed: {describe(exc)}")
        # stamped when the answer is in: everything its counters count had happened by then, so an event derived
        # from them is over by its end time (attribution relies on that)
        time_ns = self._clock()
        try:
            found = _parse(text)
        except Exception as exc:  # the parser's errors are not a documented set; the text is untrusted
            return self._failed(time_ns, started, f"unparsable exposition from {self.url}: {describe(exc)}")
        if not found:
            return self._failed(time_ns, started, f"no vLLM, SGLang, TGI or llama.cpp metrics at {self.url}")

        samples, restarted, engines = self._normalize(found, time_ns)
        if "llamacpp" in engines:
            samples += self._context_usage(time_ns)
        if self._up is False:
            logger.info("engine metrics at %s are back", self.url)
        self._up = True
        since_ns, self._last_ok_ns = self._last_ok_ns, time_ns
        duration_s = time.perf_counter() - started
        samples += _agent_samples(time_ns, duration_s, ok=True)
        return ScrapeResult(samples, True, duration_s, restarted=restarted, engines=engines, since_ns=since_ns)

    def _normalize(
        self, found: dict[Identity, list[_Point]], time_ns: int
    ) -> tuple[list[Sample], list[str], list[str]]:
        """Engine samples for this scrape, the engines that restarted since their previous one, and all engines."""
        names = _engine_names(list(found))
        grouped: dict[str, list[Identity]] = {}
        for identity in found:
            grouped.setdefault(names[identity], []).append(identity)
        samples: list[Sample] = []
        restarted: list[str] = []
        for name in sorted(grouped):
            interval = _Interval({point.family for identity in grouped[name] for point in found[identity]})
            resets = []
            for identity in grouped[name]:
                deltas, errors, reset = self._advance(identity, found[identity])
                interval.add(found[identity], deltas, errors)
                resets.append(reset)
            if any(resets):
                restarted.append(name)
            samples += [Sample(time_ns, "engine", metric, value, engine=name) for metric, value in interval.values()]
        return samples, restarted, sorted(grouped)

    def _advance(
        self, identity: Identity, points: list[_Point]
    ) -> tuple[dict[SeriesKey, float] | None, dict[SeriesKey, float], bool]:
        """Each cumulative series' increase since this engine's previous scrape (None on its first), how far rounding
        may have moved each increase, and whether its counters reset: then the current values are the increase
        since the restart."""
        totals = {point.key: point.value for point in points if point.part != "gauge"}
        previous = self._totals.get(identity)
        self._totals[identity] = totals
        if previous is None:
            return None, {}, False
        kind = identity[0]
        # a histogram's _sum may fall legitimately (negative observations); counts and buckets cannot
        reset = any(value < previous[key] for key, value in totals.items() if key[1] != "sum" and key in previous)
        if reset:
            return totals, {key: _rounding(kind, value) for key, value in totals.items()}, True
        deltas = {key: value - previous.get(key, 0.0) for key, value in totals.items()}
        errors = {
            key: _rounding(kind, value) + _rounding(kind, previous.get(key, 0.0)) for key, value in totals.items()
        }
        return deltas, errors, False

    def _context_usage(self, time_ns: int) -> list[Sample]:
        """llama.cpp's context usage from its /slots; none when /slots cannot be read (a server run with
        ``--no-slots``): the figure is then unknown, and the scrape of /metrics stands."""
        url = slots_url(self.url)
        try:
            usage = context_usage(self._fetch(url, self.timeout_s))
        except Exception as exc:  # transport, status and shape alike: the text is untrusted
            if self._slots_up is not False:
                logger.warning("llama.cpp context usage unknown: reading %s failed: %s", url, describe(exc))
            self._slots_up = False
            return []
        self._slots_up = True
        return [Sample(time_ns, "engine", ENGINE_CONTEXT_USAGE, usage, engine="llamacpp")]

    def _failed(self, time_ns: int, started: float, error: str) -> ScrapeResult:
        if self._up is not False:  # once per outage, not once per scrape
            logger.warning("engine scrape failed: %s", error)
        self._up = False
        duration_s = time.perf_counter() - started
        return ScrapeResult(_agent_samples(time_ns, duration_s, ok=False), False, duration_s, error=error)


class _Interval:
    """One engine's normalized values for one scrape: gauges as read, counters and histograms as increases."""

    def __init__(self, families: set[str]) -> None:
        self._families = families
        self._gauges: dict[str, float] = {}
        self._deltas: dict[str, float] = {}
        self._errors: dict[str, float] = {}
        self._buckets: dict[tuple[str, Labels], dict[float, float]] = {}

    def add(self, points: list[_Point], deltas: dict[SeriesKey, float] | None, errors: dict[SeriesKey, float]) -> None:
        """``deltas`` is None on an engine's first scrape: a baseline only, so gauges alone are reported. ``errors``:
        how far rounding may have moved each increase."""
        for point in points:
            for rule in RULES[point.family]:
                if rule.replaced_by in self._families or not rule.accepts(point.labels):
                    continue
                if point.part == "gauge":
                    # several series on one engine (e.g. two model names): report the worse
                    self._gauges[rule.metric] = max(self._gauges.get(rule.metric, -math.inf), point.value)
                elif deltas is not None:
                    self._add_delta(rule, point, deltas[point.key], errors.get(point.key, 0.0))

    def _add_delta(self, rule: _Rule, point: _Point, delta: float, error: float) -> None:
        if point.part == "bucket":
            if rule.max_metric:
                series = tuple(label for label in point.labels if label[0] != "le")
                le = float(dict(point.labels)["le"])
                self._buckets.setdefault((rule.max_metric, series), {})[le] = delta
            return
        target = rule.sum_metric if point.part == "sum" else rule.metric
        if target:
            self._deltas[target] = self._deltas.get(target, 0.0) + delta
            self._errors[target] = self._errors.get(target, 0.0) + error

    def values(self) -> list[tuple[str, float]]:
        values = {**self._gauges, **self._deltas}
        if values.get(ENGINE_SPEC_ACCEPT_LENGTH) == 0:  # SGLang with speculative decoding off reports zeros
            values.pop(ENGINE_SPEC_ACCEPT_LENGTH)
            values.pop(ENGINE_SPEC_ACCEPTANCE, None)
        acceptance = self._ratio(ENGINE_SPEC_ACCEPTED_TOKENS, ENGINE_SPEC_DRAFT_TOKENS)
        if acceptance is not None and ENGINE_SPEC_ACCEPTANCE not in values:
            values[ENGINE_SPEC_ACCEPTANCE] = acceptance
        values.pop(_SPEC_DRAFTS, None)
        accepted_per_draft = self._ratio(ENGINE_SPEC_ACCEPTED_TOKENS, _SPEC_DRAFTS)
        if accepted_per_draft is not None:
            values[ENGINE_SPEC_ACCEPT_LENGTH] = 1 + accepted_per_draft
        budget = values.pop(_TGI_BATCH_TOKEN_BUDGET, 0.0)
        batch_tokens = values.pop(_TGI_BATCH_TOKENS, None)
        if batch_tokens is not None and budget > 0 and ENGINE_KV_USAGE not in values:
            values[ENGINE_KV_USAGE] = batch_tokens / budget
        prompt, cached = values.get(ENGINE_PROMPT_TOKENS), values.get(ENGINE_PROMPT_TOKENS_CACHED)
        if ENGINE_PROMPT_TOKENS_COMPUTED not in values and prompt is not None and cached is not None:
            values[ENGINE_PROMPT_TOKENS_COMPUTED] = max(0.0, prompt - cached)
        for (metric, _), buckets in self._buckets.items():
            bound, beyond = _largest_step(buckets)
            if bound is not None:
                values[metric] = max(values.get(metric, bound), bound)
            if beyond:
                values[ENGINE_STEPS_BEYOND_BUCKETS] = values.get(ENGINE_STEPS_BEYOND_BUCKETS, 0.0) + beyond
        return sorted(values.items())

    def _ratio(self, numerator: str, denominator: str) -> float | None:
        """The ratio of two increases in the interval; None when nothing was counted in the denominator, or when
        rounding leaves the ratio less certain than ``RATIO_TOLERANCE`` (a few drafts counted past a million)."""
        top, bottom = self._deltas.get(numerator, 0.0), self._deltas.get(denominator, 0.0)
        top_error, bottom_error = self._errors.get(numerator, 0.0), self._errors.get(denominator, 0.0)
        if bottom <= bottom_error:
            return None
        ratio = top / bottom
        if (top_error + ratio * bottom_error) / (bottom - bottom_error) > RATIO_TOLERANCE:
            return None
        return ratio


def _rounding(kind: str, value: float) -> float:
    """How far ``value`` may lie from what the engine counted: half a unit of the last digit it wrote (whole counts
    below the engine's precision are exact)."""
    digits = SIGNIFICANT_DIGITS.get(kind)
    if digits is None or abs(value) < 10**digits:
        return 0.0
    return 0.5 * 10 ** (math.floor(math.log10(abs(value))) - digits + 1)


def _largest_step(deltas: dict[float, float]) -> tuple[float | None, float]:
    """The upper bound of the largest observation in the interval: the largest finite ``le`` whose cumulative count
    grew more than the bucket below it did (None when nothing was observed); and how many observations fell beyond
    the last finite bound, whose bound is then all that is known of the largest (at least that)."""
    highest, below, last = None, 0.0, None
    for le in sorted(deltas):
        if math.isinf(le):
            beyond = deltas[le] - below
            if beyond > 0 and last is not None:
                return last, beyond
            break
        if deltas[le] > below:
            highest = le
        below, last = deltas[le], le
    return highest, 0.0


_COUNTED_IN_BLOCKS_ONCE = frozenset({"vllm:gpu_prefix_cache_queries", "vllm:gpu_prefix_cache_hits"})
"""vLLM 0.8 counted these in KV-cache blocks (their HELP says "blocks"), later releases in tokens, as the agent's
prefix-cache metrics are; a count of blocks is not read."""


def _parse(text: str) -> dict[Identity, list[_Point]]:
    """Each engine found in ``text`` with its recognized samples; raises on text that is not an exposition."""
    found: dict[Identity, list[_Point]] = {}
    for family in text_string_to_metric_families(text):
        if family.name in _COUNTED_IN_BLOCKS_ONCE and "block" in family.documentation:
            continue
        for sample in family.samples:
            kind = _engine_kind(sample.name)
            known = _SAMPLE_NAMES.get(sample.name)
            if kind is None or known is None:
                # a series the agent does not read names no engine: vLLM's admission rejections carry no engine
                # label, and would make an instance of all engines that reports nothing
                continue
            ids = tuple((label, sample.labels[label]) for label in ID_LABELS[kind] if label in sample.labels)
            points = found.setdefault((kind, ids), [])
            if not math.isnan(sample.value):
                points.append(_Point(*known, tuple(sorted(sample.labels.items())), float(sample.value)))
    return found


def _engine_kind(name: str) -> str | None:
    return next((kind for prefix, kind in ENGINE_PREFIXES if name.startswith(prefix)), None)


def _engine_names(identities: list[Identity]) -> dict[Identity, str]:
    """``vllm`` for a lone engine and for index 0, ``vllm/1`` for the others.

    Only id labels whose values differ between instances of one kind make up the index, so an SGLang
    ``engine_type="unified",tp_rank="0"`` alone is plain ``sglang``. Series that lack one of those labels were
    counted over all the instances (SGLang's tokenizer-side counters carry no ``dp_rank``): they land on
    ``sglang/all``, not on rank 0.
    """
    seen: dict[tuple[str, str], set[str]] = {}
    for kind, ids in identities:
        for label, value in ids:
            seen.setdefault((kind, label), set()).add(value)
    names: dict[Identity, str] = {}
    for kind, ids in identities:
        telling = {label for (k, label), values in seen.items() if k == kind and len(values) > 1}
        index = [value for label, value in ids if label in telling]
        if len(index) < len(telling):
            names[kind, ids] = f"{kind}/{ALL_INSTANCES}"
        else:
            names[kind, ids] = "/".join([kind, *index]) if any(part != "0" for part in index) else kind
    return names


def _agent_samples(time_ns: int, duration_s: float, *, ok: bool) -> list[Sample]:
    return [
        Sample(time_ns, "agent", AGENT_SCRAPE_DURATION, duration_s),
        Sample(time_ns, "agent", AGENT_ENGINE_UP, 1.0 if ok else 0.0),
        Sample(time_ns, "agent", AGENT_SCRAPE_ERRORS, 0.0 if ok else 1.0),
    ]


def describe(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
