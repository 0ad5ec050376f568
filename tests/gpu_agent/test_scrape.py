"""Engine scrapers: /metrics in, normalized per-interval Samples out; no network anywhere.

The expositions are built from the engines' released metric definitions (``engine_expositions``): each test records
what the engine would between two scrapes and serves the text it would then render.
"""

from __future__ import annotations

import random
import re
import time

import httpx
import pytest

from streamscope_cli.engine.metrics import VLLM_ITERATION_BUCKETS, exposition, make_metrics
from streamscope_cli.engine.scheduler import Scheduler, SchedulerConfig, Sequence
from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.events import EventDeriver
from streamscope_gpu_agent.scrape import EngineScraper, http_fetch
from tests.gpu_agent.engine_expositions import Sglang0_5_23, Tgi3_3_7, Vllm0_8_5, Vllm0_10_2, Vllm0_33
from tests.gpu_agent.scrapes import Endpoint, agent_values, engine_values

URL = "http://gpu-7:8000/metrics"
NOW_NS = 1_800_000_000_123_456_789
GAUGES = {m.ENGINE_KV_USAGE, m.ENGINE_REQUESTS_RUNNING, m.ENGINE_REQUESTS_WAITING, m.ENGINE_SPEC_ACCEPTANCE}
GAUGES |= {m.ENGINE_REQUESTS_WAITING_FOR_KV}
WAITING_FOR_KV = m.ENGINE_REQUESTS_WAITING_FOR_KV


def scraper(endpoint: Endpoint) -> EngineScraper:
    return EngineScraper(URL, fetch=endpoint, timeout_s=0.5, clock=lambda: NOW_NS)


# --- engines some hours into a run ---------------------------------------------------------------------------


def vllm_pair() -> Vllm0_33:
    """One vLLM API server in front of two data-parallel engines, speculative decoding on (3 draft tokens)."""
    vllm = Vllm0_33(engines=(0, 1), speculative_tokens=3)
    #               engine, running, waiting for capacity, deferred, KV usage
    for engine, running, capacity, deferred, kv in [(0, 12, 3, 1, 0.4375), (1, 9, 0, 0, 0.3125)]:
        vllm.set("vllm:num_requests_running", running, engine=engine)
        vllm.set("vllm:num_requests_waiting", capacity + deferred, engine=engine)  # loggers.py: the sum of both
        vllm.set("vllm:num_requests_waiting_by_reason", capacity, engine=engine, reason="capacity")
        vllm.set("vllm:num_requests_waiting_by_reason", deferred, engine=engine, reason="deferred")
        vllm.set("vllm:kv_cache_usage_perc", kv, engine=engine)
        # what it counted before the agent's first scrape
        vllm.inc("vllm:num_preemptions", 7, engine=engine)
        admit(vllm, computed=942_090, cached=901_120, engine=engine)
        vllm.inc("vllm:generation_tokens", 5_210_877, engine=engine)
        vllm.inc("vllm:request_success", 4182, engine=engine, finished_reason="stop")
        vllm.inc("vllm:request_success", 27, engine=engine, finished_reason="abort")
        vllm.observe("vllm:iteration_tokens_total", 64, times=400, engine=engine)
        vllm.observe("vllm:time_to_first_token_seconds", 0.08, times=300, engine=engine)
    return vllm


def admit(vllm: Vllm0_33, *, computed: int, cached: int, engine: int = 0) -> None:
    """Prompt tokens admitted, as ``PrometheusStatLogger.record`` counts them: all of them, by source (computed here,
    or the prefix cache's), the cached ones, and the prefix cache's queries and hits."""
    vllm.inc("vllm:prompt_tokens", computed + cached, engine=engine)
    vllm.inc("vllm:prompt_tokens_by_source", computed, engine=engine, source="local_compute")
    vllm.inc("vllm:prompt_tokens_by_source", cached, engine=engine, source="local_cache_hit")
    vllm.inc("vllm:prompt_tokens_cached", cached, engine=engine)
    vllm.inc("vllm:prefix_cache_queries", computed + cached, engine=engine)
    vllm.inc("vllm:prefix_cache_hits", cached, engine=engine)


