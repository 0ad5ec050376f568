"""What each provider's stream events mean: the content they carry, exact token counts where reported, and
the stream-level facts (response id and model, finish reasons, usage, errors).

One reader per wire format, each stateful for one stream. Payloads may be parsed JSON (raw SSE) or the
OpenAI SDK's typed objects; ``_get`` reads both, so the same reader serves both wrappers.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol


@dataclass(frozen=True, slots=True)
class EventFacts:
    text: str = ""
    """Generated content carried by this event (text, reasoning, tool-call arguments)."""
    exact_tokens: int | None = None
    """Tokens in this event when the provider reported them; None means estimate from the text."""
    done: bool = False
    """The provider's end-of-stream event."""
    tool_call: bool = False
    """The event carries part of a tool call (its start, name or arguments), so the pause before a tool call
    can be told from the pauses between tokens."""
    answer: str = ""
    """The part of ``text`` that is the answer itself (not reasoning, a refusal or tool-call arguments): the
    document, when the response format is JSON."""
    arguments: str = ""
    """The part of ``text`` that is tool-call arguments (JSON), of the call ``call_index``."""
    call_index: int = 0
    retracted_bytes: int = 0
    """Bytes of content already shown that the event withdraws, before its own ``text`` is appended."""
    retracted_tokens: int = 0


@dataclass
class StreamFacts:
    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    reasoning_tokens: int | None = None
    """Of ``output_tokens``, those spent reasoning (OpenAI's ``reasoning_tokens``)."""
    error_type: str | None = None


class StreamFormat(Protocol):
    provider: str
    facts: StreamFacts

    def read(self, event_type: str, payload: Any) -> EventFacts: ...


def _get(obj: Any, key: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(key)
    return getattr(obj, key, None)


def estimate_tokens(text: str) -> int:
    """About four bytes of UTF-8 per token: a documented estimate, marked as one on the span."""
    return max(1, round(len(text.encode()) / 4)) if text else 0


class OpenAIChat:
    """Chat Completions chunks (``chat.completion.chunk``), also served by vLLM, SGLang, TGI and llama.cpp, and the
    legacy Completions API's (``text_completion``: each choice's ``text``), which the same servers stream alike.

    Per-chunk tokens are exact when every chunk carries cumulative usage (vLLM's continuous usage stats) or lists
    its tokens' log probabilities (``logprobs: true``); a usage-only final chunk (``stream_options.include_usage``)
    gives exact totals only. A delta may withdraw
    content it showed before (speculative drafts a verifier rejected): ``"retract": {"bytes": N, "tokens": K}``
    takes the last N bytes (K tokens) back before the delta's own content is appended (as ``streamscope engine``
    streams drafts with ``output.show_drafts``).
    """

    provider = "openai"

    def __init__(self) -> None:
        self.facts = StreamFacts()
        self._completion_tokens = 0
        self._continuous = False  # usage seen on a content chunk: every later increase belongs to its chunk

    def read(self, event_type: str, payload: Any) -> EventFacts:
        if payload is None:  # [DONE]
            return EventFacts(done=True)
        facts = self.facts
        facts.response_id = _get(payload, "id") or facts.response_id
        facts.response_model = _get(payload, "model") or facts.response_model
        error = _get(payload, "error")
        if error:
            facts.error_type = str(_get(error, "type") or _get(error, "code") or "error")
            return EventFacts(done=True)
        parts: list[str] = []
        answer: list[str] = []
        arguments: list[str] = []
        call_index: int | None = None
        tool_call = False
        retracted = (0, 0)
        listed: int | None = None  # tokens the chunk's logprobs list
        for choice in _get(payload, "choices") or ():
            logprobs = _get(choice, "logprobs")
            for key in ("content", "refusal", "tokens"):  # Chat Completions' lists; the legacy Completions' tokens
                tokens = _get(logprobs, key)
                if isinstance(tokens, list):
                    listed = (listed or 0) + len(tokens)
            completion = _get(choice, "text")  # a text_completion choice: no delta
            if isinstance(completion, str):
                parts.append(completion)
                answer.append(completion)
            delta = _get(choice, "delta")
            retract = _get(delta, "retract")
            if retract is not None:  # rare: only streams that take text back carry it
                retracted = _retraction(retract) or retracted
            for key in ("content", "reasoning_content", "reasoning", "refusal"):
                value = _get(delta, key)
                if isinstance(value, str):
                    parts.append(value)
                    if key == "content":
                        answer.append(value)
            for call in _get(delta, "tool_calls") or ():
                tool_call = True
                part = _get(_get(call, "function"), "arguments")
                if isinstance(part, str):
                    parts.append(part)
                    index = _get(call, "index")
                    index = index if isinstance(index, int) else 0
                    call_index = index if call_index is None else call_index
                    if index == call_index:  # one event, one call's arguments
                        arguments.append(part)
            reason = _get(choice, "finish_reason")
            if reason:
                facts.finish_reasons.append(str(reason))
        text = "".join(parts)
        exact = listed if listed or not text else None  # text with an empty list: not a count
        usage = _get(payload, "usage")
        if usage is not None:
            facts.input_tokens = _get(usage, "prompt_tokens")
            facts.reasoning_tokens = _get(_get(usage, "completion_tokens_details"), "reasoning_tokens")
            total = _get(usage, "completion_tokens")
            if isinstance(total, int):
                facts.output_tokens = total
                self._continuous = self._continuous or bool(text)
                if self._continuous:
                    exact = max(0, total - self._completion_tokens)
                self._completion_tokens = max(total, self._completion_tokens)
        return EventFacts(
            text=text,
            exact_tokens=exact,
            tool_call=tool_call,
            answer="".join(answer),
            arguments="".join(arguments),
            call_index=call_index or 0,
            retracted_bytes=retracted[0],
            retracted_tokens=retracted[1],
        )


def _retraction(value: Any) -> tuple[int, int] | None:
    """``{"bytes": N, "tokens": K}`` as (N, K), when both are whole numbers of 0 or more and N is not 0."""
    size, tokens = _get(value, "bytes"), _get(value, "tokens") or 0
    whole = all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in (size, tokens))
    return (size, tokens) if whole and size else None


