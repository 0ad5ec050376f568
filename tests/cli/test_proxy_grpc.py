"""The impairment proxy's gRPC side on real sockets: a paced ``grpc.aio`` upstream, the relay in front, a
``grpc.aio`` client behind, all on one event loop. Arrival times are taken by the client as each message is read;
timing is only asserted as lower bounds or as coarse structure (bursts)."""

from __future__ import annotations

import asyncio
import itertools
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
from google.protobuf.struct_pb2 import Struct

from streamscope_cli.child import ChildProcess
from streamscope_cli.engine.grpc_service import GENERATE as ENGINE_GENERATE
from streamscope_cli.engine.grpc_service import carried, struct
from streamscope_cli.proxy import REQUEST_ID_HEADER, BufferCoalesce, Drop, ProxyConfig, Stall, create_app
from streamscope_cli.proxy.grpc_relay import GrpcRelay
from streamscope_cli.workload.ground_truth import MemorySink
from tests.support import free_port

GENERATE = "/test.Paced/Generate"
MESSAGES = 30
CANCELLED: list[int] = []
"""The messages the upstream was about to send when its call was cancelled."""


def paced_upstream() -> grpc.GenericRpcHandler:
    """``Generate``: ``n`` messages ``gap_ms`` apart (``i``, ``text``), then, with ``fail``, DATA_LOSS."""

    async def generate(request: Struct, context: grpc.aio.ServicerContext) -> Any:
        fields = request.fields
        for i in range(int(fields["n"].number_value)):
            try:
                await asyncio.sleep(fields["gap_ms"].number_value / 1000)
            except asyncio.CancelledError:
                CANCELLED.append(i)
                raise
            message = Struct()
            message.update({"i": i, "text": f"word-{i}"})
            yield message
        if fields["fail"].bool_value:
            await context.abort(grpc.StatusCode.DATA_LOSS, "the engine lost its state (on purpose)")

    handler = grpc.unary_stream_rpc_method_handler(
        generate, request_deserializer=Struct.FromString, response_serializer=Struct.SerializeToString
    )
    return grpc.method_handlers_generic_handler("test.Paced", {"Generate": handler})


@dataclass
class Call:
    arrivals: list[tuple[float, int]]
    """(perf_counter once read, the message's ``i``) per message."""
    trace_id: str
    request_id: str
    error: grpc.aio.AioRpcError | None

    def gaps(self) -> list[float]:
        return [b[0] - a[0] for a, b in itertools.pairwise(self.arrivals)]


async def call(target: str, n: int = MESSAGES, gap_ms: float = 10.0, fail: bool = False) -> Call:
    trace_id = secrets.token_hex(16)
    metadata = (("traceparent", f"00-{trace_id}-{secrets.token_hex(8)}-01"),)
    request = Struct()
    request.update({"n": n, "gap_ms": gap_ms, "fail": fail})
    arrivals, error = [], None
    async with grpc.aio.insecure_channel(target) as channel:
        generate = channel.unary_stream(
            GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
        )
        answer = generate(request, metadata=metadata, timeout=30)
        try:
            async for message in answer:
                arrivals.append((time.perf_counter(), int(message.fields["i"].number_value)))
        except grpc.aio.AioRpcError as exc:
            error = exc
        request_id = dict(await answer.initial_metadata()).get(REQUEST_ID_HEADER, "")
    return Call(arrivals, trace_id, str(request_id), error)


def through_proxy(
    *rules: Any, unreachable: bool = False
) -> Callable[[Callable[[str], Awaitable[Any]]], tuple[Any, MemorySink]]:
    """Run ``talk(proxy_target)`` with a paced upstream (or, ``unreachable``, none) and the relay (these ``rules``)
    up on one loop."""

    def run(talk: Callable[[str], Awaitable[Any]]) -> tuple[Any, MemorySink]:
        sink = MemorySink()
        proxy = create_app(ProxyConfig(upstream="http://127.0.0.1:1", impairments=rules), sink).state.proxy

        async def main() -> Any:
            upstream, target = None, f"127.0.0.1:{free_port()}"
            if not unreachable:
                upstream = grpc.aio.server()
                upstream.add_generic_rpc_handlers([paced_upstream()])
                target = f"127.0.0.1:{upstream.add_insecure_port('127.0.0.1:0')}"
                await upstream.start()
            relay = GrpcRelay(proxy, target)
            relay_port = await relay.start("127.0.0.1", 0)
            try:
                return await talk(f"127.0.0.1:{relay_port}")
            finally:
                await relay.stop()
                if upstream is not None:
                    await upstream.stop(None)

        return asyncio.run(main()), sink

    return run


def records(sink: MemorySink, answer: Call) -> list:
    return [r for r in sink.snapshot() if r.trace_id == answer.trace_id and r.detail.get("source") != "watchdog"]