def vllm_deprecated(engine: int = 0) -> Vllm0_8_5:
    """vLLM 0.8.5: one engine, only the names later deprecated."""
    vllm = Vllm0_8_5(engines=(engine,), model="Qwen/Qwen2.5-7B-Instruct")
    vllm.set("vllm:num_requests_running", 5).set("vllm:num_requests_waiting", 1)
    vllm.set("vllm:gpu_cache_usage_perc", 0.21875)
    vllm.inc("vllm:prompt_tokens_total", 220_913).inc("vllm:generation_tokens_total", 640_188)
    vllm.inc("vllm:gpu_prefix_cache_queries", 13_807).inc("vllm:gpu_prefix_cache_hits", 6_464)
    vllm.inc("vllm:request_success_total", 588, finished_reason="stop")
    return vllm.observe("vllm:time_per_output_token_seconds", 0.02, times=500)


SGLANG_RANKS = [(17, 2, 0.37), (11, 0, 0.25)]
"""running, queued, token usage of DP rank 0 and 1."""


def sglang_server(dp_size: int = 1) -> Sglang0_5_23:
    """SGLang with ``dp_size`` data-parallel replicas, speculative decoding off."""
    sglang = Sglang0_5_23(dp_size=dp_size)
    for rank, (running, queued, usage) in enumerate(SGLANG_RANKS[:dp_size]):
        sglang.set("sglang:num_running_reqs", running, dp_rank=rank)
        sglang.set("sglang:num_queue_reqs", queued, dp_rank=rank)
        sglang.set("sglang:token_usage", usage, dp_rank=rank)
        sglang.set("sglang:num_retracted_reqs", 0, dp_rank=rank)
        # without a speculative algorithm the scheduler logs zeros (scheduler_components/metrics_reporter.py)
        sglang.set("sglang:spec_accept_length", 0, dp_rank=rank).set("sglang:spec_accept_rate", 0, dp_rank=rank)
        sglang.inc("sglang:num_retracted_requests_total", 4, dp_rank=rank)
    # the tokenizer manager's series: one for all ranks
    sglang.inc("sglang:prompt_tokens_total", 3_120_988, is_streaming="true")
    sglang.inc("sglang:generation_tokens_total", 8_842_177, is_streaming="true")
    sglang.inc("sglang:cached_tokens_total", 1_504_211, cache_source="device")
    sglang.inc("sglang:num_requests_total", 7810, is_streaming="true")
    sglang.inc("sglang:num_aborted_requests_total", 52)
    sglang.observe("sglang:time_to_first_token_seconds", 0.18, times=400, is_streaming="true")
    return sglang.observe("sglang:inter_token_latency_seconds", 0.009, times=900)


def tgi_router(counter_suffix: str = "") -> Tgi3_3_7:
    """A TGI router that has served a while: no request has yet failed as incomplete or on its chat template."""
    tgi = Tgi3_3_7(counter_suffix=counter_suffix)
    tgi.set("tgi_batch_max_total_tokens", 59_488)  # warm-up sized the KV cache for this many tokens
    tgi.set("tgi_queue_size", 4).set("tgi_batch_current_size", 12)
    tgi.set("tgi_batch_current_max_tokens", 14_872)  # the tokens the running batch may grow to
    tgi.inc("tgi_request_count", 1562).inc("tgi_request_success", 1490)
    for err, count in [("dropped", 9), ("generation", 3), ("validation", 18), ("overloaded", 42)]:
        tgi.inc("tgi_request_failure", count, err=err)
    tgi.inc("tgi_batch_inference_count", 1533, method="prefill")
    tgi.inc("tgi_batch_inference_count", 90_210, method="decode")
    tgi.observe("tgi_batch_forward_duration", 0.013, times=1533, method="prefill")
    tgi.observe("tgi_batch_forward_duration", 0.0055, times=900, method="decode")
    tgi.observe("tgi_request_input_length", 160, times=1490)
    return tgi.observe("tgi_request_generated_tokens", 108, times=1490)


