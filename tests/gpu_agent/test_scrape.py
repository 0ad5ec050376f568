"""Engine scrapers: captured /metrics text in, normalized per-interval Samples out; no network anywhere."""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from streamscope_cli.engine.metrics import VLLM_ITERATION_BUCKETS, exposition, make_metrics
from streamscope_cli.engine.scheduler import Scheduler, SchedulerConfig, Sequence
from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.scrape import EngineScraper, ScrapeResult, http_fetch

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
URL = "http://gpu-7:8000/metrics"
NOW_NS = 1_800_000_000_123_456_789
GAUGES = {m.ENGINE_KV_USAGE, m.ENGINE_REQUESTS_RUNNING, m.ENGINE_REQUESTS_WAITING, m.ENGINE_SPEC_ACCEPTANCE}
GAUGES |= {m.ENGINE_REQUESTS_WAITING_FOR_KV}


def fixture(name: str) -> str:
    return (FIXTURES / f"{name}.prom").read_text()


class Endpoint:
    """A ``fetch`` whose answer the test sets: exposition text, or an exception to raise."""

    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer
        self.calls: list[tuple[str, float]] = []

    def __call__(self, url: str, timeout_s: float) -> str:
        self.calls.append((url, timeout_s))
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def scraper(endpoint: Endpoint) -> EngineScraper:
    return EngineScraper(URL, fetch=endpoint, timeout_s=0.5, clock=lambda: NOW_NS)


def engine_values(result: ScrapeResult) -> dict[str, dict[str, float]]:
    """engine -> metric -> value, from the result's engine samples (each pair must appear once)."""
    values: dict[str, dict[str, float]] = {}
    for sample in result.samples:
        if sample.source == "engine":
            assert sample.metric not in values.get(sample.engine, {}), sample
            values.setdefault(sample.engine, {})[sample.metric] = sample.value
    return values


def agent_values(result: ScrapeResult) -> dict[str, float]:
    return {sample.metric: sample.value for sample in result.samples if sample.source == "agent"}


# --- editing exposition text the way an engine moves on ------------------------------------------------------


def _matches(line: str, name: str, labels: dict[str, str]) -> bool:
    if line.startswith("#") or not line.strip():
        return False
    series = line.rsplit(" ", 1)[0]
    return series.split("{", 1)[0] == name and all(f'{key}="{value}"' in series for key, value in labels.items())


def add(text: str, name: str, amount: float, **labels: str) -> str:
    """Add ``amount`` to the one series ``name{labels...}``."""
    lines = text.splitlines()
    hits = [i for i, line in enumerate(lines) if _matches(line, name, labels)]
    assert len(hits) == 1, f"{name} {labels} matches {len(hits)} lines"
    series, value = lines[hits[0]].rsplit(" ", 1)
    lines[hits[0]] = f"{series} {float(value) + amount!r}"
    return "\n".join(lines) + "\n"


def observe(text: str, family: str, value: float, times: int = 1, **labels: str) -> str:
    """Record ``times`` observations of ``value`` in one histogram series, buckets, count and sum alike."""
    lines = text.splitlines()
    touched = 0
    for i, line in enumerate(lines):
        if _matches(line, f"{family}_bucket", labels):
            le = float(line.split('le="', 1)[1].split('"', 1)[0])
            if value <= le:
                series, old = line.rsplit(" ", 1)
                lines[i] = f"{series} {float(old) + times!r}"
                touched += 1
    assert touched, f"no {family} buckets for {labels}"
    text = "\n".join(lines) + "\n"
    return add(add(text, f"{family}_count", times, **labels), f"{family}_sum", value * times, **labels)


def zero(text: str, **labels: str) -> str:
    """Every sample carrying ``labels`` back to 0, as after a restart of that engine."""
    lines = [
        f"{line.rsplit(' ', 1)[0]} 0.0"
        if not line.startswith("#") and all(f'{k}="{v}"' in line for k, v in labels.items())
        else line
        for line in text.splitlines()
    ]
    return "\n".join(lines) + "\n"


