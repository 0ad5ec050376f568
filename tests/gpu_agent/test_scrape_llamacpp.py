"""llama.cpp's /metrics and /slots into the agent's samples and events, from expositions written as its b11434 server
writes them (``engine_expositions.LlamaCppB11434``); tests/gpu_agent/test_llama_server.py reads a running one."""

from __future__ import annotations

import json

import httpx
import pytest

from streamscope_gpu_agent.events import EventDeriver
from streamscope_gpu_agent.scrape import EngineScraper
from streamscope_gpu_agent.slots import context_usage, slots_url
from tests.gpu_agent.engine_expositions import LlamaCppB11434
from tests.gpu_agent.scrapes import Endpoint, agent_values, engine_values

URL = "http://gpu-7:8080/metrics"
SLOTS = "http://gpu-7:8080/slots"
NOW_NS = 1_800_000_000_123_456_789
NO_SLOTS = httpx.HTTPStatusError(
    "HTTP 501 from http://gpu-7:8080/slots",
    request=httpx.Request("GET", SLOTS),
    response=httpx.Response(
        501, text='{"error":{"code":501,"message":"This server does not support slots endpoint."}}'
    ),
)


class Served:
    """A llama-server behind an ``Endpoint``: each ``scrape()`` serves what it has counted by then."""

    def __init__(self, llama: LlamaCppB11434) -> None:
        self.llama = llama
        self.endpoint = Endpoint("")
        self.scraper = EngineScraper(URL, fetch=self.endpoint, timeout_s=0.5, clock=lambda: NOW_NS)

    def scrape(self):
        self.endpoint.answer, self.endpoint.slots = self.llama.render(), self.llama.render_slots()
        return self.scraper.scrape()


def two_slots_some_hours_in() -> LlamaCppB11434:
    """``-np 2 -c 8192``: one stream decoding in slot 0, a long prompt computing in slot 1, one request deferred."""
    llama = LlamaCppB11434(slots=2, n_ctx=4096)
    for request in range(40):  # earlier requests: a system prompt of 300 tokens, reused from the second on
        cached = 300 if request else 0
        llama.start(0, cached=cached).decode({0: 360 - cached}).decode(generated={0: 1}).finish(0)
    llama.start(0, max_tokens=800).decode({0: 40})
    for _ in range(200):
        llama.decode(generated={0: 1})
    llama.start(1).decode({1: 2048}, {0: 1})
    return llama.defer(1)


def test_the_exposition_is_written_as_llama_server_writes_it() -> None:
    text = two_slots_some_hours_in().render()

    assert text.startswith(
        "# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens\n"
        "# TYPE llamacpp:prompt_tokens_total counter\n"
        f"llamacpp:prompt_tokens_total {360 + 39 * 60 + 40 + 2048}\n"
    )
    assert "\n# TYPE llamacpp:n_tokens_max counter\nllamacpp:n_tokens_max 2048\n" in text  # a maximum, typed counter
    assert "\nllamacpp:requests_deferred 1\n" in text and "_created" not in text
    assert "per_pos" not in text  # written once a speculative request has ended
    big = LlamaCppB11434()
    big.prompt_count = 1_234_567
    assert "\nllamacpp:prompt_tokens_total 1.23457e+06\n" in big.render()  # six significant digits


def test_first_scrape_reports_the_gauges_and_the_fullest_busy_slots_context() -> None:
    served = Served(two_slots_some_hours_in())
    result = served.scrape()

    assert result.ok and result.engines == ["llamacpp"] and result.restarted == []
    # slot 0 holds 40 + 201 tokens of 4096, slot 1 2,048
    assert engine_values(result) == {
        "llamacpp": {"requests_running": 2, "requests_waiting": 1, "context_usage": 2048 / 4096}
    }
    assert served.endpoint.calls == [(URL, 0.5), (SLOTS, 0.5)]
    assert agent_values(result) == {"scrape_duration_s": result.duration_s, "engine_up": 1, "scrape_errors": 0}


