"""A chat app that instruments its ``openai`` calls with opentelemetry-util-genai's own API, as instrumentations
built on it do: each streamed call is an inference invocation that is told of every chunk as it arrives
(``record_stream_chunk``), and of the finish reason and usage at the end. The app's OpenTelemetry providers export
the spans over OTLP/HTTP to a collector (and keep a copy, printed as JSON, for the test).

    $UTIL_GENAI_VENV/bin/python tests/util_genai/chat.py ENGINE_URL COLLECTOR_URL [CALLS]

It runs in its own virtual environment (tests/util_genai/requirements.txt), without streamscope installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.util.genai.handler import TelemetryHandler

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.genai_client import Exporting, chat  # (the repository is not installed in this environment)


class Invoked:
    """An ``openai`` stream inside its inference invocation: each chunk recorded as it is read, the invocation
    stopped at the stream's end or when the app closes it."""

    def __init__(self, stream: Any, invocation: Any) -> None:
        self._stream, self._invocation = stream, invocation

    def __iter__(self) -> Invoked:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._stream)
        except StopIteration:
            self._invocation.stop()
            raise
        self._invocation.record_stream_chunk()
        if chunk.choices and chunk.choices[0].finish_reason:
            self._invocation.finish_reasons = [chunk.choices[0].finish_reason]
        if chunk.usage:
            self._invocation.input_tokens = chunk.usage.prompt_tokens
            self._invocation.output_tokens = chunk.usage.completion_tokens
        self._invocation.response_model_name = chunk.model
        return chunk

    def __enter__(self) -> Invoked:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stream.close()
        self._invocation.stop()  # once stopped, a second stop does nothing


def instrumented(client: Any, handler: TelemetryHandler) -> Any:
    """``client`` whose chat completions run inside util-genai inference invocations."""
    address = urlsplit(str(client.base_url))

    def create(**request: Any) -> Invoked:
        invocation = handler.inference(
            "openai", request_model=request["model"], server_address=address.hostname, server_port=address.port
        )
        try:
            return Invoked(client.chat.completions.create(**request), invocation)
        except Exception as exc:
            invocation.fail(exc)
            raise

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def main(engine_url: str, collector_url: str, calls: int = 2) -> None:
    exporting = Exporting.to(collector_url, "chat-util-genai")
    handler = TelemetryHandler(tracer_provider=exporting.tracer_provider, meter_provider=exporting.meter_provider)
    received = chat(engine_url, calls, wrap=lambda client: instrumented(client, handler))
    print(json.dumps({"received": received, **exporting.finish()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:4]))