# --- detection and gauges ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            "vllm_v1",
            {
                "vllm": {
                    "kv_usage": 0.4375,
                    "requests_running": 12,
                    "requests_waiting": 3,
                    "requests_waiting_for_kv": 3,
                },
                "vllm/1": {
                    "kv_usage": 0.3125,
                    "requests_running": 9,
                    "requests_waiting": 0,
                    "requests_waiting_for_kv": 0,
                },
            },
        ),
        ("vllm_deprecated", {"vllm": {"kv_usage": 0.21875, "requests_running": 5, "requests_waiting": 1}}),
        # speculative decoding is off: SGLang's zero acceptance is not reported as a real 0
        ("sglang", {"sglang": {"kv_usage": 0.37, "requests_running": 17, "requests_waiting": 2}}),
        # TGI's KV usage: the tokens its batch may grow to over the budget warm-up sized the cache for
        ("tgi", {"tgi": {"kv_usage": 0.25, "requests_running": 12, "requests_waiting": 4}}),
    ],
)
def test_first_scrape_detects_the_engines_and_reports_gauges_only(name: str, expected: dict) -> None:
    endpoint = Endpoint(fixture(name))
    result = scraper(endpoint).scrape()

    assert result.ok and result.error == ""
    assert result.engines == sorted(expected)
    assert engine_values(result) == expected
    assert result.restarted == []
    assert endpoint.calls == [(URL, 0.5)]
    assert agent_values(result) == {"scrape_duration_s": result.duration_s, "engine_up": 1, "scrape_errors": 0}
    assert result.duration_s >= 0
    for sample in result.samples:
        assert sample.time_ns == NOW_NS
        assert sample.source in ("engine", "agent")
        assert (sample.engine == "") == (sample.source == "agent")


def test_one_endpoint_can_carry_several_engine_kinds() -> None:
    result = scraper(Endpoint(fixture("vllm_v1") + fixture("tgi"))).scrape()

    assert result.engines == ["tgi", "vllm", "vllm/1"]
    assert engine_values(result)["tgi"] == {"kv_usage": 0.25, "requests_running": 12, "requests_waiting": 4}
    assert engine_values(result)["vllm/1"]["kv_usage"] == 0.3125


def test_engine_index_labels_name_the_engines() -> None:
    """A lone engine is plain ``vllm`` whatever its index; several get ``vllm/<index>``, index 0 staying plain."""
    text = fixture("vllm_deprecated")
    alone = scraper(Endpoint(text.replace('engine="0"', 'engine="3"'))).scrape()
    assert alone.engines == ["vllm"]

    sglang = fixture("sglang")
    rank1 = "\n".join(line for line in sglang.splitlines() if 'tp_rank="0"' in line).replace(
        'tp_rank="0"', 'tp_rank="1"'
    )
    result = scraper(Endpoint(sglang + rank1 + "\n")).scrape()
    # tokenizer-side SGLang series carry no rank: counted over both, they are neither rank's
    assert result.engines == ["sglang", "sglang/1", "sglang/all"]
    assert engine_values(result)["sglang/1"] == {"kv_usage": 0.37, "requests_running": 17, "requests_waiting": 2}
    assert engine_values(result)["sglang"] == engine_values(result)["sglang/1"]
    # alone, the one rank's name takes them: they were counted over it alone
    assert scraper(Endpoint(sglang)).scrape().engines == ["sglang"]


# --- per-interval increases ----------------------------------------------------------------------------------

V0 = {"engine": "0"}


def vllm_busy_interval(text: str) -> str:
    """What engine 0 does between two scrapes; engine 1 stays idle."""
    text = add(text, "vllm:num_requests_running", 2, **V0)
    text = add(text, "vllm:num_preemptions_total", 2, **V0)
    text = add(text, "vllm:prompt_tokens_total", 800, **V0)
    text = add(text, "vllm:prompt_tokens_by_source_total", 288, source="local_compute", **V0)
    text = add(text, "vllm:prompt_tokens_by_source_total", 512, source="local_cache_hit", **V0)
    text = add(text, "vllm:prompt_tokens_cached_total", 512, **V0)
    text = add(text, "vllm:generation_tokens_total", 1200, **V0)
    text = add(text, "vllm:prefix_cache_queries_total", 800, **V0)
    text = add(text, "vllm:prefix_cache_hits_total", 512, **V0)
    text = add(text, "vllm:spec_decode_num_draft_tokens_total", 300, **V0)
    text = add(text, "vllm:spec_decode_num_accepted_tokens_total", 210, **V0)
    text = add(text, "vllm:request_success_total", 5, finished_reason="stop", **V0)
    text = add(text, "vllm:request_success_total", 1, finished_reason="abort", **V0)
    text = observe(text, "vllm:iteration_tokens_total", 40, times=20, **V0)
    text = observe(text, "vllm:iteration_tokens_total", 100, times=9, **V0)
    text = observe(text, "vllm:iteration_tokens_total", 700, **V0)
    text = observe(text, "vllm:inter_token_latency_seconds", 0.02, times=1180, **V0)
    return observe(text, "vllm:time_to_first_token_seconds", 0.15, times=6, **V0)


