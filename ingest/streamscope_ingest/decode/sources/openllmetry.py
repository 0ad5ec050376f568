"""OpenLLMetry (Traceloop's ``opentelemetry-instrumentation-openai``): a streamed call's span carries one
``gen_ai.content.completion.chunk`` event per chunk the client received, stamped as it arrived, without its size.

So each chunk's arrival is known (``arrivals``), not what it carried. The first event is the first chunk of any
kind: OpenAI-compatible servers (vLLM, SGLang, llama.cpp) send a role-only chunk before prefill ends, so the first
arrival is the first byte, and which arrival brought the first token is unknown (the time to it is stored
unknown, never the first byte's); the gaps between tokens are those after the first arrival.
Non-streamed calls have no chunks and are not streams. The span has no server.address; the base URL
(``gen_ai.openai.api_base``) gives it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_ARRIVALS, Foreign, event_times, kept

SOURCE = "openllmetry"
SCOPES = ("opentelemetry.instrumentation.openai.",)
CHUNK_EVENT = "gen_ai.content.completion.chunk"
SPAN_NAMES = frozenset({"openai.chat", "openai.completion"})
_RENAMES = {"gen_ai.system": sc.GEN_AI_PROVIDER_NAME}  # releases before the provider.name convention
FIRST_ARRIVAL_NOTE = (
    f"its {CHUNK_EVENT} events say when each chunk arrived, not what it carried: the first arrival (a role-only chunk "
    "from OpenAI-compatible servers) is stored as the first byte; the time to the first token is unknown"
)


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or span.name not in SPAN_NAMES:
        return None
    if not (attributes.get("gen_ai.is_streaming") or attributes.get("llm.is_streaming")):
        return None
    values = kept(attributes, _RENAMES)
    base = urlsplit(str(attributes.get("gen_ai.openai.api_base", "")))
    if base.hostname and sc.SERVER_ADDRESS not in values:
        values[sc.SERVER_ADDRESS] = base.hostname
        port = base.port or {"https": 443, "http": 80}.get(base.scheme)
        if port:
            values[sc.SERVER_PORT] = port
    arrivals = event_times(span, CHUNK_EVENT)
    notes = (FIRST_ARRIVAL_NOTE,) if len(arrivals) else ()
    return Foreign(SOURCE, COVERAGE_ARRIVALS, arrivals_ns=arrivals, attributes=values, notes=notes)