def test_the_expositions_are_shaped_as_each_engine_serves_them() -> None:
    vllm = vllm_pair().render()
    assert 'vllm:num_preemptions_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0' in vllm
    assert 'vllm:num_preemptions_created{engine="0"' in vllm and "python_gc_objects_collected_total" in vllm
    rejections = r'^vllm:admission_rejections_total\{model_name="[^"]+",reason="max_num_queued_reqs"\} 0\.0$'
    assert re.search(rejections, vllm, re.M)  # the API server's own: no engine label

    sglang = sglang_server().render()
    assert "_created" not in sglang and "python_gc" not in sglang
    assert re.search(r'^sglang:num_retracted_reqs\{[^}]*pid="\d+"[^}]*\} 0\.0$', sglang, re.M)
    assert "sglang:utilization" not in sglang  # never recorded: not served

    tgi = tgi_router().render()
    assert "\n# TYPE tgi_request_success counter\ntgi_request_success 1490\n" in tgi
    assert not re.search(r"^tgi_\w+_(total|created)\b", tgi, re.M)
    assert 'tgi_batch_forward_duration_bucket{method="prefill",le="0.00015000000000000001"} 0\n' in tgi
    assert "# TYPE tgi_batch_max_total_tokens gauge\ntgi_batch_max_total_tokens 59488\n" in tgi  # and no HELP
    assert "# HELP tgi_batch_max_total_tokens" not in tgi
    assert 'tgi_request_failure{err="incomplete"}' not in tgi  # a series exists once something was recorded


# --- detection and gauges ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "engines", "expected"),
    [
        (
            vllm_pair,
            # the API server's admission_rejections carry no engine label, and name no engine: nothing on them is read
            ["vllm", "vllm/1"],
            {
                # engine 0: 3 waiting for capacity + 1 deferred; only the first wait for room
                "vllm": {"kv_usage": 0.4375, "requests_running": 12, "requests_waiting": 4, WAITING_FOR_KV: 3},
                "vllm/1": {"kv_usage": 0.3125, "requests_running": 9, "requests_waiting": 0, WAITING_FOR_KV: 0},
            },
        ),
        (vllm_deprecated, ["vllm"], {"vllm": {"kv_usage": 0.21875, "requests_running": 5, "requests_waiting": 1}}),
        # speculative decoding is off: SGLang's zero acceptance is not reported as a real 0
        (sglang_server, ["sglang"], {"sglang": {"kv_usage": 0.37, "requests_running": 17, "requests_waiting": 2}}),
        # TGI's KV usage: the tokens its batch may grow to over the budget warm-up sized the cache for
        (tgi_router, ["tgi"], {"tgi": {"kv_usage": 14_872 / 59_488, "requests_running": 12, "requests_waiting": 4}}),
    ],
)
def test_first_scrape_detects_the_engines_and_reports_gauges_only(build, engines: list[str], expected: dict) -> None:
    endpoint = Endpoint(build().render())
    result = scraper(endpoint).scrape()

    assert result.ok and result.error == ""
    assert result.engines == engines
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
    result = scraper(Endpoint(vllm_pair().render() + tgi_router().render())).scrape()

    assert result.engines == ["tgi", "vllm", "vllm/1"]
    assert engine_values(result)["tgi"] == {"kv_usage": 0.25, "requests_running": 12, "requests_waiting": 4}
    assert engine_values(result)["vllm/1"]["kv_usage"] == 0.3125


def test_engine_index_labels_name_the_engines() -> None:
    """A lone engine is plain ``vllm`` whatever its index; several get ``vllm/<index>``, index 0 staying plain."""
    alone = scraper(Endpoint(vllm_deprecated(engine=3).render())).scrape()
    assert alone.engines == ["vllm"]

    result = scraper(Endpoint(sglang_server(dp_size=2).render())).scrape()
    # the tokenizer manager's series carry no rank: counted over both, they are neither rank's
    assert result.engines == ["sglang", "sglang/1", "sglang/all"]
    assert engine_values(result)["sglang"] == {"kv_usage": 0.37, "requests_running": 17, "requests_waiting": 2}
    assert engine_values(result)["sglang/1"] == {"kv_usage": 0.25, "requests_running": 11, "requests_waiting": 0}
    # alone, the one rank's name takes them: they were counted over it alone
    assert scraper(Endpoint(sglang_server().render())).scrape().engines == ["sglang"]


# --- per-interval increases ----------------------------------------------------------------------------------