def test_a_call_is_relayed_message_by_message_with_its_metadata():
    answer, sink = through_proxy()(call)
    assert answer.error is None and [i for _, i in answer.arrivals] == list(range(MESSAGES))
    assert len(answer.request_id) == 32 and records(sink, answer) == []


def test_a_stall_holds_the_messages_after_its_message():
    answer, sink = through_proxy(Stall(after_event=9, duration_ms=400))(call)
    assert answer.error is None and [i for _, i in answer.arrivals] == list(range(MESSAGES))
    long_gaps = [i for i, gap in enumerate(answer.gaps()) if gap >= 0.2]
    assert long_gaps == [9] and answer.gaps()[9] >= 0.39, answer.gaps()
    (record,) = records(sink, answer)
    assert (record.cause, record.detail, record.request_id) == (
        "connection",
        {"kind": "stall", "after_event": "9"},
        answer.request_id,
    )
    assert min(record.chunk_indices) == 10 and record.magnitude >= 0.39


def test_buffering_holds_messages_and_releases_them_whole():
    answer, sink = through_proxy(BufferCoalesce(flush_ms=150, flush_bytes=1 << 20))(call)
    assert answer.error is None and [i for _, i in answer.arrivals] == list(range(MESSAGES))
    assert 1 + sum(gap > 0.06 for gap in answer.gaps()) <= MESSAGES // 5, answer.gaps()
    held = [r for r in records(sink, answer) if r.cause == "network_buffering"]
    assert held and all(r.detail == {"kind": "buffer_coalesce"} for r in held)


def test_a_drop_ends_the_call_unavailable_after_its_message():
    answer, sink = through_proxy(Drop(after_event=4))(call)
    assert [i for _, i in answer.arrivals] == list(range(5))
    assert answer.error is not None and answer.error.code() == grpc.StatusCode.UNAVAILABLE
    assert [(r.cause, r.detail["kind"]) for r in records(sink, answer)] == [("connection", "drop")]


def test_the_upstreams_failure_comes_back_with_its_status():
    answer, _ = through_proxy()(lambda target: call(target, n=3, fail=True))
    assert [i for _, i in answer.arrivals] == [0, 1, 2]
    assert answer.error is not None and answer.error.code() == grpc.StatusCode.DATA_LOSS
    assert "lost its state" in (answer.error.details() or "")


def test_an_unreachable_upstream_is_unavailable():
    answer, _ = through_proxy(unreachable=True)(call)
    assert answer.arrivals == [] and answer.error is not None
    assert answer.error.code() == grpc.StatusCode.UNAVAILABLE


def test_a_client_that_leaves_cancels_the_upstream_call():
    CANCELLED.clear()

    async def leave(target: str) -> tuple[int, list[int]]:
        async with grpc.aio.insecure_channel(target) as channel:
            generate = channel.unary_stream(
                GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
            )
            request = Struct()
            request.update({"n": 1000, "gap_ms": 5})
            answer = generate(request)
            read = 0
            async for _ in answer:
                read += 1
                if read == 3:
                    answer.cancel()
                    break
        for _ in range(200):  # the cancel travels client -> relay -> upstream
            if CANCELLED:
                break
            await asyncio.sleep(0.05)
        return read, list(CANCELLED)

    (read, cancelled), _ = through_proxy()(leave)
    assert read == 3 and cancelled and cancelled[0] < 1000


def test_the_command_relays_the_engines_grpc_stream_and_stops_on_sigterm():
    """`streamscope proxy --grpc-upstream` in front of `streamscope engine --grpc-port`, each in its own process."""
    engine = ChildProcess("streamscope_cli.main", "engine", "--port", "0", "--grpc-port", "0", name="the engine")
    announced = engine.start().ready()
    http, grpc_target = re.search(r"(http://\S+) .*gRPC (\S+?)\)", announced).groups()  # type: ignore[union-attr]
    proxy = ChildProcess(
        "streamscope_cli.main", "proxy", "--upstream", http, "--port", str(free_port()), "--grpc-upstream",
        grpc_target, name="the proxy",
    )  # fmt: skip
    try:
        assert proxy.start().ready().startswith("proxy on http://")
        relayed = re.fullmatch(r"gRPC on (\S+) -> (\S+)", proxy.line(30))
        assert relayed is not None and relayed.group(2) == grpc_target

        async def generate() -> list[str]:
            async with grpc.aio.insecure_channel(relayed.group(1)) as channel:
                call = channel.unary_stream(
                    ENGINE_GENERATE,
                    request_serializer=Struct.SerializeToString,
                    response_deserializer=Struct.FromString,
                )
                return [carried(message).text async for message in call(struct(prompt="hi", max_tokens=12))]

        texts = asyncio.run(generate())
        assert len("".join(texts).split()) >= 6 and texts[-1] == ""  # words, then the closing message
    finally:
        left = proxy.stop()
        engine.stop()
    assert "Traceback" not in left
