"""Server-streaming gRPC calls recorded by ``streamscope.grpc_streams``' interceptors, with the real ``grpcio`` client
(sync and asyncio) against the simulated engine's gRPC service, whose own side its server interceptor records: each
message one chunk at the time the application got it (within 2 ms of the client's own clock) and at the time the
servicer yielded it, in one trace; how the call ended, whichever way it ends."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import grpc
import grpc.aio
import pytest
from google.protobuf.struct_pb2 import Struct

from streamscope import semconv as sc
from streamscope.grpc_streams import FRAME_PREFIX_BYTES, AsyncStreamClientInterceptor, StreamClientInterceptor
from streamscope_cli.engine.app import EngineNode, NodeConfig, OutputConfig
from streamscope_cli.engine.grpc_service import GENERATE, carried, struct
from streamscope_collector.serving import BackgroundServer
from tests.support import int64s, memory_provider, wait_until

CLOCK_US = 2_000
METHOD = GENERATE.lstrip("/")


@pytest.fixture(scope="module")
def engine() -> Iterator[tuple[str, object]]:
    """The engine's gRPC address, and the exporter of its server side's spans."""
    provider, exporter = memory_provider()
    node = EngineNode(
        NodeConfig(node="grpc-0", output=OutputConfig(tokens_per_chunk=2)),
        tracer_provider=provider,
        grpc_address=("127.0.0.1", 0),
    )
    server = BackgroundServer(node.app, name="engine", lifespan=True).start()
    yield f"127.0.0.1:{node.grpc_port}", exporter
    server.stop()


def streams(exporter, trace_id: int | None = None) -> list:
    return [
        span
        for span in exporter.get_finished_spans()
        if span.instrumentation_scope.name == "streamscope" and trace_id in (None, span.context.trace_id)
    ]


def server_stream(exporter, client_span):
    """The server's span of the call ``client_span`` recorded (it ends a moment after the client's)."""
    (span,) = wait_until(lambda: streams(exporter, client_span.context.trace_id), "the server's span", timeout_s=10)
    return span


def generate(channel: grpc.Channel):
    return channel.unary_stream(
        GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
    )


def test_a_call_is_recorded_message_by_message_on_both_ends(engine):
    address, server_exporter = engine
    provider, exporter = memory_provider()
    interceptor = StreamClientInterceptor(carried, provider="sim", tracer_provider=provider)
    with grpc.intercept_channel(grpc.insecure_channel(address), interceptor) as channel:
        arrivals, messages = [], []
        for message in generate(channel)(struct(prompt="hello", max_tokens=12)):
            arrivals.append(time.time_ns())
            messages.append(message)
    assert [int(m["tokens"]) for m in messages[:-1]] == [2] * 6 and messages[-1]["done"]

    (client,) = streams(exporter)
    attributes = client.attributes
    assert (attributes[sc.STREAMSCOPE_TRANSPORT], attributes[sc.STREAMSCOPE_OUTCOME]) == ("grpc", "completed")
    assert attributes[sc.RPC_METHOD] == METHOD
    offsets = int64s(attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    seen = [(t - client.start_time) // 1000 for t in arrivals]
    assert len(offsets) == len(messages)
    assert all(0 <= s - o <= CLOCK_US for o, s in zip(offsets, seen, strict=True)), (offsets, seen)
    texts = [carried(m).text for m in messages]
    assert int64s(attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES]) == [len(t.encode()) for t in texts]
    assert int64s(attributes[sc.STREAMSCOPE_CHUNKS_WIRE_BYTES]) == [m.ByteSize() + FRAME_PREFIX_BYTES for m in messages]
    assert not attributes.get(sc.STREAMSCOPE_TOKENS_ESTIMATED)  # each message counts its tokens

    server = server_stream(server_exporter, client)
    assert server.parent.span_id == client.context.span_id  # the call's metadata carried the trace
    assert (server.attributes[sc.STREAMSCOPE_SIDE], server.attributes[sc.STREAMSCOPE_NODE_NAME]) == ("server", "grpc-0")
    assert (server.attributes[sc.STREAMSCOPE_TRANSPORT], server.attributes[sc.RPC_METHOD]) == ("grpc", METHOD)
    emitted = [server.start_time + o * 1000 for o in int64s(server.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])]
    assert len(emitted) == len(arrivals)
    assert all(e - 1000 <= a for e, a in zip(emitted, arrivals, strict=True))  # yielded before it arrived (1 µs)


def test_a_client_that_cancels_after_two_messages_cancelled_the_call_and_the_server_saw_it_leave(engine):
    address, server_exporter = engine
    provider, exporter = memory_provider()
    interceptor = StreamClientInterceptor(carried, tracer_provider=provider)
    with grpc.intercept_channel(grpc.insecure_channel(address), interceptor) as channel:
        call = generate(channel)(struct(prompt="hello", max_tokens=2000))
        next(call), next(call)
        call.cancel()
        with pytest.raises(grpc.RpcError) as raised:
            next(call)
        assert raised.value.code() == grpc.StatusCode.CANCELLED
    (client,) = streams(exporter)
    assert client.attributes[sc.STREAMSCOPE_OUTCOME] == "cancelled"
    assert len(int64s(client.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) == 2
    server = server_stream(server_exporter, client)
    assert server.attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"


def test_a_refused_call_is_an_error_named_by_its_status(engine):
    address, _ = engine
    provider, exporter = memory_provider()
    interceptor = StreamClientInterceptor(carried, tracer_provider=provider)
    channel = grpc.intercept_channel(grpc.insecure_channel(address), interceptor)
    with channel, pytest.raises(grpc.RpcError) as raised:
        list(generate(channel)(struct(prompt="hello", max_tokens=-1)))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    (client,) = streams(exporter)
    assert (client.attributes[sc.STREAMSCOPE_OUTCOME], client.attributes[sc.ERROR_TYPE]) == (
        "error", "INVALID_ARGUMENT"
    )  # fmt: skip


def test_only_the_methods_named_are_recorded(engine):
    address, _ = engine
    provider, exporter = memory_provider()
    interceptor = StreamClientInterceptor(carried, methods={"/other.Service/Stream"}, tracer_provider=provider)
    with grpc.intercept_channel(grpc.insecure_channel(address), interceptor) as channel:
        assert len(list(generate(channel)(struct(prompt="hello", max_tokens=4)))) == 3
    assert streams(exporter) == []


def test_an_asyncio_call_is_recorded_and_a_reader_that_stops_early_cancelled_it(engine):
    address, server_exporter = engine
    provider, exporter = memory_provider()

    async def calls() -> tuple[list[int], int]:
        interceptor = AsyncStreamClientInterceptor(carried, provider="sim", tracer_provider=provider)
        async with grpc.aio.insecure_channel(address, interceptors=[interceptor]) as channel:
            stub = channel.unary_stream(
                GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
            )
            arrivals = []
            async for _ in stub(struct(prompt="hello", max_tokens=8)):
                arrivals.append(time.time_ns())
            call, taken = stub(struct(prompt="hello", max_tokens=2000)), 0
            async for _ in call:
                taken += 1
                if taken == 3:
                    break
            call.cancel()
            return arrivals, taken

    arrivals, taken = asyncio.run(calls())
    whole, left = sorted(streams(exporter), key=lambda span: span.start_time)
    assert whole.attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
    offsets = int64s(whole.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    seen = [(t - whole.start_time) // 1000 for t in arrivals]
    assert len(offsets) == len(arrivals) == 5
    assert all(0 <= s - o <= CLOCK_US for o, s in zip(offsets, seen, strict=True)), (offsets, seen)
    assert left.attributes[sc.STREAMSCOPE_OUTCOME] == "cancelled"
    assert len(int64s(left.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) == taken
    assert server_stream(server_exporter, whole).parent.span_id == whole.context.span_id
    assert server_stream(server_exporter, left).attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"


@pytest.mark.parametrize("interceptor_class", [StreamClientInterceptor, AsyncStreamClientInterceptor])
def test_a_call_that_fails_to_start_is_one_stream_ended_in_that_error(interceptor_class):
    """The continuation raises before there is a call (here, a channel closed first): the application gets that
    error, and the stream ends as an error of its type, once."""
    provider, exporter = memory_provider()
    interceptor = interceptor_class(carried, tracer_provider=provider)
    details = grpc.aio.ClientCallDetails(GENERATE, None, None, None, None)

    def refusing(details, request):
        raise ValueError("Cannot invoke RPC: Channel closed!")

    async def refusing_async(details, request):
        refusing(details, request)

    with pytest.raises(ValueError):
        if interceptor_class is StreamClientInterceptor:
            interceptor.intercept_unary_stream(refusing, details, struct(prompt="hello"))
        else:
            asyncio.run(interceptor.intercept_unary_stream(refusing_async, details, struct(prompt="hello")))
    (stream,) = streams(exporter)
    assert stream.attributes[sc.STREAMSCOPE_OUTCOME] == "error"
    assert stream.attributes[sc.ERROR_TYPE] == "ValueError"
