"""The agent on a real llama-server: its samples and events follow the requests the test drives through the server.

Two slots; a stream decoding, a long prompt arriving beside it, and a third request while both slots are busy, which
the server defers. The agent runs its own loop (``GpuAgent``) against ``/metrics`` and ``/slots`` while they run;
every figure is then checked against what the server said of each request in its ``timings``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from streamscope_cli.llama.server import LlamaServer, ServerOptions
from streamscope_gpu_agent.agent import AgentConfig, GpuAgent
from streamscope_gpu_agent.events import Thresholds
from streamscope_gpu_agent.samples import Sample
from streamscope_gpu_agent.scrape import EngineScraper
from tests.gpu_agent.scrapes import engine_values
from tests.llama.conftest import BUILD_TIMEOUT_S
from tests.support import free_port, wait_until

pytestmark = pytest.mark.timeout(BUILD_TIMEOUT_S)

SLOT_CONTEXT = 4096
LONG_PROMPT = " ".join(f"line {n}: the quick brown fox jumps over the lazy dog." for n in range(70))
"""About 3,200 tokens in the tiny model's byte-level vocabulary."""
BURST = 1500
"""Fewer than the long prompt's tokens in any one interval, and far more than the short prompts'. The server
computes a prompt in batches of 2,048 tokens: the long one's may count in two intervals, the larger at least 1,500."""
WAIT_S = 120.0


@dataclass
class Stream:
    """One streamed chat completion, read on its own thread; ``log`` is shared, so chunk order across streams shows."""

    name: str
    prompt: str
    max_tokens: int
    log: list[str]
    chunks: int = 0
    timings: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    error: Exception | None = None

    def start(self, url: str) -> threading.Thread:
        thread = threading.Thread(target=self._read, args=(url,), name=f"stream-{self.name}", daemon=True)
        thread.start()
        return thread

    def _read(self, url: str) -> None:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", timeout=WAIT_S)
        try:
            for chunk in client.chat.completions.create(
                model="any",
                messages=[{"role": "user", "content": self.prompt}],
                max_tokens=self.max_tokens,
                stream=True,
                stream_options={"include_usage": True},
                extra_body={"ignore_eos": True},
            ):
                extra = chunk.model_extra or {}
                self.timings |= extra.get("timings") or {}
                if chunk.usage is not None:
                    self.usage = chunk.usage.model_dump()
                if chunk.choices and chunk.choices[0].delta.content:
                    self.chunks += 1
                    self.log.append(self.name)
        except Exception as exc:  # reported by the test, which cannot see this thread's exceptions
            self.error = exc


@pytest.fixture
def two_slots(llama_server_binary: Path, tiny_model: Path) -> Iterator[LlamaServer]:
    options = ServerOptions(tiny_model, parallel=2, context=2 * SLOT_CONTEXT)
    with LlamaServer(llama_server_binary, options) as server:
        yield server


def scrapes(agent: GpuAgent) -> int:
    return sum(sample.metric == "engine_up" for sample in list(agent.outbox.samples))


def busy_slots(url: str) -> int:
    return sum(slot["is_processing"] for slot in httpx.get(f"{url}/slots").raise_for_status().json())


def totals(samples: list[Sample], metric: str) -> float:
    return sum(sample.value for sample in samples if sample.metric == metric and sample.engine == "llamacpp")


def peak(samples: list[Sample], metric: str) -> float:
    return max(sample.value for sample in samples if sample.metric == metric and sample.engine == "llamacpp")