def test_second_scrape_reports_increases_per_engine() -> None:
    endpoint = Endpoint(fixture("vllm_v1"))
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = vllm_busy_interval(fixture("vllm_v1"))
    result = scrape.scrape()

    values = engine_values(result)
    assert values["vllm"] == pytest.approx(
        {
            "kv_usage": 0.4375,
            "requests_running": 14,
            "requests_waiting": 3,
            "requests_waiting_for_kv": 3,
            "preemptions": 2,
            "prompt_tokens": 800,
            "prompt_tokens_computed": 288,
            "prompt_tokens_cached": 512,
            "generation_tokens": 1200,
            "prefix_cache_queries": 800,
            "prefix_cache_hits": 512,
            "spec_draft_tokens": 300,
            "spec_accepted_tokens": 210,
            "spec_acceptance": 0.7,
            "requests_finished": 6,
            "requests_aborted": 1,
            "steps": 30,
            "step_tokens": 20 * 40 + 9 * 100 + 700,
            "step_tokens_max": 1024,
            "itl_count": 1180,
            "itl_sum_s": 23.6,
            "ttft_count": 6,
            "ttft_sum_s": 0.9,
        }
    )
    # an idle engine reports zero increases; nothing to divide, so no acceptance and no largest step
    idle = values["vllm/1"]
    assert {
        metric: value for metric, value in idle.items() if metric not in GAUGES | {"requests_waiting_for_kv"}
    } == dict.fromkeys(
        [
            "preemptions",
            "prompt_tokens",
            "prompt_tokens_computed",
            "prompt_tokens_cached",
            "generation_tokens",
            "prefix_cache_queries",
            "prefix_cache_hits",
            "spec_draft_tokens",
            "spec_accepted_tokens",
            "requests_finished",
            "requests_aborted",
            "steps",
            "step_tokens",
            "itl_count",
            "itl_sum_s",
            "ttft_count",
            "ttft_sum_s",
        ],
        0.0,
    )
    assert result.restarted == []


@pytest.mark.parametrize(
    ("observations", "expected_max"),
    [
        ([48], 64),
        ([16], 16),  # le is inclusive
        ([48, 48, 700, 3], 1024),
        ([5000, 10], 8192),
        ([], None),
    ],
)
def test_step_tokens_max_is_the_highest_bucket_that_gained(observations: list[int], expected_max: float | None) -> None:
    values = engine_values(steps_of(observations).scrape())["vllm"]
    assert values["steps"] == len(observations)
    assert values["step_tokens"] == sum(observations)
    assert values.get("step_tokens_max") == expected_max
    assert "steps_beyond_buckets" not in values


def steps_of(observations: list[int]) -> EngineScraper:
    """A scraper whose next scrape sees engine 0 run steps of these sizes since its first."""
    endpoint = Endpoint(fixture("vllm_v1"))
    scrape = scraper(endpoint)
    scrape.scrape()
    text = fixture("vllm_v1")
    for tokens in observations:
        text = observe(text, "vllm:iteration_tokens_total", tokens, **V0)
    endpoint.answer = text
    return scrape


@pytest.mark.parametrize("observations", [[20000], [20000, 30000, 48], [48, 17000]])
def test_steps_beyond_the_last_bucket_are_counted_and_reach_at_least_its_bound(observations: list[int]) -> None:
    """vLLM's step-size buckets end at 16,384 tokens: a larger step is the largest of its interval, size unknown."""
    scrape = steps_of(observations)
    values = engine_values(scrape.scrape())["vllm"]
    assert values["step_tokens_max"] == 16384
    assert values["steps_beyond_buckets"] == sum(tokens > 16384 for tokens in observations)
    assert "steps_beyond_buckets" not in engine_values(scrape.scrape())["vllm"]  # an interval without one
    assert "steps_beyond_buckets" not in engine_values(scrape.scrape())["vllm"]  # an interval without one