def vllm_busy_interval(vllm: Vllm0_33) -> str:
    """What engine 0 does between two scrapes; engine 1 stays idle."""
    vllm.set("vllm:num_requests_running", 14, engine=0)
    vllm.inc("vllm:num_preemptions", 2, engine=0)
    admit(vllm, computed=288, cached=512)
    vllm.inc("vllm:generation_tokens", 1200, engine=0)
    vllm.inc("vllm:spec_decode_num_drafts", 100, engine=0)
    vllm.inc("vllm:spec_decode_num_draft_tokens", 300, engine=0)
    vllm.inc("vllm:spec_decode_num_accepted_tokens", 210, engine=0)
    vllm.inc("vllm:request_success", 5, engine=0, finished_reason="stop")
    vllm.inc("vllm:request_success", 1, engine=0, finished_reason="abort")
    vllm.observe("vllm:iteration_tokens_total", 40, times=20, engine=0)
    vllm.observe("vllm:iteration_tokens_total", 100, times=9, engine=0)
    vllm.observe("vllm:iteration_tokens_total", 700, engine=0)
    vllm.observe("vllm:inter_token_latency_seconds", 0.02, times=1180, engine=0)
    vllm.observe("vllm:time_to_first_token_seconds", 0.15, times=6, engine=0)
    return vllm.render()


