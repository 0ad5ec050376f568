"""A chat app whose calls go through LiteLLM (``litellm.completion``, what the LiteLLM proxy runs per request) with
its ``otel`` callback on, as its users turn it on: LiteLLM finds the app's OpenTelemetry providers and records each
call on them, and they export the spans and metrics over OTLP/HTTP to a collector (and keep a copy, printed as JSON,
for the test).

    $LITELLM_VENV/bin/python tests/litellm/chat.py ENGINE_URL COLLECTOR_URL [CALLS [CLOSE_AFTER]]

It runs in LiteLLM's own virtual environment (tests/litellm/requirements.txt), without streamscope installed.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from opentelemetry import metrics, trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.genai_client import Exporting, chat  # (the repository is not installed in this environment)


def through_litellm(client: Any) -> Any:
    """``client``'s chat completions, made by LiteLLM against the same base URL as an OpenAI-compatible provider."""
    import litellm

    def create(**request: Any) -> Any:
        model = request.pop("model")
        return litellm.completion(model=f"openai/{model}", api_base=str(client.base_url), api_key="unused", **request)

    return SimpleNamespace(chat=SimpleNamespace(completions=SimpleNamespace(create=create)))


def main(engine_url: str, collector_url: str, calls: int = 2, close_after: int | None = None) -> None:
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # its price list from the package: nothing to download
    exporting = Exporting.to(collector_url, "chat-litellm")
    trace.set_tracer_provider(exporting.tracer_provider)
    metrics.set_meter_provider(exporting.meter_provider)
    import litellm

    litellm.callbacks = ["otel"]
    received = chat(engine_url, calls, wrap=through_litellm, close_after=close_after)
    litellm.disable_streaming_logging = False
    print(json.dumps({"received": received, **exporting.finish()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:5]))