@pytest.mark.parametrize(
    ("drafts", "accepted", "acceptance", "length"), [(100, 240, 0.8, 3.4), (100, 0, 0.0, 1.0), (0, 0, None, None)]
)
def test_vllm_spec_acceptance_and_length_come_from_the_interval_counters(drafts, accepted, acceptance, length) -> None:
    """Three draft tokens per draft: acceptance is accepted over draft tokens, length 1 + accepted per draft."""
    endpoint = Endpoint(fixture("vllm_v1"))
    scrape = scraper(endpoint)
    scrape.scrape()
    text = add(fixture("vllm_v1"), "vllm:spec_decode_num_drafts_total", drafts, **V0)
    text = add(text, "vllm:spec_decode_num_draft_tokens_total", 3 * drafts, **V0)
    endpoint.answer = add(text, "vllm:spec_decode_num_accepted_tokens_total", accepted, **V0)

    values = engine_values(scrape.scrape())["vllm"]
    assert (values.get("spec_acceptance"), values.get("spec_accept_length")) == (acceptance, length)
    assert "_vllm_spec_drafts" not in values


def test_sglang_spec_acceptance_and_length_are_its_gauges_when_speculative_decoding_runs() -> None:
    text = add(fixture("sglang"), "sglang:spec_accept_length", 3.2)
    text = add(text, "sglang:spec_accept_rate", 0.73)

    values = engine_values(scraper(Endpoint(text)).scrape())["sglang"]
    assert (values["spec_acceptance"], values["spec_accept_length"]) == (0.73, 3.2)


def test_sglang_increases() -> None:
    endpoint = Endpoint(fixture("sglang"))
    scrape = scraper(endpoint)
    scrape.scrape()
    text = add(fixture("sglang"), "sglang:num_retracted_requests_total", 1)
    for name, amount in [
        ("sglang:prompt_tokens_total", 4000),
        ("sglang:generation_tokens_total", 2500),
        ("sglang:cached_tokens_total", 1024),
        ("sglang:num_requests_total", 9),
        ("sglang:num_aborted_requests_total", 2),
    ]:
        text = add(text, name, amount)
    text = observe(text, "sglang:inter_token_latency_seconds", 0.007, times=2400)
    endpoint.answer = observe(text, "sglang:time_to_first_token_seconds", 0.3, times=9)

    assert engine_values(scrape.scrape())["sglang"] == pytest.approx(
        {
            "kv_usage": 0.37,
            "requests_running": 17,
            "requests_waiting": 2,
            "preemptions": 1,
            "prompt_tokens": 4000,
            "prompt_tokens_cached": 1024,
            "prompt_tokens_computed": 2976,
            "generation_tokens": 2500,
            "prefix_cache_hits": 1024,
            "requests_finished": 9,
            "requests_aborted": 2,
            "itl_count": 2400,
            "itl_sum_s": 16.8,
            "ttft_count": 9,
            "ttft_sum_s": 2.7,
        }
    )


def tgi_interval(text: str) -> str:
    text = add(text, "tgi_request_success", 7)
    text = add(text, "tgi_request_failure", 1, err="dropped")  # the client gave up while it was queued
    text = add(text, "tgi_request_failure", 2, err="generation")
    text = add(text, "tgi_request_failure", 1, err="incomplete")
    text = add(text, "tgi_request_failure", 4, err="overloaded")
    text = add(text, "tgi_request_failure", 3, err="validation")  # the client's error: not counted
    text = add(text, "tgi_request_failure", 1, err="template")
    text = observe(text, "tgi_request_generated_tokens", 250, times=7)
    text = observe(text, "tgi_request_input_length", 120, times=7)
    text = observe(text, "tgi_batch_forward_duration", 0.02, times=7, method="prefill")
    return observe(text, "tgi_batch_forward_duration", 0.01, times=250, method="decode")


@pytest.mark.parametrize("total_suffix", [False, True])
def test_tgi_increases_with_or_without_total_suffix(total_suffix: bool) -> None:
    def variant(text: str) -> str:
        if not total_suffix:
            return text
        for name in ("tgi_request_success", "tgi_request_failure"):
            text = text.replace(f"{name} ", f"{name}_total ").replace(f"{name}{{", f"{name}_total{{")
        return text

    endpoint = Endpoint(variant(fixture("tgi")))
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = variant(tgi_interval(fixture("tgi")))

    # exactly these: TGI has no preemptions, cached-token split, per-token ITL or TTFT histogram
    assert engine_values(scrape.scrape())["tgi"] == {
        "kv_usage": 0.25,
        "requests_running": 12,
        "requests_waiting": 4,
        "requests_finished": 7,
        "requests_aborted": 1,
        "requests_failed": 3,
        "requests_rejected": 4,
        "generation_tokens": 1750,
        "prompt_tokens": 840,
        "steps": 257,
    }