def test_second_scrape_reports_increases_per_engine() -> None:
    vllm = vllm_pair()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = vllm_busy_interval(vllm)
    result = scrape.scrape()

    values = engine_values(result)
    assert values["vllm"] == pytest.approx(
        {
            "kv_usage": 0.4375,
            "requests_running": 14,
            "requests_waiting": 4,
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
            "spec_accept_length": 3.1,
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
    assert {metric: value for metric, value in idle.items() if metric not in GAUGES} == dict.fromkeys(
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
    assert "vllm/all" not in values  # the API server's own counters: nothing the agent reads


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
    """A scraper whose next scrape sees the engine run steps of these sizes since its first."""
    vllm = Vllm0_33()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    for tokens in observations:
        vllm.observe("vllm:iteration_tokens_total", tokens)
    endpoint.answer = vllm.render()
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
    vllm = Vllm0_33(speculative_tokens=3)
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    vllm.inc("vllm:spec_decode_num_drafts", drafts)
    vllm.inc("vllm:spec_decode_num_draft_tokens", 3 * drafts)
    vllm.inc("vllm:spec_decode_num_accepted_tokens", accepted)
    endpoint.answer = vllm.render()

    values = engine_values(scrape.scrape())["vllm"]
    assert (values.get("spec_acceptance"), values.get("spec_accept_length")) == (acceptance, length)
    assert "_vllm_spec_drafts" not in values


def test_sglang_spec_acceptance_and_length_are_its_gauges_when_speculative_decoding_runs() -> None:
    sglang = sglang_server().set("sglang:spec_accept_length", 3.2).set("sglang:spec_accept_rate", 0.73)

    values = engine_values(scraper(Endpoint(sglang.render())).scrape())["sglang"]
    assert (values["spec_acceptance"], values["spec_accept_length"]) == (0.73, 3.2)


def test_sglang_increases() -> None:
    sglang = sglang_server()
    endpoint = Endpoint(sglang.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    sglang.inc("sglang:num_retracted_requests_total", 1)
    sglang.inc("sglang:prompt_tokens_total", 4000, is_streaming="true")
    sglang.inc("sglang:generation_tokens_total", 2500, is_streaming="true")
    sglang.inc("sglang:cached_tokens_total", 1000, cache_source="device")
    sglang.inc("sglang:cached_tokens_total", 24, cache_source="host")  # a source first seen now: counted from 0
    sglang.inc("sglang:num_requests_total", 9, is_streaming="true")
    sglang.inc("sglang:num_aborted_requests_total", 2)
    sglang.observe("sglang:inter_token_latency_seconds", 0.007, times=2400)
    sglang.observe("sglang:time_to_first_token_seconds", 0.3, times=9, is_streaming="true")
    endpoint.answer = sglang.render()

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


def tgi_interval(tgi: Tgi3_3_7) -> str:
    tgi.inc("tgi_request_success", 7)
    tgi.inc("tgi_request_failure", 1, err="dropped")  # the client gave up while it was queued
    tgi.inc("tgi_request_failure", 2, err="generation")
    tgi.inc("tgi_request_failure", 1, err="incomplete")  # the first of its kind: the series appears now
    tgi.inc("tgi_request_failure", 4, err="overloaded")
    tgi.inc("tgi_request_failure", 3, err="validation")  # the client's error: not counted
    tgi.inc("tgi_request_failure", 1, err="template")
    tgi.observe("tgi_request_generated_tokens", 250, times=7)
    tgi.observe("tgi_request_input_length", 120, times=7)
    tgi.observe("tgi_batch_forward_duration", 0.02, times=7, method="prefill")
    tgi.observe("tgi_batch_forward_duration", 0.01, times=250, method="decode")
    return tgi.render()


@pytest.mark.parametrize("counter_suffix", ["", "_total"])
def test_tgi_increases_with_or_without_total_suffix(counter_suffix: str) -> None:
    """TGI's exporter names counters as recorded; one configured for the recommended naming adds ``_total``."""
    tgi = tgi_router(counter_suffix)
    endpoint = Endpoint(tgi.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = tgi_interval(tgi)

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
    vllm = vllm_deprecated()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    vllm.inc("vllm:gpu_prefix_cache_queries", 100).inc("vllm:gpu_prefix_cache_hits", 64)  # KV blocks in 0.8.5
    vllm.observe("vllm:time_per_output_token_seconds", 0.03, times=50)
    endpoint.answer = vllm.render()

    values = engine_values(scrape.scrape())["vllm"]
    assert "prefix_cache_queries" not in values and "prefix_cache_hits" not in values  # blocks are not tokens
    assert values["itl_count"] == 50
    assert values["itl_sum_s"] == pytest.approx(1.5)
    assert not any(metric.startswith("spec_") for metric in values)  # no speculative config: absent


def test_the_current_vllm_name_wins_when_the_deprecated_one_is_exposed_too() -> None:
    """vLLM 0.10.2 serves both names of a renamed family from one statistic: counted once."""
    vllm = Vllm0_10_2()
    vllm.set("vllm:kv_cache_usage_perc", 0.4375).set("vllm:gpu_cache_usage_perc", 0.4375)
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    assert engine_values(scrape.scrape())["vllm"]["kv_usage"] == 0.4375
    vllm.inc("vllm:prefix_cache_queries", 10).inc("vllm:gpu_prefix_cache_queries", 10)
    vllm.observe("vllm:inter_token_latency_seconds", 0.02, times=4)
    vllm.observe("vllm:time_per_output_token_seconds", 0.02, times=4)
    endpoint.answer = vllm.render()

    values = engine_values(scrape.scrape())["vllm"]
    assert (values["prefix_cache_queries"], values["itl_count"]) == (10, 4)  # not counted twice


def created(text: str) -> list[float]:
    return [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if "_created{" in line]


def test_created_samples_are_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    before = vllm_pair().render()
    # the same counts in series created an hour later (an API server that re-created its loggers)
    an_hour_later = time.time() + 3600
    with monkeypatch.context() as patch:
        patch.setattr(time, "time", lambda: an_hour_later)
        after = vllm_pair().render()
    assert created(before) and all(later > earlier for earlier, later in zip(created(before), created(after)))

    endpoint = Endpoint(before)
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = after
    result = scrape.scrape()

    # a later creation time must neither look like a reset nor add anything
    assert result.restarted == []
    assert all(value == 0 for metric, value in engine_values(result)["vllm"].items() if metric not in GAUGES)
    assert not any("created" in sample.metric for sample in result.samples)
    # nor is a _created sample evidence of an engine
    only_created = "\n".join(line for line in before.splitlines() if "_created" in line)
    assert "no vLLM, SGLang, TGI or llama.cpp metrics" in scraper(Endpoint(only_created)).scrape().error


# --- successive snapshots, restarts and failures -------------------------------------------------------------


def test_vllm_successive_snapshots_make_events_and_a_restart_counts_from_zero() -> None:
    vllm = Vllm0_33()
    endpoint = Endpoint(vllm.render())
    scrape, deriver = scraper(endpoint), EventDeriver()
    deriver.observe(scrape.scrape().samples, NOW_NS)

    def interval() -> tuple[dict[str, float], list[tuple[str, float]], list[str]]:
        endpoint.answer = vllm.render()
        result = scrape.scrape()
        events = deriver.observe(result.samples, NOW_NS - 1_000_000_000)
        found = sorted((event.kind, event.magnitude) for event in events)
        return engine_values(result)["vllm"], found, result.restarted

    # three preemptions; a 6,000-token prompt whose 5,800 the prefix cache held: 200 computed, no burst
    vllm.inc("vllm:num_preemptions", 3)
    admit(vllm, computed=200, cached=5_800)
    vllm.observe("vllm:time_to_first_token_seconds", 0.04, times=2)
    values, events, restarted = interval()
    assert (values["preemptions"], values["prompt_tokens"], values["prompt_tokens_computed"]) == (3, 6_000, 200)
    assert (values["ttft_count"], values["ttft_sum_s"]) == (2, pytest.approx(0.08))
    assert events == [("preemption", 3)] and restarted == []

    # 5,000 computed: a prefill burst, and one step of 5,200 tokens
    admit(vllm, computed=5_000, cached=0)
    vllm.observe("vllm:iteration_tokens_total", 5_200)
    values, events, restarted = interval()
    assert (values["preemptions"], values["prompt_tokens_computed"], values["step_tokens_max"]) == (0, 5_000, 8192)
    assert events == [("prefill_burst", 8192)] and restarted == []  # the step's bound beats the 5,000 tokens

    # the server restarts: counters and histograms start over and report what they counted since
    vllm.restart()
    vllm.inc("vllm:num_preemptions", 1)
    vllm.observe("vllm:time_to_first_token_seconds", 2.0)
    values, events, restarted = interval()
    assert restarted == ["vllm"]
    assert (values["preemptions"], values["ttft_count"], values["ttft_sum_s"]) == (1, 1, 2.0)
    assert events == [("preemption", 1)]


def test_sglang_successive_snapshots_make_events() -> None:
    sglang = sglang_server()
    endpoint = Endpoint(sglang.render())
    scrape, deriver = scraper(endpoint), EventDeriver()
    deriver.observe(scrape.scrape().samples, NOW_NS)

    sglang.inc("sglang:num_retracted_requests_total", 2)
    sglang.inc("sglang:prompt_tokens_total", 6_000, is_streaming="true")
    sglang.inc("sglang:cached_tokens_total", 5_800, cache_source="device")
    endpoint.answer = sglang.render()
    first = scrape.scrape()
    assert engine_values(first)["sglang"]["prompt_tokens_computed"] == 200
    assert [(e.kind, e.magnitude) for e in deriver.observe(first.samples, NOW_NS)] == [("preemption", 2)]

    sglang.inc("sglang:prompt_tokens_total", 4_500, is_streaming="false")  # nothing cached
    sglang.set("sglang:token_usage", 0.95)
    endpoint.answer = sglang.render()
    second = scrape.scrape()
    assert engine_values(second)["sglang"]["prompt_tokens_computed"] == 4_500
    assert [(e.kind, e.magnitude) for e in deriver.observe(second.samples, NOW_NS)] == [("prefill_burst", 4_500)]

    sglang.set("sglang:token_usage", 0.5)  # the KV high-water mark closes with its peak
    endpoint.answer = sglang.render()
    third = scrape.scrape()
    assert [(e.kind, e.magnitude) for e in deriver.observe(third.samples, NOW_NS)] == [("kv_high_water", 0.95)]


def test_tgi_successive_snapshots_count_histograms_per_interval() -> None:
    """TGI cannot tell cached prompt tokens: every admitted prompt token counts toward a burst."""
    tgi = tgi_router()
    endpoint = Endpoint(tgi.render())
    scrape, deriver = scraper(endpoint), EventDeriver()
    deriver.observe(scrape.scrape().samples, NOW_NS)
    found = []
    for prefills, decodes, prompts in [(10, 300, [5_000]), (0, 0, []), (3, 80, [100, 200, 300])]:
        tgi.observe("tgi_batch_forward_duration", 0.03, times=prefills, method="prefill")
        tgi.observe("tgi_batch_forward_duration", 0.006, times=decodes, method="decode")
        for tokens in prompts:
            tgi.observe("tgi_request_input_length", tokens)
        endpoint.answer = tgi.render()
        result = scrape.scrape()
        events = deriver.observe(result.samples, NOW_NS)
        values = engine_values(result)["tgi"]
        found.append((values["steps"], values["prompt_tokens"], [(e.kind, e.magnitude) for e in events]))

    assert found == [(310, 5_000, [("prefill_burst", 5_000)]), (0, 0, []), (83, 600, [])]

    tgi.restart()
    tgi.set("tgi_batch_max_total_tokens", 59_488).observe("tgi_batch_forward_duration", 0.03, method="prefill")
    endpoint.answer = tgi.render()
    result = scrape.scrape()
    assert result.restarted == ["tgi"]
    assert engine_values(result)["tgi"]["steps"] == 1


def test_a_counter_reset_reports_the_value_since_restart_and_lists_the_engine() -> None:
    vllm = vllm_pair()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    vllm.restart(engine=1)
    vllm.inc("vllm:generation_tokens", 340, engine=1).inc("vllm:prompt_tokens", 1500, engine=1)
    vllm.observe("vllm:iteration_tokens_total", 300, times=2, engine=1)
    vllm.observe("vllm:iteration_tokens_total", 12, times=5, engine=1)
    endpoint.answer = vllm.render()
    result = scrape.scrape()

    assert result.restarted == ["vllm/1"]
    values = engine_values(result)["vllm/1"]
    assert (values["generation_tokens"], values["prompt_tokens"], values["preemptions"]) == (340, 1500, 0)
    assert (values["steps"], values["step_tokens"], values["step_tokens_max"]) == (7, 660, 512)
    assert all(value >= 0 for value in values.values())
    assert engine_values(result)["vllm"]["generation_tokens"] == 0  # the other engine is unaffected

    vllm.inc("vllm:generation_tokens", 60, engine=1)
    endpoint.answer = vllm.render()
    after = scrape.scrape()
    assert after.restarted == []
    assert engine_values(after)["vllm/1"]["generation_tokens"] == 60


def test_a_server_restart_lists_every_engine_whose_counters_went_down() -> None:
    vllm = vllm_pair()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    vllm.restart().inc("vllm:generation_tokens", 25, engine=1)
    endpoint.answer = vllm.render()
    result = scrape.scrape()

    assert result.restarted == ["vllm", "vllm/1"]
    values = engine_values(result)
    assert (values["vllm"]["generation_tokens"], values["vllm/1"]["generation_tokens"]) == (0, 25)
    assert (values["vllm"]["kv_usage"], values["vllm"]["preemptions"]) == (0, 0)


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
    vllm = vllm_pair()
    endpoint = Endpoint(vllm.render())
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
    endpoint.answer = vllm.inc("vllm:generation_tokens", 999, engine=0).render()
    back = scrape.scrape()
    assert back.ok and back.error == "" and back.restarted == []
    assert back.since_ns == NOW_NS  # the increase spans the outage: from the last good scrape
    assert engine_values(back)["vllm"]["generation_tokens"] == 999
    assert agent_values(back)["engine_up"] == 1


def test_an_engine_back_from_an_outage_with_reset_counters_is_listed_as_restarted() -> None:
    vllm = vllm_deprecated()
    endpoint = Endpoint(vllm.render())
    scrape = scraper(endpoint)
    scrape.scrape()
    endpoint.answer = httpx.ConnectError("[Errno 111] Connection refused")
    scrape.scrape()
    endpoint.answer = vllm.restart().inc("vllm:generation_tokens_total", 77).render()
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
    text = tgi_router().render()

    def get(url: str, timeout: float) -> httpx.Response:
        seen.append((url, timeout))
        return httpx.Response(200, text=text, request=httpx.Request("GET", url))

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
        ("", "no vLLM, SGLang, TGI or llama.cpp metrics"),
        ("# TYPE node_load1 gauge\nnode_load1 0.42\n", "no vLLM, SGLang, TGI or llama.cpp metrics"),
    ],
)
def test_text_that_is_not_engine_metrics_fails_the_scrape(text: str, reason: str) -> None:
    endpoint = Endpoint(text)
    scrape = scraper(endpoint)
    result = scrape.scrape()

    assert not result.ok and reason in result.error
    assert agent_values(result)["engine_up"] == 0 and agent_values(result)["scrape_errors"] == 1
    endpoint.answer = sglang_server().render()
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

    vllm = vllm_pair()
    answers = [vllm.render()]
    vllm.inc("vllm:num_preemptions", 2, engine=0).set("vllm:kv_cache_usage_perc", 0.96, engine=1)
    answers.append(vllm.render())
    engine = EngineScraper(URL, fetch=lambda url, timeout_s: answers.pop(0))
    agent = GpuAgent(AgentConfig(node="n", engine_interval_s=0.01, gpu=False), scraper=engine)

    samples, events = agent.collect_once()
    assert answers == []
    assert {(s.engine, s.metric): s.value for s in samples}[("vllm", "preemptions")] == 2
    assert sorted((e.kind, e.engine, e.magnitude) for e in events) == [
        ("kv_high_water", "vllm/1", 0.96),  # still open: shown up to the last reading
        ("preemption", "vllm", 2),
    ]
