"""vLLM's own request spans (``--otlp-traces-endpoint``): one ``llm_request`` span per request, kind SERVER, timed
by the engine's front end from the request's arrival to its last token, continuing the caller's ``traceparent``.

It is the server side of the caller's stream, known by its time to the first token (``first_token``): vLLM's
``gen_ai.latency.time_to_first_token``, from the arrival to the first token (queue and prefill included). vLLM
records no chunk times, nor whether the answer was streamed. Its time in the queue, in prefill and in decode stay
among the span's attributes under vLLM's names; its token counts and request id are renamed to the current ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_FIRST_TOKEN, Foreign, kept, measured_us

SOURCE = "vllm"
SCOPES = ("vllm.",)
"""vLLM's tracers: ``vllm.tracing.otel`` in current releases, ``vllm.llm_engine`` in older ones."""
SPAN_NAME = "llm_request"
TIME_TO_FIRST_TOKEN_S = "gen_ai.latency.time_to_first_token"
_RENAMES = {
    "gen_ai.usage.prompt_tokens": sc.GEN_AI_USAGE_INPUT_TOKENS,
    "gen_ai.usage.completion_tokens": sc.GEN_AI_USAGE_OUTPUT_TOKENS,
    "gen_ai.request.id": sc.STREAMSCOPE_ENGINE_REQUEST_ID,
}


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or span.name != SPAN_NAME or span.kind != Span.SPAN_KIND_SERVER:
        return None
    ttft_us = measured_us(attributes.get(TIME_TO_FIRST_TOKEN_S), 1e6)
    return Foreign(SOURCE, COVERAGE_FIRST_TOKEN, side="server", ttft_us=ttft_us, attributes=kept(attributes, _RENAMES))
