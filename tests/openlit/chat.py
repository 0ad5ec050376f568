"""A chat app instrumented by OpenLIT, as its users run it: ``openlit.init()`` instruments the real ``openai``
client, whose streamed calls go to an engine; the app's own OpenTelemetry providers, which OpenLIT finds and uses,
export the spans and metrics over OTLP/HTTP to a collector (and keep a copy, printed as JSON, for the test).

    $OPENLIT_VENV/bin/python tests/openlit/chat.py ENGINE_URL COLLECTOR_URL PRICING_JSON [CALLS]

It runs in OpenLIT's own virtual environment (tests/openlit/requirements.txt), without streamscope installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from opentelemetry import metrics, trace

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.genai_client import Exporting, chat  # (the repository is not installed in this environment)


def main(engine_url: str, collector_url: str, pricing_json: str, calls: int = 2) -> None:
    exporting = Exporting.to(collector_url, "chat-openlit")
    trace.set_tracer_provider(exporting.tracer_provider)
    metrics.set_meter_provider(exporting.meter_provider)
    import openlit

    openlit.init(pricing_json=pricing_json)  # a local price list: no download at start
    received = chat(engine_url, calls)
    print(json.dumps({"received": received, **exporting.finish()}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], *(int(a) for a in sys.argv[4:5]))
