"""An application streaming with the real ``openai`` client instrumented by ``streamscope.instrument_openai``, its
spans exported to a collector; it prints what it received as JSON.

    python -m tests.gateway.openai_client BASE_URL COLLECTOR_URL MAX_TOKENS [LEAVE_AFTER]

The instrumentation records with the global tracer provider, which a process sets once: hence a process of its own.
With ``LEAVE_AFTER``, the application closes the stream after that many chunks.
"""

from __future__ import annotations

import json
import sys

import openai

import streamscope


def main(base_url: str, collector_url: str, max_tokens: str, leave_after: str | None = None) -> None:
    provider = streamscope.setup("app", endpoint=collector_url)
    client = streamscope.instrument_openai(openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused"))
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Tell me about token streams."}],
        max_tokens=int(max_tokens),
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},  # exactly max_tokens, whatever the random weights say
    )
    received = []
    for chunk in stream:
        received.append(chunk.model_dump())
        if leave_after is not None and len(received) == int(leave_after):
            stream.close()
            break
    provider.shutdown()
    print(json.dumps(received))


if __name__ == "__main__":
    main(*sys.argv[1:5])