def test_samples_and_events_follow_a_long_prompt_beside_a_stream_and_a_deferred_request(
    two_slots: LlamaServer,
) -> None:
    url = two_slots.url
    thresholds = Thresholds(prefill_burst_tokens=BURST, queue_high=1, queue_low=0)
    config = AgentConfig(
        node="n", engine_url=f"{url}/metrics", engine_interval_s=0.02, gpu=False, thresholds=thresholds
    )
    agent = GpuAgent(config).start()
    log: list[str] = []
    decoding = Stream("decoding", "Tell me about token streams.", 1200, log)
    long = Stream("long", LONG_PROMPT, 400, log)
    deferred = Stream("deferred", "And about slots?", 40, log)
    try:
        threads = [decoding.start(url)]
        wait_until(lambda: decoding.chunks or decoding.error, "the first stream to decode", WAIT_S)
        long_sent_ns = time.time_ns()
        threads.append(long.start(url))
        wait_until(lambda: busy_slots(url) == 2 or long.error, "both slots to be busy", WAIT_S)
        threads.append(deferred.start(url))
        for thread in threads:
            thread.join(WAIT_S)
        assert not any(thread.is_alive() for thread in threads), "a stream did not end"
        # the second scrape to end from now on began after every request had ended: it counts all they did
        ended = scrapes(agent)
        wait_until(lambda: scrapes(agent) >= ended + 2, "two more scrapes", WAIT_S)
    finally:
        agent.stop()
    streams = (decoding, long, deferred)
    assert [stream.error for stream in streams] == [None, None, None]
    samples, events = list(agent.outbox.samples), list(agent.outbox.events)

    # the long prompt arrived while the first stream decoded: its chunks came before and after the long one's first
    first_long = log.index("long")
    assert "decoding" in log[:first_long] and "decoding" in log[first_long:]

    # every prompt token the server reported, counted once: computed apart from reused, by the agent's increases
    assert totals(samples, "prompt_tokens_computed") == sum(stream.timings["prompt_n"] for stream in streams)
    assert totals(samples, "prompt_tokens_cached") == sum(stream.timings["cache_n"] for stream in streams)
    assert totals(samples, "prompt_tokens") == sum(stream.usage["prompt_tokens"] for stream in streams)
    assert totals(samples, "generation_tokens") == sum(stream.timings["predicted_n"] for stream in streams)
    assert long.timings["prompt_n"] > 2 * BURST > 20 * decoding.timings["prompt_n"]

    # the third request waited for a slot while both were busy, and the agent saw it
    assert peak(samples, "requests_running") == 2
    assert peak(samples, "requests_waiting") == 1
    waiting_at = {sample.time_ns for sample in samples if sample.metric == "requests_waiting" and sample.value == 1}
    running_at = {sample.time_ns for sample in samples if sample.metric == "requests_running" and sample.value == 2}
    assert waiting_at <= running_at
    assert [(event.kind, event.magnitude) for event in events if event.kind == "queue_spike"] == [("queue_spike", 1)]

    # the long prompt made a prefill burst, after it was sent; nothing else did
    bursts = [event for event in events if event.kind == "prefill_burst"]
    assert bursts and all(event.magnitude >= BURST and event.end_ns > long_sent_ns for event in bursts)
    assert sum(event.magnitude for event in bursts) <= long.timings["prompt_n"]

    # its slot held the whole prompt while it ran
    assert peak(samples, "context_usage") >= long.usage["prompt_tokens"] / SLOT_CONTEXT
    assert not [event for event in events if event.kind == "engine_restart"]


def test_a_restarted_server_is_reported_and_counted_from_zero(
    llama_server_binary: Path,
    tiny_model: Path,
) -> None:
    options = ServerOptions(tiny_model, parallel=2, context=2 * SLOT_CONTEXT, port=free_port())
    log: list[str] = []
    with LlamaServer(llama_server_binary, options) as server:
        scraper = EngineScraper(f"{server.url}/metrics")
        scraper.scrape()
        before = Stream("before", "Tell me about token streams.", 64, log)
        before.start(server.url).join(WAIT_S)
        served = scraper.scrape()
    down = scraper.scrape()
    with LlamaServer(llama_server_binary, options) as server:
        after = Stream("after", "Short.", 8, log)
        after.start(server.url).join(WAIT_S)
        back = scraper.scrape()

    assert (before.error, after.error) == (None, None)
    assert engine_values(served)["llamacpp"]["generation_tokens"] == 64 and served.restarted == []
    assert not down.ok and "Connect" in down.error
    assert back.ok and back.restarted == ["llamacpp"]
    assert engine_values(back)["llamacpp"]["generation_tokens"] == after.timings["predicted_n"] == 8


def test_speculative_acceptance_is_the_drafts_the_request_reported(drafting_server: LlamaServer) -> None:
    scraper = EngineScraper(f"{drafting_server.url}/metrics")
    scraper.scrape()
    stream = Stream("drafted", "Tell me about token streams.", 24, [])
    stream.start(drafting_server.url).join(WAIT_S)
    values = engine_values(scraper.scrape())["llamacpp"]

    assert stream.error is None and stream.timings["draft_n"] > 0
    assert (values["spec_draft_tokens"], values["spec_accepted_tokens"]) == (
        stream.timings["draft_n"],
        stream.timings["draft_n_accepted"],
    )
    assert values["spec_acceptance"] == stream.timings["draft_n_accepted"] / stream.timings["draft_n"]
    assert values["spec_accept_length"] >= 1