class OpenAIResponses:
    """Responses API events (``response.output_text.delta`` ... ``response.completed``)."""

    provider = "openai"
    _TOOL_CALL_DELTAS = frozenset({"response.function_call_arguments.delta", "response.custom_tool_call_input.delta"})
    _TOOL_CALL_ITEMS = frozenset({"function_call", "custom_tool_call"})
    """Output items whose arguments stream as ``_TOOL_CALL_DELTAS``; ``output_item.added`` starts them."""
    _DELTAS = (
        frozenset(
            {
                "response.output_text.delta",
                "response.refusal.delta",
                "response.reasoning_text.delta",
                "response.reasoning_summary_text.delta",
            }
        )
        | _TOOL_CALL_DELTAS
    )
    _ENDS = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def __init__(self) -> None:
        self.facts = StreamFacts()

    def read(self, event_type: str, payload: Any) -> EventFacts:
        kind = _get(payload, "type") or event_type
        facts = self.facts
        if kind in self._DELTAS:
            delta = _get(payload, "delta")
            text = delta if isinstance(delta, str) else ""
            if kind in self._TOOL_CALL_DELTAS:
                index = _get(payload, "output_index")
                return EventFacts(
                    text, tool_call=True, arguments=text, call_index=index if isinstance(index, int) else 0
                )
            return EventFacts(text, answer=text if kind == "response.output_text.delta" else "")
        if kind == "response.output_item.added":
            return EventFacts(tool_call=_get(_get(payload, "item"), "type") in self._TOOL_CALL_ITEMS)
        response = _get(payload, "response")
        if response is not None:
            facts.response_id = _get(response, "id") or facts.response_id
            facts.response_model = _get(response, "model") or facts.response_model
        if kind in self._ENDS:
            usage = _get(response, "usage")
            facts.input_tokens = _get(usage, "input_tokens")
            facts.output_tokens = _get(usage, "output_tokens")
            facts.reasoning_tokens = _get(_get(usage, "output_tokens_details"), "reasoning_tokens")
            reason = _get(_get(response, "incomplete_details"), "reason")
            facts.finish_reasons.append(str(reason or _get(response, "status") or kind.rsplit(".", 1)[1]))
            if kind == "response.failed":
                facts.error_type = str(_get(_get(response, "error"), "code") or "response_failed")
            return EventFacts(done=True)
        if kind == "error":
            facts.error_type = str(_get(payload, "code") or "error")
            return EventFacts(done=True)
        return EventFacts()


