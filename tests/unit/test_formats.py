from __future__ import annotations

from streamscope._internal.formats import OpenAIChat, estimate_tokens


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


def test_token_estimate_is_about_four_bytes():
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens("streaming tokens") == 4