def test_deprecated_vllm_names_map_onto_the_same_metrics() -> None:
    endpoint = Endpoint(fixture("vllm_deprecated"))
    scrape = scraper(endpoint)
    scrape.scrape()
    text = add(fixture("vllm_deprecated"), "vllm:gpu_prefix_cache_queries_total", 100)
    text = add(text, "vllm:gpu_prefix_cache_hits_total", 64)
    endpoint.answer = observe(text, "vllm:time_per_output_token_seconds", 0.03, times=50)

    values = engine_values(scrape.scrape())["vllm"]
    assert values["prefix_cache_queries"] == 100
    assert values["prefix_cache_hits"] == 64
    assert values["itl_count"] == 50
    assert values["itl_sum_s"] == pytest.approx(1.5)
    assert not any(metric.startswith("spec_") for metric in values)  # no speculative config: absent


def test_the_current_vllm_name_wins_when_the_deprecated_one_is_exposed_too() -> None:
    deprecated = "\n".join(
        line
        for line in fixture("vllm_deprecated").splitlines()
        if "gpu_cache_usage_perc" in line or "gpu_prefix_cache" in line or "time_per_output_token" in line
    )
    endpoint = Endpoint(fixture("vllm_v1") + deprecated + "\n")
    scrape = scraper(endpoint)
    assert engine_values(scrape.scrape())["vllm"]["kv_usage"] == 0.4375
    text = add(fixture("vllm_v1"), "vllm:prefix_cache_queries_total", 10, **V0)
    text = observe(text, "vllm:inter_token_latency_seconds", 0.02, times=4, **V0)
    text += add(deprecated + "\n", "vllm:gpu_prefix_cache_queries_total", 10)
    endpoint.answer = observe(text, "vllm:time_per_output_token_seconds", 0.02, times=4)

    values = engine_values(scrape.scrape())["vllm"]
    assert (values["prefix_cache_queries"], values["itl_count"]) == (10, 4)  # not counted twice


def test_created_samples_are_ignored() -> None:
    endpoint = Endpoint(fixture("vllm_v1"))
    scrape = scraper(endpoint)
    scrape.scrape()
    # a later creation time (re-created series) must neither look like a reset nor add anything
    endpoint.answer = "\n".join(
        f"{line.rsplit(' ', 1)[0]} 1.0" if "_created{" in line and not line.startswith("#") else line
        for line in fixture("vllm_v1").splitlines()
    )
    result = scrape.scrape()

    assert result.restarted == []
    assert all(value == 0 for metric, value in engine_values(result)["vllm"].items() if metric not in GAUGES)
    assert not any("created" in sample.metric for sample in result.samples)
    # nor is a _created sample evidence of an engine
    only_created = "\n".join(line for line in fixture("vllm_v1").splitlines() if "_created" in line)
    assert "no vLLM, SGLang or TGI metrics" in scraper(Endpoint(only_created)).scrape().error


# --- restarts and failures -----------------------------------------------------------------------------------


def test_a_counter_reset_reports_the_value_since_restart_and_lists_the_engine() -> None:
    endpoint = Endpoint(fixture("vllm_v1"))
    scrape = scraper(endpoint)
    scrape.scrape()
    restarted = zero(fixture("vllm_v1"), engine="1")
    restarted = add(restarted, "vllm:generation_tokens_total", 340, engine="1")
    restarted = add(restarted, "vllm:prompt_tokens_total", 1500, engine="1")
    restarted = observe(restarted, "vllm:iteration_tokens_total", 300, times=2, engine="1")
    restarted = observe(restarted, "vllm:iteration_tokens_total", 12, times=5, engine="1")
    endpoint.answer = restarted
    result = scrape.scrape()

    assert result.restarted == ["vllm/1"]
    values = engine_values(result)["vllm/1"]
    assert (values["generation_tokens"], values["prompt_tokens"], values["preemptions"]) == (340, 1500, 0)
    assert (values["steps"], values["step_tokens"], values["step_tokens_max"]) == (7, 660, 512)
    assert all(value >= 0 for value in values.values())
    assert engine_values(result)["vllm"]["generation_tokens"] == 0  # the other engine is unaffected

    endpoint.answer = add(restarted, "vllm:generation_tokens_total", 60, engine="1")
    after = scrape.scrape()
    assert after.restarted == []
    assert engine_values(after)["vllm/1"]["generation_tokens"] == 60