class AnthropicMessages:
    """Messages API stream: message_start, content_block_start/delta/stop, message_delta, message_stop, ping."""

    provider = "anthropic"
    _DELTA_FIELDS: ClassVar[dict[str, str]] = {
        "text_delta": "text",
        "thinking_delta": "thinking",
        "input_json_delta": "partial_json",
    }
    _TOOL_USE_BLOCKS = frozenset({"tool_use", "server_tool_use"})
    """Content blocks whose input streams as ``input_json_delta``; ``content_block_start`` starts them."""

    def __init__(self) -> None:
        self.facts = StreamFacts()

    def read(self, event_type: str, payload: Any) -> EventFacts:
        kind = _get(payload, "type") or event_type
        facts = self.facts
        if kind == "content_block_delta":
            delta = _get(payload, "delta")
            delta_type = _get(delta, "type")
            value = _get(delta, self._DELTA_FIELDS.get(delta_type, ""))
            text = value if isinstance(value, str) else ""
            if delta_type == "input_json_delta":
                index = _get(payload, "index")
                return EventFacts(
                    text, tool_call=True, arguments=text, call_index=index if isinstance(index, int) else 0
                )
            return EventFacts(text, answer=text if delta_type == "text_delta" else "")
        if kind == "content_block_start":
            return EventFacts(tool_call=_get(_get(payload, "content_block"), "type") in self._TOOL_USE_BLOCKS)
        if kind == "message_start":
            message = _get(payload, "message")
            facts.response_id = _get(message, "id")
            facts.response_model = _get(message, "model")
            facts.input_tokens = _get(_get(message, "usage"), "input_tokens")
        elif kind == "message_delta":
            reason = _get(_get(payload, "delta"), "stop_reason")
            if reason:
                facts.finish_reasons.append(str(reason))
            output = _get(_get(payload, "usage"), "output_tokens")
            if isinstance(output, int):
                facts.output_tokens = output
        elif kind == "message_stop":
            return EventFacts(done=True)
        elif kind == "error":
            facts.error_type = str(_get(_get(payload, "error"), "type") or "error")
            return EventFacts(done=True)
        return EventFacts()


class Ollama:
    """Ollama's native streams, one JSON document a line: ``/api/chat`` (``message.content``, and
    ``message.thinking`` for reasoning) and ``/api/generate`` (``response``, ``thinking``). The last line says
    ``done`` with the reason and the counts (``eval_count``: tokens generated; ``prompt_eval_count``)."""

    provider = "ollama"

    def __init__(self) -> None:
        self.facts = StreamFacts()

    def read(self, event_type: str, payload: Any) -> EventFacts:
        facts = self.facts
        error = _get(payload, "error")
        if error:
            facts.error_type = "error"
            return EventFacts(done=True)
        model = _get(payload, "model")
        if isinstance(model, str) and model:
            facts.response_model = model
        message = _get(payload, "message")
        answer = _get(message, "content") if message is not None else _get(payload, "response")
        thinking = _get(message, "thinking") if message is not None else _get(payload, "thinking")
        answer = answer if isinstance(answer, str) else ""
        text = (thinking if isinstance(thinking, str) else "") + answer
        calls = _get(message, "tool_calls")
        if calls:
            arguments = _get(_get(calls[0], "function"), "arguments")
            encoded = json.dumps(arguments, separators=(",", ":")) if arguments is not None else ""
            return EventFacts(text + encoded, tool_call=True, arguments=encoded, answer=answer)
        if not _get(payload, "done"):
            return EventFacts(text, answer=answer)
        reason = _get(payload, "done_reason")
        facts.finish_reasons.append(str(reason) if reason else "stop")
        for name, count in (("input_tokens", "prompt_eval_count"), ("output_tokens", "eval_count")):
            value = _get(payload, count)
            if isinstance(value, int):
                setattr(facts, name, value)
        return EventFacts(text, answer=answer, done=True)