def test_increases_count_computed_and_cached_prompt_tokens_apart_and_drafts_when_a_request_ends() -> None:
    llama = two_slots_some_hours_in()
    served = Served(llama)
    served.scrape()
    llama.decode({1: 952}, {0: 1})  # the long prompt's rest, beside the stream's next token
    for _ in range(30):
        llama.decode(generated={0: 1, 1: 1})
    llama.finish(0, drafts=24, draft_tokens=96, accepted=(20, 14, 9, 5))  # 48 of 96 drafted tokens accepted
    llama.start(0, cached=2900).decode({0: 1})  # a prompt its slot held all but its last token of
    result = served.scrape()

    assert engine_values(result) == {
        "llamacpp": {
            "requests_running": 2,
            "requests_waiting": 1,
            "context_usage": (2048 + 952 + 30) / 4096,
            "prompt_tokens": 952 + 2900 + 1,
            "prompt_tokens_computed": 952 + 1,
            "prompt_tokens_cached": 2900,
            "generation_tokens": 1 + 200 + 1 + 30,  # slot 0's request, now it has ended; slot 1's is still going
            "steps": 32,
            "spec_draft_tokens": 96,
            "spec_accepted_tokens": 48,
            "spec_acceptance": 0.5,
            "spec_accept_length": 1 + 48 / 24,
        }
    }


def test_a_cached_prompt_makes_no_burst_and_a_computed_one_does() -> None:
    """``prompt_tokens`` leaves the cached tokens out: a 5,000-token prompt reused whole costs one token."""
    llama = LlamaCppB11434(slots=2, n_ctx=8192)
    served, deriver = Served(llama), EventDeriver()
    deriver.observe(served.scrape().samples, NOW_NS)
    found = []
    for cached, computed in [(0, 5000), (4999, 1), (0, 300)]:
        llama.start(0, cached=cached).decode({0: computed}).decode(generated={0: 1}).finish(0)
        events = deriver.observe(served.scrape().samples, NOW_NS - 250_000_000)
        found.append([(event.kind, event.magnitude) for event in events])

    assert found == [[("prefill_burst", 5000)], [], []]


def test_deferred_requests_make_a_queue_spike() -> None:
    llama = LlamaCppB11434(slots=4)
    served, deriver = Served(llama), EventDeriver()
    events = []
    for deferred in [0, 3, 9, 12, 5, 2, 0]:
        events += deriver.observe(served.scrape().samples, NOW_NS)
        llama.defer(deferred)
    events += deriver.observe(served.scrape().samples, NOW_NS)

    assert [(event.kind, event.magnitude) for event in events] == [("queue_spike", 12)]


def test_a_draft_collapse_makes_an_acceptance_drop() -> None:
    llama = LlamaCppB11434(slots=1, speculative=True)
    served, deriver = Served(llama), EventDeriver()
    deriver.observe(served.scrape().samples, NOW_NS)
    events, acceptance = [], []
    for accepted in [(30, 20, 10, 4), (8, 3, 1, 0), (6, 2, 0, 0), (28, 18, 12, 6)]:  # of 4 × 20 drafted tokens
        llama.start(0).decode({0: 20})
        for _ in range(40):
            llama.decode(generated={0: 1})
        llama.finish(0, drafts=20, draft_tokens=80, accepted=accepted)
        result = served.scrape()
        acceptance.append(engine_values(result)["llamacpp"]["spec_acceptance"])
        events += deriver.observe(result.samples, NOW_NS)

    assert acceptance == [64 / 80, 12 / 80, 8 / 80, 64 / 80]
    assert [(event.kind, event.magnitude) for event in events] == [("spec_acceptance_drop", 8 / 80)]


