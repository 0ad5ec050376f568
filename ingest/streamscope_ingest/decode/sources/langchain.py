"""OpenLLMetry's LangChain instrumentation (``opentelemetry-instrumentation-langchain``, which Traceloop's SDK turns
on beside its OpenAI one and which then suppresses the OpenAI spans): a ``{Model}.chat`` span per call to a chat
model (``ChatOpenAI.chat``), scope ``opentelemetry.instrumentation.langchain``, with the GenAI attributes; chains,
tools and agents get spans of their own, which are not calls to a model and are not read.

A call is known by its duration (``duration``): the span starts when the model is called and ends with its last
chunk. It carries no chunk events, no time to the first token, and nothing that says whether the answer was
streamed (``model.stream`` and ``model.invoke`` give the same span), so each call is read as a stream whose
timing is unknown but for its duration.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from google.protobuf.message import Message

from streamscope import semconv as sc
from streamscope_ingest.decode.sources.foreign import COVERAGE_DURATION, GENERATING_OPERATIONS, Foreign, kept

SOURCE = "openllmetry-langchain"
SCOPES = ("opentelemetry.instrumentation.langchain",)
_NOT_KEPT = ("traceloop.entity.input", "traceloop.entity.output")


def read(scope: str, span: Message, attributes: Mapping[str, Any]) -> Foreign | None:
    if not scope.startswith(SCOPES) or attributes.get(sc.GEN_AI_OPERATION_NAME) not in GENERATING_OPERATIONS:
        return None
    return Foreign(SOURCE, COVERAGE_DURATION, attributes=kept(attributes, dropped=_NOT_KEPT))
