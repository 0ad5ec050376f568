"""A chat app on LangChain (``ChatOpenAI(...).stream``) instrumented by OpenLLMetry's LangChain and OpenAI
instrumentations together, as Traceloop's SDK turns them on: the LangChain spans are sent, the OpenAI ones under
them are suppressed. The app's OpenTelemetry providers export the spans over OTLP/HTTP to a collector (and keep a
copy, printed as JSON, for the test).

    $LANGCHAIN_VENV/bin/python tests/langchain/chat.py ENGINE_URL COLLECTOR_URL [CALLS [CLOSE_AFTER]]

Each stream is closed after CLOSE_AFTER chunks if given (0: read to its end), as one does when the user stops the
answer; then one call the engine refuses (no messages) is made. It runs in its own virtual environment
(tests/langchain/requirements.txt), without streamscope installed.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.genai_client import Exporting  # (the repository is not installed in this environment)


def main(engine_url: str, collector_url: str, calls: int = 2, close_after: int = 0) -> None:
    exporting = Exporting.to(collector_url, "chat-langchain")
    import openai
    from langchain_openai import ChatOpenAI
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    providers = {"tracer_provider": exporting.tracer_provider, "meter_provider": exporting.meter_provider}
    LangchainInstrumentor().instrument(**providers)
    OpenAIInstrumentor().instrument(**providers)
    model = ChatOpenAI(model="sim-llm", base_url=f"{engine_url}/v1", api_key="unused", max_tokens=40, max_retries=0,
                       stream_usage=True)  # fmt: skip
    received = []
    for call in range(calls):
        started = time.time_ns()
        arrivals = []
        stream = model.stream(f"say something, call {call}")
        for _ in stream:
            arrivals.append(time.time_ns())
            if len(arrivals) == close_after:
                stream.close()
                break
        received.append({"started_ns": started, "arrivals_ns": arrivals})
    with contextlib.suppress(openai.BadRequestError):  # no messages
        list(model.stream([]))
    print(json.dumps({"received": received, **exporting.finish()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:5]))
