"""The simulated engine's gRPC streaming service: ``streamscope.engine.v1.Engine/Generate``, server streaming.

The messages are protobuf's ``google.protobuf.Struct`` (no code to generate): the request carries ``prompt``,
``max_tokens`` and the engine's ``sim`` knobs; each response message one chunk of text (``text``, ``tokens``), the
last one ``done`` with ``finish_reason``, ``input_tokens`` and ``output_tokens``. A request the engine refuses ends
the call with INVALID_ARGUMENT. The node's server side is recorded by streamscope's server interceptor, in the
caller's trace (its metadata carries the context).

It serves on the node's event loop, beside its HTTP API (``serving``), so both share one engine.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import grpc
import grpc.aio
from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct

from streamscope.formats import EventFacts
from streamscope.grpc_streams import AsyncStreamServerInterceptor
from streamscope_cli.engine.truth import StreamTruth, chunked
from streamscope_cli.engine.words import words
from streamscope_cli.workload.ground_truth import trace_id_of

if TYPE_CHECKING:
    from streamscope_cli.engine.app import EngineNode

SERVICE = "streamscope.engine.v1.Engine"
GENERATE = f"/{SERVICE}/Generate"


def carried(message: Struct) -> EventFacts:
    """What one response message carried: its text and its token count (the engine counts them)."""
    fields = message.fields
    text = fields["text"].string_value if "text" in fields else ""
    tokens = int(fields["tokens"].number_value) if "tokens" in fields else None
    return EventFacts(text, exact_tokens=tokens, done="done" in fields)


def struct(**values: Any) -> Struct:
    message = Struct()
    message.update(values)
    return message


@asynccontextmanager
async def serving(node: EngineNode, host: str, port: int, tracer_provider: Any = None) -> AsyncIterator[int]:
    """The service on ``host:port`` (0: a free port) on the running loop, until the block ends; yields the port."""
    interceptor = AsyncStreamServerInterceptor(
        carried,
        provider=node.config.flavor,
        request_model=node.config.model,
        node_name=node.config.node,
        tracer_provider=tracer_provider,
    )
    server = grpc.aio.server(interceptors=[interceptor])
    handler = grpc.unary_stream_rpc_method_handler(
        lambda request, context: _generate(node, request, context),
        request_deserializer=Struct.FromString,
        response_serializer=Struct.SerializeToString,
    )
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler(SERVICE, {"Generate": handler})])
    bound = server.add_insecure_port(f"{host}:{port}")
    await server.start()
    try:
        yield bound
    finally:
        await server.stop(grace=1.0)


def _integers(value: Any) -> Any:
    """A Struct's numbers are doubles: whole ones back to ints, as the engine reads them from JSON."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: _integers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_integers(item) for item in value]
    return value


async def _generate(node: EngineNode, request: Struct, context: grpc.aio.ServicerContext) -> AsyncIterator[Struct]:
    body = _integers(json_format.MessageToDict(request))
    body["messages"] = [{"role": "user", "content": str(body.pop("prompt", "") or "hello")}]
    try:
        sequence = node.sequence_for(body, chat=True)
        generation = node.engine.submit(sequence)
    except ValueError as exc:
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        return
    rng = random.Random(f"{node.config.seed}:{sequence.request_id}")
    metadata = {str(key): str(value) for key, value in context.invocation_metadata() or ()}
    truth = StreamTruth(node.sink, node.config.node, trace_id_of(metadata.get("traceparent")), sequence.request_id)
    sent = 0
    try:
        async for tokens in chunked(generation, node.output.tokens_per_chunk, truth, first_index=0):
            yield struct(text=words(rng, tokens, sent), tokens=tokens)
            sent += tokens
        finish = "length" if sent >= sequence.max_tokens else "stop"
        yield struct(done=True, finish_reason=finish, input_tokens=sequence.prompt_tokens, output_tokens=sent)
    finally:
        node.engine.release(sequence.request_id)
