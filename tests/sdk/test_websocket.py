"""Streams over a WebSocket, recorded by ``astream_websocket`` / ``stream_websocket`` with the real ``websockets``
client against the simulated engine's Realtime-style endpoint (uvicorn, in this process): each message one chunk,
at the time the application got it (within 2 ms of the client's own clock), with its size on the wire; how the
response ended, whichever way it ends."""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Iterator

import pytest
from websockets.asyncio.client import connect
from websockets.sync.client import connect as connect_sync

import streamscope
from streamscope import semconv as sc
from streamscope.formats import EventFacts
from streamscope_cli.engine.app import EngineNode, NodeConfig, OutputConfig
from streamscope_collector.serving import BackgroundServer
from tests.support import int64s, memory_provider, wait_until

CLOCK_US = 2_000


@pytest.fixture(scope="module")
def realtime_url() -> Iterator[str]:
    node = EngineNode(NodeConfig(node="ws-0", output=OutputConfig(tokens_per_chunk=2)))
    server = BackgroundServer(node.app, name="engine").start()
    yield f"ws://127.0.0.1:{server.port}/v1/realtime"
    server.stop()


def only_stream(exporter) -> dict:
    (span,) = [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]
    return {"start_ns": span.start_time, **dict(span.attributes or {})}


def test_a_realtime_response_is_recorded_message_by_message(realtime_url):
    provider, exporter = memory_provider()

    async def converse() -> tuple[list[int], list[dict]]:
        async with connect(realtime_url) as websocket:
            assert json.loads(await websocket.recv())["type"] == "session.created"  # before the response: not in it
            arrivals, events = [], []
            async with streamscope.astream_websocket(
                websocket, request_model="sim-llm", tracer_provider=provider
            ) as messages:
                request = {"type": "response.create", "response": {"max_output_tokens": 12, "instructions": "hi"}}
                await websocket.send(json.dumps(request))
                async for event in messages:
                    arrivals.append(time.time_ns())
                    events.append(event)
            return arrivals, events

    arrivals, events = asyncio.run(converse())
    kinds = [event["type"] for event in events]
    assert kinds[0] == "response.created" and kinds[-2:] == ["response.output_text.done", "response.done"]
    deltas = [event["delta"] for event in events if event["type"] == "response.output_text.delta"]
    assert len(deltas) == 6  # 12 tokens, 2 a message; iteration ended with the response

    stream = only_stream(exporter)
    assert (stream[sc.STREAMSCOPE_TRANSPORT], stream[sc.STREAMSCOPE_OUTCOME]) == ("websocket", "completed")
    assert stream[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 12 and stream[sc.GEN_AI_RESPONSE_FINISH_REASONS] == ("completed",)
    offsets = int64s(stream[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    seen = [(t - stream["start_ns"]) // 1000 for t in arrivals]
    assert len(offsets) == len(events)
    assert all(0 <= s - o <= CLOCK_US for o, s in zip(offsets, seen, strict=True)), (offsets, seen)
    content = int64s(stream[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])
    expected = [len(e["delta"].encode()) if e["type"] == "response.output_text.delta" else 0 for e in events]
    assert content == expected
    wire = int64s(stream[sc.STREAMSCOPE_CHUNKS_WIRE_BYTES])
    assert all(w >= len(json.dumps(e, separators=(",", ":"))) for w, e in zip(wire, events, strict=True))
    assert stream[sc.STREAMSCOPE_TOKENS_ESTIMATED] is True  # a delta says no count


def test_one_message_one_chunk_with_a_function_and_a_reader_that_leaves_early(realtime_url):
    """Any protocol: the application's function says what each message carried; a reader that stops after three
    messages cancelled the response."""
    provider, exporter = memory_provider()

    def carried(message: str) -> EventFacts:
        event = json.loads(message)
        return EventFacts(str(event.get("delta", "")), done=event["type"] == "response.done")

    with connect_sync(realtime_url) as websocket:
        websocket.recv()  # session.created
        with streamscope.stream_websocket(
            websocket, format=carried, provider="my-realtime", tracer_provider=provider
        ) as messages:
            websocket.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 40}}))
            taken = list(itertools.islice(messages, 3))
    assert all(isinstance(message, str) for message in taken)
    stream = only_stream(exporter)
    assert (stream[sc.STREAMSCOPE_OUTCOME], stream[sc.GEN_AI_PROVIDER_NAME]) == ("cancelled", "my-realtime")
    assert len(int64s(stream[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) == 3


def test_a_refused_response_is_an_error_and_a_closed_connection_a_disconnect(realtime_url):
    provider, exporter = memory_provider()

    async def refused_then_closed() -> None:
        async with connect(realtime_url) as websocket:
            await websocket.recv()
            async with streamscope.astream_websocket(websocket, tracer_provider=provider) as messages:
                await websocket.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": -1}}))
                assert [event["type"] async for event in messages] == ["error"]
            async with streamscope.astream_websocket(websocket, tracer_provider=provider) as messages:
                await websocket.send(json.dumps({"type": "response.create", "response": {"max_output_tokens": 500}}))
                await messages.__anext__()
                await websocket.close()
                with pytest.raises(Exception, match="sent 1000"):
                    await messages.__anext__()

    asyncio.run(refused_then_closed())
    refused, closed = sorted(
        (s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"),
        key=lambda span: span.start_time,
    )
    assert (refused.attributes[sc.STREAMSCOPE_OUTCOME], refused.attributes[sc.ERROR_TYPE]) == (
        "error", "invalid_request_error"
    )  # fmt: skip
    assert closed.attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"


def test_a_reader_whose_task_is_cancelled_cancelled_the_response(realtime_url):
    """An application that cancels the task reading the response (a user who closed the page) stopped it: the
    response is cancelled, not an error."""
    provider, exporter = memory_provider()

    async def cancelled_reader() -> None:
        async with connect(realtime_url) as websocket:
            await websocket.recv()
            first = asyncio.Event()

            async def read() -> None:
                async with streamscope.astream_websocket(websocket, tracer_provider=provider) as messages:
                    await websocket.send(
                        json.dumps({"type": "response.create", "response": {"max_output_tokens": 400}})
                    )
                    async for _ in messages:
                        first.set()

            reader = asyncio.create_task(read())
            await first.wait()
            reader.cancel()
            with pytest.raises(asyncio.CancelledError):
                await reader

    asyncio.run(cancelled_reader())
    assert only_stream(exporter)[sc.STREAMSCOPE_OUTCOME] == "cancelled"


def test_the_servers_side_of_a_response_joins_the_clients_trace_with_its_emit_times():
    """The client puts its response's trace context in the request (the Realtime API's ``response.metadata``); the
    engine records its side with ``ServerWebSocketResponse`` in that trace: the same messages, each emitted before
    the client had it, and a second response on the same socket in a trace of its own."""
    server_provider, server_exporter = memory_provider()
    node = EngineNode(NodeConfig(node="ws-1", output=OutputConfig(tokens_per_chunk=2)), tracer_provider=server_provider)
    server = BackgroundServer(node.app, name="engine").start()
    client_provider, client_exporter = memory_provider()

    async def converse() -> list[list[int]]:
        arrivals: list[list[int]] = []
        async with connect(f"ws://127.0.0.1:{server.port}/v1/realtime") as websocket:
            await websocket.recv()  # session.created
            for _ in range(2):
                async with streamscope.astream_websocket(websocket, tracer_provider=client_provider) as messages:
                    response = {"max_output_tokens": 12, "instructions": "hi", "metadata": messages.trace_context}
                    await websocket.send(json.dumps({"type": "response.create", "response": response}))
                    arrivals.append([time.time_ns() async for _ in messages])
        return arrivals

    try:
        arrivals = asyncio.run(converse())
    finally:
        server.stop()
    spans = lambda exporter: [s for s in exporter.get_finished_spans() if s.instrumentation_scope.name == "streamscope"]  # noqa: E731
    clients, servers = spans(client_exporter), spans(server_exporter)
    assert len(clients) == len(servers) == 2
    by_trace = {s.context.trace_id: s for s in servers}
    assert len(by_trace) == 2  # a trace each
    for client, seen in zip(clients, arrivals, strict=True):
        served = by_trace[client.context.trace_id]
        attributes = dict(served.attributes or {})
        assert served.parent is not None and served.parent.span_id == client.context.span_id
        assert attributes[sc.STREAMSCOPE_SIDE] == "server" and attributes[sc.STREAMSCOPE_TRANSPORT] == "websocket"
        assert attributes[sc.STREAMSCOPE_NODE_NAME] == "ws-1" and attributes[sc.STREAMSCOPE_OUTCOME] == "completed"
        emitted = [served.start_time + o * 1000 for o in int64s(attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])]
        assert len(emitted) == len(seen) == 9  # created, six deltas, text done, response done
        assert all(e <= s + CLOCK_US * 1000 for e, s in zip(emitted, seen, strict=True)), (emitted, seen)
        content = int64s(attributes[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])
        assert content == int64s(dict(client.attributes or {})[sc.STREAMSCOPE_CHUNKS_CONTENT_BYTES])


def test_a_client_that_leaves_mid_response_is_a_disconnect_on_the_servers_side():
    server_provider, server_exporter = memory_provider()
    node = EngineNode(NodeConfig(node="ws-2", output=OutputConfig(tokens_per_chunk=1)), tracer_provider=server_provider)
    server = BackgroundServer(node.app, name="engine").start()

    async def leave() -> None:
        async with connect(f"ws://127.0.0.1:{server.port}/v1/realtime") as websocket:
            await websocket.recv()
            request = {"type": "response.create", "response": {"max_output_tokens": 400, "instructions": "hi"}}
            await websocket.send(json.dumps(request))
            for _ in range(3):
                await websocket.recv()

    try:
        asyncio.run(leave())
        (served,) = wait_until(lambda: server_exporter.get_finished_spans(), "the server's span of the response")
    finally:
        server.stop()
    attributes = dict(served.attributes or {})
    assert attributes[sc.STREAMSCOPE_OUTCOME] == "disconnected"
    assert 3 <= len(int64s(attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])) < 400