def test_past_a_million_a_ratio_of_few_drafts_is_left_unknown() -> None:
    """Six significant digits: from a million drafted tokens on, a total moves in steps of ten. Acceptance over 96
    drafted tokens could then be off by a fifth: not reported. Over 9,600 it is known well enough."""
    llama = LlamaCppB11434(slots=1, speculative=True)
    llama.n_draft_tokens, llama.n_draft_accepted, llama.n_draft_verif_steps = 1_234_567, 617_283, 308_641
    served = Served(llama)
    served.scrape()
    assert "\nllamacpp:spec_decode_num_draft_tokens_total 1.23457e+06\n" in served.endpoint.answer
    llama.start(0).decode({0: 10}).finish(0, drafts=24, draft_tokens=96, accepted=(20, 14, 9, 5))
    few = engine_values(served.scrape())["llamacpp"]
    llama.start(0).decode({0: 10}).finish(0, drafts=2400, draft_tokens=9600, accepted=(2000, 1400, 900, 500))
    many = served.scrape()

    assert abs(few["spec_draft_tokens"] - 96) <= 10  # read as written: off by a step at most
    assert "spec_acceptance" not in few
    assert few["spec_accept_length"] == 1 + 48 / 24  # accepted tokens and drafts, below a million, are exact
    values = engine_values(many)["llamacpp"]
    assert values["spec_acceptance"] == pytest.approx(0.5, abs=0.02)
    assert values["spec_accept_length"] == pytest.approx(3, abs=0.02)
    assert many.restarted == []  # rounding never makes a total go down


def test_a_restart_counts_from_zero_and_is_reported() -> None:
    llama = two_slots_some_hours_in()
    served = Served(llama)
    served.scrape()
    llama.restart().start(0).decode({0: 12})
    result = served.scrape()

    assert result.restarted == ["llamacpp"]
    values = engine_values(result)["llamacpp"]
    assert (values["prompt_tokens_computed"], values["steps"], values["requests_running"]) == (12, 1, 1)


def test_context_usage_is_unknown_while_slots_cannot_be_read_and_the_scrape_stands() -> None:
    llama = two_slots_some_hours_in()
    endpoint = Endpoint(llama.render(), slots=NO_SLOTS)  # a server run with --no-slots
    scrape = EngineScraper(URL, fetch=endpoint, clock=lambda: NOW_NS)
    without = scrape.scrape()
    assert without.ok and engine_values(without) == {"llamacpp": {"requests_running": 2, "requests_waiting": 1}}

    endpoint.slots = '{"error": "not the slots"}'
    assert "context_usage" not in engine_values(scrape.scrape())["llamacpp"]
    endpoint.slots = llama.render_slots()
    assert engine_values(scrape.scrape())["llamacpp"]["context_usage"] == 0.5


@pytest.mark.parametrize(
    ("slots", "usage"),
    [
        ([{"id": 0, "n_ctx": 4096, "speculative": False, "is_processing": False}], 0.0),  # never used
        # idle with its last request's 3,000 tokens kept for reuse: not in use
        ([{"id": 0, "n_ctx": 4096, "is_processing": False, "n_prompt_tokens": 3000}], 0.0),
        (
            [
                {"id": 0, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 256},
                {"id": 1, "n_ctx": 1024, "is_processing": True, "n_prompt_tokens": 1000},
            ],
            1000 / 1024,
        ),
    ],
)
def test_context_usage_is_the_fullest_busy_slot(slots: list[dict], usage: float) -> None:
    assert context_usage(json.dumps(slots)) == usage


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        "{}",
        '[{"id": 0, "n_ctx": 4096, "is_processing": true}]',
        '[{"n_ctx": 0, "is_processing": true, "n_prompt_tokens": 3}]',
    ],
)
def test_anything_but_llama_cpps_slots_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        context_usage(text)


@pytest.mark.parametrize(
    ("metrics", "slots"),
    [
        ("http://gpu-7:8080/metrics", "http://gpu-7:8080/slots"),
        ("https://proxy/models/llama/metrics?format=text", "https://proxy/models/llama/slots"),
    ],
)
def test_slots_are_read_beside_the_metrics(metrics: str, slots: str) -> None:
    assert slots_url(metrics) == slots
