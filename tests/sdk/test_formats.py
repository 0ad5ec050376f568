from __future__ import annotations

import pytest
from openai._models import construct_type
from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent

from streamscope.formats import OpenAIChat, estimate_tokens, make_format
from tests.sse_fixtures import TOOL_CALL_FIXTURES, carries_tool_call, fixture_events


def chat_chunk(text: str | None, usage: int | None = None, finish: str | None = None, choices: bool = True) -> dict:
    chunk: dict = {"id": "c1", "model": "m"}
    delta = {"content": text} if text else {}
    chunk["choices"] = [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else []
    if usage is not None:
        chunk["usage"] = {"prompt_tokens": 9, "completion_tokens": usage}
    return chunk


def test_continuous_usage_gives_exact_tokens_per_chunk_including_a_textless_finish():
    reader = OpenAIChat()
    exact = [
        reader.read("", chat_chunk("Hel", usage=1)).exact_tokens,
        reader.read("", chat_chunk("lo there", usage=3)).exact_tokens,
        reader.read("", chat_chunk(None, usage=4, finish="stop")).exact_tokens,  # the end token has no text
    ]
    assert exact == [1, 2, 1]
    assert (reader.facts.output_tokens, reader.facts.input_tokens, reader.facts.finish_reasons) == (4, 9, ["stop"])


def test_a_final_usage_chunk_gives_totals_not_per_chunk_tokens():
    reader = OpenAIChat()
    facts = [reader.read("", chat_chunk("Hello")), reader.read("", chat_chunk(None, usage=2, choices=False))]
    assert [f.exact_tokens for f in facts] == [None, None]
    assert reader.facts.output_tokens == 2


def test_logprobs_count_each_chunks_tokens():
    """A chunk that lists its tokens' log probabilities (``logprobs: true``) says how many tokens it carries:
    Chat Completions' ``content`` list, the legacy Completions' ``tokens``; a chunk with text and no list is
    estimated as before."""
    chat = OpenAIChat()
    listed = {"content": [{"token": "to", "logprob": -0.1}, {"token": "ken", "logprob": -0.2}]}
    chunk = {"id": "c1", "model": "m", "choices": [{"index": 0, "delta": {"content": "token"}, "logprobs": listed}]}
    assert chat.read("", chunk).exact_tokens == 2
    assert chat.read("", chat_chunk("streaming tokens")).exact_tokens is None
    legacy_logprobs = {"tokens": [" a", " b"], "token_logprobs": [-1, -2]}
    legacy = {"id": "c2", "object": "text_completion", "model": "m",
              "choices": [{"index": 0, "text": " a b", "logprobs": legacy_logprobs}]}  # fmt: skip
    assert OpenAIChat().read("", legacy).exact_tokens == 2
    typed = construct_type(type_=ChatCompletionChunk, value=chunk)  # the openai client's objects alike
    assert OpenAIChat().read("", typed).exact_tokens == 2


def test_reasoning_tokens_in_the_total_are_told():
    """A reasoning model's total counts tokens it spent reasoning, which the stream may never show: the format
    reports how many (Chat Completions' and Responses' details), so the total is not taken for the chunks'."""
    chat = OpenAIChat()
    usage = {"prompt_tokens": 9, "completion_tokens": 40, "completion_tokens_details": {"reasoning_tokens": 32}}
    chat.read("", chat_chunk("Hello"))
    chat.read("", {"id": "c1", "model": "m", "choices": [], "usage": usage})
    assert (chat.facts.output_tokens, chat.facts.reasoning_tokens) == (40, 32)
    responses = make_format("openai-responses")
    done = {"type": "response.completed", "response": {"id": "r", "model": "m", "status": "completed", "usage": {
        "input_tokens": 9, "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 4}}}}  # fmt: skip
    responses.read("response.completed", construct_type(type_=ResponseStreamEvent, value=done))
    assert (responses.facts.output_tokens, responses.facts.reasoning_tokens) == (12, 4)
    plain = OpenAIChat()
    plain.read("", chat_chunk(None, usage=2, choices=False))
    assert plain.facts.reasoning_tokens is None


def test_token_estimate_is_about_four_bytes():
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("streaming tokens") == 4


@pytest.mark.parametrize("stream_format", sorted(TOOL_CALL_FIXTURES))
def test_tool_call_events_are_marked(stream_format):
    events = fixture_events(TOOL_CALL_FIXTURES[stream_format])
    reader = make_format(stream_format)
    marked = [reader.read(e.event, e.payload).tool_call for e in events]
    assert marked == [carries_tool_call(stream_format, e) for e in events]
    assert any(marked) and not marked[0]  # the fixtures write text before they call the tool


@pytest.mark.parametrize(
    ("stream_format", "name"),
    [("openai-chat", "openai_chat"), ("openai-responses", "openai_responses"), ("anthropic", "anthropic_messages")],
)
def test_text_only_streams_mark_no_tool_call(stream_format, name):
    reader = make_format(stream_format)
    assert not any(reader.read(e.event, e.payload).tool_call for e in fixture_events(name))


SDK_TYPES = {"openai-chat": ChatCompletionChunk, "openai-responses": ResponseStreamEvent}


@pytest.mark.parametrize("stream_format", sorted(SDK_TYPES))
def test_the_openai_sdk_objects_mark_the_same_events(stream_format):
    """instrument_openai hands the reader the SDK's typed objects, built as the SDK builds stream events."""
    events = [e for e in fixture_events(TOOL_CALL_FIXTURES[stream_format]) if e.payload is not None]
    reader = make_format(stream_format)
    typed = [construct_type(type_=SDK_TYPES[stream_format], value=e.payload) for e in events]
    marked = [reader.read(e.event, item).tool_call for e, item in zip(events, typed)]
    assert marked == [carries_tool_call(stream_format, e) for e in events]


@pytest.mark.parametrize(
    ("retract", "expected"),
    [
        ({"bytes": 9, "tokens": 2}, (9, 2)),
        ({"bytes": 9}, (9, 0)),
        ({"bytes": 0, "tokens": 2}, (0, 0)),
        ({"bytes": -3, "tokens": 1}, (0, 0)),
        ({"bytes": "9"}, (0, 0)),
        (True, (0, 0)),
    ],
)
def test_a_chat_delta_may_withdraw_what_was_shown(retract, expected):
    facts = make_format("openai-chat").read("", {"choices": [{"delta": {"content": "x", "retract": retract}}]})
    assert (facts.retracted_bytes, facts.retracted_tokens) == expected
    assert facts.text == "x"