@pytest.mark.parametrize(
    ("failure", "reason"),
    [
        (httpx.ReadTimeout("timed out"), "ReadTimeout: timed out"),
        (TimeoutError(), "TimeoutError"),
        (httpx.ConnectError("[Errno 111] Connection refused"), "Connection refused"),
        (ConnectionRefusedError(111, "Connection refused"), "Connection refused"),
    ],
)
def test_a_failing_fetch_is_reported_and_the_next_scrape_carries_on(failure: Exception, reason: str) -> None:
    endpoint = Endpoint(fixture("vllm_v1"))
    times = iter([NOW_NS, NOW_NS + 250_000_000, NOW_NS + 500_000_000])
    scrape = EngineScraper(URL, fetch=endpoint, clock=lambda: next(times))
    assert scrape.scrape().since_ns == 0
    endpoint.answer = failure
    failed = scrape.scrape()

    assert not failed.ok
    assert URL in failed.error and reason in failed.error
    assert failed.engines == [] and failed.restarted == []
    assert engine_values(failed) == {}
    assert agent_values(failed) == {"scrape_duration_s": failed.duration_s, "engine_up": 0, "scrape_errors": 1}
    assert all(sample.engine == "" and sample.time_ns == NOW_NS + 250_000_000 for sample in failed.samples)

    # back without a restart: increases cover the whole gap since the last good scrape, no restart reported
    endpoint.answer = add(fixture("vllm_v1"), "vllm:generation_tokens_total", 999, **V0)
    back = scrape.scrape()
    assert back.ok and back.error == "" and back.restarted == []
    assert back.since_ns == NOW_NS  # the increase spans the outage: from the last good scrape
    assert engine_values(back)["vllm"]["generation_tokens"] == 999
    assert agent_values(back)["engine_up"] == 1


def test_an_engine_back_from_an_outage_with_reset_counters_is_listed_as_restarted() -> None:
    endpoint = Endpoint(fixture("vllm_deprecated"))
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = httpx.ConnectError("[Errno 111] Connection refused")
    scrape.scrape()
    endpoint.answer = add(zero(fixture("vllm_deprecated"), engine="0"), "vllm:generation_tokens_total", 77)
    back = scrape.scrape()

    assert back.ok and back.restarted == ["vllm"]
    assert engine_values(back)["vllm"]["generation_tokens"] == 77


def test_the_default_fetch_raises_on_an_http_error_status(monkeypatch: pytest.MonkeyPatch) -> None:
    def get(url: str, timeout: float) -> httpx.Response:
        return httpx.Response(500, text="Internal Server Error", request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    with pytest.raises(httpx.HTTPStatusError, match="HTTP 500"):
        http_fetch(URL, 1.0)
    result = EngineScraper(URL, clock=lambda: NOW_NS).scrape()  # the default fetch, through the scraper

    assert not result.ok and "HTTP 500" in result.error and URL in result.error
    assert agent_values(result)["scrape_errors"] == 1


def test_the_default_fetch_returns_the_body_and_passes_the_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, float]] = []

    def get(url: str, timeout: float) -> httpx.Response:
        seen.append((url, timeout))
        return httpx.Response(200, text=fixture("tgi"), request=httpx.Request("GET", url))

    monkeypatch.setattr(httpx, "get", get)
    result = EngineScraper(URL, timeout_s=0.25).scrape()

    assert result.ok and result.engines == ["tgi"]
    assert seen == [(URL, 0.25)]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<html><body><h1>502 Bad Gateway</h1></body></html>", "unparsable"),
        ('{"detail": "Not Found"}', "unparsable"),
        ("Internal Server Error", "unparsable"),
        ("", "no vLLM, SGLang or TGI metrics"),
        ("# TYPE node_load1 gauge\nnode_load1 0.42\n", "no vLLM, SGLang or TGI metrics"),
    ],
)
def test_text_that_is_not_engine_metrics_fails_the_scrape(text: str, reason: str) -> None:
    endpoint = Endpoint(text)
    scrape = scraper(endpoint)
    result = scrape.scrape()

    assert not result.ok and reason in result.error
    assert agent_values(result)["engine_up"] == 0 and agent_values(result)["scrape_errors"] == 1
    endpoint.answer = fixture("sglang")
    assert scrape.scrape().ok