class OpenAIRealtime:
    """OpenAI's Realtime API, server events over a WebSocket, one JSON message each: a response's text arrives as
    ``response.output_text.delta`` (``response.text.delta`` before GA) and the transcript of its audio as
    ``response.output_audio_transcript.delta`` (``response.audio_transcript.delta``), each ``delta`` the piece;
    audio deltas carry no text (their bytes count on the wire, as an aside); ``response.done`` ends the response
    with its status and usage."""

    provider = "openai"
    _TEXT: ClassVar[frozenset[str]] = frozenset({"response.output_text.delta", "response.text.delta"})
    _TRANSCRIPT: ClassVar[frozenset[str]] = frozenset(
        {"response.output_audio_transcript.delta", "response.audio_transcript.delta"}
    )
    _ARGUMENTS = "response.function_call_arguments.delta"

    def __init__(self) -> None:
        self.facts = StreamFacts()

    def read(self, event_type: str, payload: Any) -> EventFacts:
        kind = _get(payload, "type") or event_type
        facts = self.facts
        if kind in self._TEXT or kind in self._TRANSCRIPT or kind == self._ARGUMENTS:
            delta = _get(payload, "delta")
            text = delta if isinstance(delta, str) else ""
            if kind == self._ARGUMENTS:
                return EventFacts(text, tool_call=True, arguments=text)
            return EventFacts(text, answer=text if kind in self._TEXT else "")
        response = _get(payload, "response")
        if response is not None:
            facts.response_id = _get(response, "id") or facts.response_id
        if kind == "response.done":
            status = _get(response, "status")
            facts.finish_reasons.append(str(status or "completed"))
            usage = _get(response, "usage")
            facts.input_tokens = _get(usage, "input_tokens")
            facts.output_tokens = _get(usage, "output_tokens")
            if status == "failed":
                facts.error_type = str(_get(_get(_get(response, "status_details"), "error"), "type") or "failed")
            return EventFacts(done=True)
        if kind == "error":
            facts.error_type = str(_get(_get(payload, "error"), "type") or "error")
            return EventFacts(done=True)
        return EventFacts()


Carried = Callable[[Any], EventFacts]
"""A message as it arrived (a WebSocket message's str or bytes, a gRPC message) -> what it carried."""


class MessageFormat:
    """A user's function as a stream format, for protocols with no format of their own: a message in, its facts
    out (its text; ``done`` on the last one)."""

    def __init__(self, carried: Carried, provider: str) -> None:
        self.carried = carried
        self.provider = provider
        self.facts = StreamFacts()

    def read(self, event_type: str, payload: Any) -> EventFacts:
        return self.carried(payload)


FORMATS: dict[
    str, type[OpenAIChat] | type[OpenAIResponses] | type[AnthropicMessages] | type[Ollama] | type[OpenAIRealtime]
] = {
    "openai-chat": OpenAIChat,
    "openai-responses": OpenAIResponses,
    "anthropic": AnthropicMessages,
    "ollama": Ollama,
    "openai-realtime": OpenAIRealtime,
}
FRAMINGS = {"ollama": "ndjson"}
"""How a format's events are framed on the wire where it is not SSE."""


def json_answer_requested(body: Any) -> bool:
    """Whether a request body asks for the answer as JSON: Chat Completions' ``response_format``, or the
    Responses API's ``text.format``, of type ``json_object`` or ``json_schema``."""
    requested = _get(body, "response_format") or _get(_get(body, "text"), "format")
    return _get(requested, "type") in ("json_object", "json_schema")


def make_format(name: str) -> StreamFormat:
    try:
        return FORMATS[name]()
    except KeyError:
        raise ValueError(f"unknown stream format {name!r}: use one of {', '.join(FORMATS)}") from None
