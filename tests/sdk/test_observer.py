"""Malformed provider payloads never reach the application as exceptions."""

from __future__ import annotations

import logging

import pytest

from streamscope import StreamRecorder
from streamscope import semconv as sc
from streamscope._internal.observer import StreamObserver
from streamscope.formats import make_format
from tests.sse_fixtures import TOOL_CALL_FIXTURES, first_tool_call, fixture_events
from tests.support import int64s, memory_provider

ODD_PAYLOADS = {
    "openai-chat": [b'data: {"choices": 1}\n\n', b'data: {"choices": [{"delta": {"tool_calls": 5}}]}\n\n'],
    "openai-responses": [b'data: {"type": ["x"]}\n\n'],
    "anthropic": [b'event: content_block_delta\ndata: {"type": "content_block_delta", "delta": {"type": []}}\n\n'],
}


@pytest.mark.parametrize("name", sorted(ODD_PAYLOADS))
def test_odd_payloads_are_passed_through_and_counted_without_content(name, caplog):
    provider, exporter = memory_provider()
    observer = StreamObserver(
        StreamRecorder(side="client", provider="p", tracer_provider=provider).start(), make_format(name)
    )
    good = b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n' if name == "openai-chat" else b""
    events = []
    with caplog.at_level(logging.WARNING, logger="streamscope"):
        for body in [*ODD_PAYLOADS[name], good]:
            events += observer.on_bytes(body)
    observer.close("completed")
    assert len(events) == len(ODD_PAYLOADS[name]) + (1 if good else 0)
    (span,) = exporter.get_finished_spans()
    content = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])
    assert content == [0] * len(ODD_PAYLOADS[name]) + ([2] if good else [])
    assert caplog.text.count("unexpected") == 1  # logged once per stream


def test_usage_that_goes_down_never_gives_negative_tokens():
    reader = make_format("openai-chat")
    chunk = {"choices": [{"delta": {"content": "x"}}]}
    first = reader.read("", {**chunk, "usage": {"completion_tokens": 5}})
    second = reader.read("", {**chunk, "usage": {"completion_tokens": 3}})
    assert (first.exact_tokens, second.exact_tokens) == (5, 0)


@pytest.mark.parametrize("stream_format", sorted(TOOL_CALL_FIXTURES))
def test_the_span_says_which_chunk_started_the_tool_call(stream_format):
    provider, exporter = memory_provider()
    observer = StreamObserver(
        StreamRecorder(side="client", provider="p", tracer_provider=provider).start(), make_format(stream_format)
    )
    events = fixture_events(TOOL_CALL_FIXTURES[stream_format])
    for event in events:
        observer.on_bytes(event.raw)
    observer.close("completed")
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_FIRST_TOOL_CALL_CHUNK] == first_tool_call(stream_format, events)