# --- the simulator's real exposition -------------------------------------------------------------------------


def _drive(metrics, scheduler: Scheduler, steps: int) -> dict[str, int]:
    """Run ``steps`` engine steps the way streamscope_cli.engine.runtime does, recording into ``metrics``."""
    done = {"generation_tokens": 0, "finished": 0, "steps": 0, "step_tokens": 0}
    started: set[str] = set()
    for _ in range(steps):
        step = scheduler.step()
        gaps = {}
        for request_id in step.emitted:
            if request_id in started:
                gaps[request_id] = 0.012
            else:
                started.add(request_id)
                metrics.record_first_token(0.2)
        for _ in step.finished:
            metrics.record_finished("stop", 1.5)
        metrics.record_step(step, scheduler, gaps)
        done["generation_tokens"] += sum(step.emitted.values())
        done["finished"] += len(step.finished)
        done["steps"] += 1 if step.scheduled_tokens else 0
        done["step_tokens"] += step.scheduled_tokens
        done["largest_step"] = max(done.get("largest_step", 0), step.scheduled_tokens)
    return done


@pytest.mark.parametrize(("flavor", "engine"), [("vllm", "vllm"), ("sglang", "sglang")])
def test_scrapes_the_simulators_exposition(flavor: str, engine: str) -> None:
    scheduler = Scheduler(SchedulerConfig(num_blocks=256, max_running=4, max_step_tokens=512), random.Random(7))
    for i in range(10):
        # a shared system prompt: from the second admission on, the prefix cache holds most of it
        scheduler.add(Sequence(f"r{i}", 100 + 37 * i, 6 + 5 * i, prefix_key="system", prefix_tokens=96))
    metrics = make_metrics(flavor, "m")
    scrape = EngineScraper(URL, fetch=lambda url, timeout: exposition(metrics).decode())

    _drive(metrics, scheduler, 3)
    first = scrape.scrape()
    done = _drive(metrics, scheduler, 9)
    second = scrape.scrape()

    assert first.ok and second.ok and second.engines == [engine]
    values = engine_values(second)[engine]
    assert scheduler.waiting and scheduler.running and done["generation_tokens"] > 0 and done["finished"] > 0
    assert values["kv_usage"] == pytest.approx(scheduler.kv_usage)
    assert values["requests_running"] == len(scheduler.running)
    assert values["requests_waiting"] == len(scheduler.waiting)
    assert values["generation_tokens"] == done["generation_tokens"]
    assert values["requests_finished"] == done["finished"]
    assert values["prompt_tokens_cached"] > 0
    assert values["prompt_tokens_computed"] + values["prompt_tokens_cached"] == values["prompt_tokens"]
    if flavor == "vllm":
        assert (values["steps"], values["step_tokens"]) == (done["steps"], done["step_tokens"])
        assert values["step_tokens_max"] == min(b for b in VLLM_ITERATION_BUCKETS if b >= done["largest_step"])


def test_once_shows_what_two_scrapes_an_interval_apart_make_of_counters_and_levels() -> None:
    from streamscope_gpu_agent.agent import AgentConfig, GpuAgent

    busy = add(fixture("vllm_v1"), "vllm:num_preemptions_total", 2, **V0)
    busy = busy.replace(
        'vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.3125',
        'vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.96',
    )
    answers = [fixture("vllm_v1"), busy]
    engine = EngineScraper(URL, fetch=lambda url, timeout_s: answers.pop(0))
    agent = GpuAgent(AgentConfig(node="n", engine_interval_s=0.01, gpu=False), scraper=engine)

    samples, events = agent.collect_once()
    assert answers == []
    assert {(s.engine, s.metric): s.value for s in samples}[("vllm", "preemptions")] == 2
    assert sorted((e.kind, e.engine, e.magnitude) for e in events) == [
        ("kv_high_water", "vllm/1", 0.96),  # still open: shown up to the last reading
        ("preemption", "vllm", 2),
    ]
