"""The NDJSON decoder and Ollama's stream format, on the wire's own shapes: lines cut anywhere by the reads, blank
lines, a last line without its newline; content, thinking, tool calls and the counts on the done line."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from streamscope.formats import Ollama
from streamscope.ndjson import NDJSONDecoder

LINES = [
    b'{"model":"m","message":{"role":"assistant","content":"Hel"},"done":false}\n',
    b"\n",  # a blank line: its byte counts toward the next line's
    b'{"model":"m","message":{"role":"assistant","content":"lo \xc3\xa9"},"done":false}\r\n',
    b'{"model":"m","message":{"role":"assistant","content":""},"done":true,"done_reason":"stop","eval_count":3}',
]
BODY = b"".join(LINES)


@given(st.lists(st.integers(min_value=1, max_value=len(BODY) - 1), unique=True).map(sorted))
def test_lines_and_their_wire_bytes_do_not_depend_on_where_the_reads_cut(cuts):
    decoder = NDJSONDecoder()
    pieces = [BODY[a:b] for a, b in zip([0, *cuts], [*cuts, len(BODY)], strict=True)]
    events = [event for piece in pieces for event in decoder.feed(piece)] + list(decoder.flush())
    assert [json.loads(e.data)["message"]["content"] for e in events] == ["Hel", "lo é", ""]
    assert [e.wire_bytes for e in events] == [len(LINES[0]), len(LINES[1]) + len(LINES[2]), len(LINES[3])]
    assert {e.event for e in events} == {"message"}


def test_the_ollama_format_reads_content_thinking_tool_calls_and_the_counts():
    chat = Ollama()
    assert chat.read("", {"model": "m", "message": {"content": "", "thinking": "hmm"}, "done": False}).text == "hmm"
    assert chat.read("", {"message": {"content": "Hi"}, "done": False}).answer == "Hi"
    call = {"function": {"name": "f", "arguments": {"x": 1}}}
    facts = chat.read("", {"message": {"content": "", "tool_calls": [call]}, "done": False})
    assert facts.tool_call and facts.arguments == '{"x":1}'
    end = chat.read("", {"message": {"content": ""}, "done": True, "done_reason": "stop", "prompt_eval_count": 5,
                         "eval_count": 9})  # fmt: skip
    assert end.done and chat.facts.finish_reasons == ["stop"]
    assert (chat.facts.input_tokens, chat.facts.output_tokens, chat.facts.response_model) == (5, 9, "m")

    generate = Ollama()
    assert generate.read("", {"response": " world", "done": False}).text == " world"
    failed = Ollama()
    assert failed.read("", {"error": "model 'x' not found"}).done and failed.facts.error_type == "error"
