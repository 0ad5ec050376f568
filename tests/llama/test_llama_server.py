"""llama.cpp's real llama-server, built from source, streaming through the real openai client.

What the rest of streamscope reads from it is checked here against the running server: the OpenAI stream's shape,
the ``timings`` of its final chunk, the ``llamacpp:`` names on /metrics, /slots, and speculative decoding's counts.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
from openai.types.chat import ChatCompletionChunk

import streamscope
from streamscope import semconv as sc
from streamscope_cli.llama.server import LlamaServer
from tests.support import int64s, memory_provider

TIMINGS = {
    "cache_n",
    "prompt_n",
    "prompt_ms",
    "prompt_per_token_ms",
    "prompt_per_second",
    "predicted_n",
    "predicted_ms",
    "predicted_per_token_ms",
    "predicted_per_second",
}
METRICS = {
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
}


def stream(server: LlamaServer, max_tokens: int) -> list[ChatCompletionChunk]:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused")
    chunks = client.chat.completions.create(
        model="any",
        messages=[{"role": "user", "content": "Tell me about token streams."}],
        max_tokens=max_tokens,
        stream=True,
        extra_body={"ignore_eos": True},  # exactly max_tokens, whatever the random weights say
    )
    return list(chunks)


def timings(chunk: ChatCompletionChunk) -> dict[str, Any]:
    extra = chunk.model_extra or {}
    return dict(extra.get("timings") or {})


def scrape(server: LlamaServer) -> dict[str, float]:
    text = httpx.get(f"{server.url}/metrics").raise_for_status().text
    samples = (line.split(" ") for line in text.splitlines() if line and not line.startswith("#"))
    return {name: float(value) for name, value in samples}


def test_a_stream_opens_with_the_role_and_closes_with_timings(tiny_server: LlamaServer) -> None:
    chunks = stream(tiny_server, max_tokens=24)

    first, *middle, final = chunks
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content is None
    contents = [chunk.choices[0].delta.content for chunk in middle]
    assert contents and all(contents), "every chunk between the first and the last carries text"
    assert final.choices[0].finish_reason == "length"
    assert set(timings(final)) == TIMINGS
    assert timings(final)["predicted_n"] == 24
    assert not any(timings(chunk) for chunk in chunks[:-1]), "only the final chunk carries timings"


def test_metrics_count_what_was_streamed_under_llamacpp_names(tiny_server: LlamaServer) -> None:
    stream(tiny_server, max_tokens=16)
    stream(tiny_server, max_tokens=16)

    metrics = scrape(tiny_server)
    assert set(metrics) >= METRICS
    assert metrics["llamacpp:tokens_predicted_total"] == 32
    assert metrics["llamacpp:requests_processing"] == 0


def test_slots_lists_each_parallel_slot(tiny_server: LlamaServer) -> None:
    slots = httpx.get(f"{tiny_server.url}/slots").raise_for_status().json()
    assert [slot["id"] for slot in slots] == [0, 1]
    assert all(slot["n_ctx"] == 1024 and slot["is_processing"] is False for slot in slots)


def test_a_draft_model_speculates_and_its_drafts_are_counted(drafting_server: LlamaServer) -> None:
    slots = httpx.get(f"{drafting_server.url}/slots").raise_for_status().json()
    assert [slot["speculative"] for slot in slots] == [True]

    final = stream(drafting_server, max_tokens=24)[-1]

    drafted = timings(final)
    assert drafted["predicted_n"] == 24
    assert drafted["draft_n"] > 0 and 0 <= drafted["draft_n_accepted"] <= drafted["draft_n"]
    metrics = scrape(drafting_server)
    assert metrics["llamacpp:spec_decode_num_draft_tokens_total"] == drafted["draft_n"]
    assert metrics["llamacpp:spec_decode_num_accepted_tokens_total"] == drafted["draft_n_accepted"]
    assert metrics["llamacpp:spec_decode_num_drafts_total"] > 0


def test_a_stream_asked_for_logprobs_counts_each_chunks_tokens(tiny_server: LlamaServer) -> None:
    """With ``logprobs`` on, each chunk lists the tokens it carries: the SDK counts them, chunk by chunk, instead
    of estimating them from bytes, and their sum is the usage the server reports at the end."""
    provider, exporter = memory_provider()
    body = {
        "model": "any",
        "messages": [{"role": "user", "content": "Tell me about token streams."}],
        "max_tokens": 24,
        "stream": True,
        "logprobs": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    with (
        httpx.Client(timeout=60) as client,
        streamscope.stream_sse(
            client, "POST", f"{tiny_server.url}/v1/chat/completions", format="openai-chat", json=body,
            tracer_provider=provider,
        ) as events,
    ):  # fmt: skip
        seen = list(events)
    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    tokens = int64s(attributes[sc.STREAMSCOPE_CHUNKS_TOKENS])
    assert sc.STREAMSCOPE_TOKENS_ESTIMATED not in attributes
    assert sum(tokens) == attributes[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 24
    listed = [len((choice.get("logprobs") or {}).get("content") or []) for event in seen if event.payload
              for choice in event.payload.get("choices") or [{}]]  # fmt: skip
    assert [t for t in tokens if t] == [n for n in listed if n]
