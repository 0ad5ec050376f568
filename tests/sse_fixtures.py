"""The provider streams in ``tests/fixtures/sse/``, read independently of streamscope's decoder."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sse"

TOOL_CALL_FIXTURES = {
    "openai-chat": "openai_chat_tool_call",
    "openai-responses": "openai_responses_tool_call",
    "anthropic": "anthropic_tool_use",
}
"""Per stream format, a stream that writes some text and then calls a tool."""


@dataclass(frozen=True)
class WireEvent:
    raw: bytes
    """The event's bytes on the wire, its terminating blank line included."""
    event: str
    """The ``event:`` field, "message" when there is none (the SSE default)."""
    data: str

    @property
    def payload(self) -> Any:
        return None if self.data == "[DONE]" else json.loads(self.data)


def parse_events(body: bytes) -> list[WireEvent]:
    blocks = body.split(b"\n\n")
    assert blocks[-1] == b"", "a fixture ends with a blank line"
    events = []
    for block in blocks[:-1]:
        fields: dict[str, list[str]] = {}
        for line in block.decode().split("\n"):
            name, _, value = line.partition(": ")
            assert name in ("event", "data"), line
            fields.setdefault(name, []).append(value)
        events.append(WireEvent(block + b"\n\n", fields.get("event", ["message"])[0], "\n".join(fields["data"])))
    return events


@cache
def fixture_body(name: str) -> bytes:
    return (FIXTURES / f"{name}.sse").read_bytes()


def fixture_events(name: str) -> list[WireEvent]:
    return parse_events(fixture_body(name))


def carries_tool_call(stream_format: str, event: WireEvent) -> bool:
    """Whether an event starts a tool call or streams its arguments, read from the fields the providers document."""
    payload = event.payload
    if payload is None:
        return False
    if stream_format == "openai-chat":
        return any(choice["delta"].get("tool_calls") for choice in payload["choices"])
    kind = payload["type"]
    if stream_format == "openai-responses":
        starts = kind == "response.output_item.added" and payload["item"]["type"] == "function_call"
        return starts or kind == "response.function_call_arguments.delta"
    starts = kind == "content_block_start" and payload["content_block"]["type"] == "tool_use"
    return starts or (kind == "content_block_delta" and payload["delta"]["type"] == "input_json_delta")


def first_tool_call(stream_format: str, events: list[WireEvent]) -> int:
    return next(i for i, event in enumerate(events) if carries_tool_call(stream_format, event))


def first_call_arguments(stream_format: str, events: list[WireEvent]) -> list[tuple[int, str]]:
    """(event index, piece) of the first tool call's arguments, read from the fields the providers document."""
    pieces: list[tuple[int, str, int]] = []
    for index, event in enumerate(events):
        payload = event.payload
        if payload is None:
            continue
        if stream_format == "openai-chat":
            for choice in payload.get("choices") or []:
                for call in choice["delta"].get("tool_calls") or []:
                    if call.get("function", {}).get("arguments"):
                        pieces.append((index, call["function"]["arguments"], call["index"]))
        elif stream_format == "openai-responses":
            if payload["type"] == "response.function_call_arguments.delta":
                pieces.append((index, payload["delta"], payload["output_index"]))
        elif payload.get("type") == "content_block_delta" and payload["delta"]["type"] == "input_json_delta":
            pieces.append((index, payload["delta"]["partial_json"], payload["index"]))
    return [(index, piece) for index, piece, call in pieces if call == pieces[0][2]]
