"""What recording costs the application per chunk on each transport: SSE, Ollama's NDJSON over chunked HTTP, a
WebSocket (OpenAI Realtime's events) and gRPC server streaming, each read raw (the library alone, as an
application reads it) and through streamscope, side by side in one run.

The simulated engine serves all four from a process of its own (``streamscope engine --grpc-port 0``); the clients
run here, ``--streams`` at a time on one asyncio loop. This process's CPU time (user + system) over a run, divided
by the content chunks read, is a run's cost; a transport's recorded run less its raw run is what recording adds.
Spans go to a real SDK TracerProvider that exports nothing: exporting costs the same whatever the transport
(``benchmarks.sdk_overhead`` counts it). The runs alternate raw and recorded, ``--rounds`` times; the lowest of
each is kept (a busy neighbour only ever adds).

    python -m benchmarks.transport_cost [--quick] [--streams 16] [--tokens 400] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import grpc.aio
import httpx
from google.protobuf.struct_pb2 import Struct
from opentelemetry.sdk.trace import TracerProvider
from websockets.asyncio.client import connect

import streamscope
from streamscope.grpc_streams import AsyncStreamClientInterceptor
from streamscope_cli.child import ChildProcess
from streamscope_cli.engine.grpc_service import GENERATE, carried, struct

PROVIDER = TracerProvider()
"""Spans are built and ended as in an application; nothing exports them."""
Read = Callable[["Engine", int, bool], Awaitable[int]]
"""One stream of ``tokens`` read raw or recorded; returns its content chunks."""


@dataclass(frozen=True)
class Engine:
    http: str
    client: httpx.AsyncClient
    channels: dict[bool, grpc.aio.Channel]
    """A plain channel (False) and one through streamscope's interceptor (True)."""


async def sse(engine: Engine, tokens: int, recorded: bool) -> int:
    body = {"model": "sim-llm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": tokens, "stream": True}
    url = f"{engine.http}/v1/chat/completions"
    chunks = 0
    if recorded:
        async with streamscope.astream_sse(engine.client, "POST", url, json=body, tracer_provider=PROVIDER) as events:
            async for event in events:
                chunks += _openai_content(event.payload)
        return chunks
    async with engine.client.stream("POST", url, json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                chunks += _openai_content(json.loads(line[6:]))
    return chunks


def _openai_content(payload: Any) -> int:
    choices = payload.get("choices") if isinstance(payload, dict) else None
    return int(bool(choices and choices[0].get("delta", {}).get("content")))


async def ndjson(engine: Engine, tokens: int, recorded: bool) -> int:
    body = {"model": "sim-llm", "messages": [{"role": "user", "content": "hi"}], "options": {"num_predict": tokens}}
    url = f"{engine.http}/api/chat"
    chunks = 0
    if recorded:
        async with streamscope.astream_ndjson(engine.client, "POST", url, json=body, tracer_provider=PROVIDER) as lines:
            async for line in lines:
                chunks += bool(line.payload.get("message", {}).get("content"))
        return chunks
    async with engine.client.stream("POST", url, json=body) as response:
        async for text in response.aiter_lines():
            if text:
                chunks += bool(json.loads(text).get("message", {}).get("content"))
    return chunks


async def websocket(engine: Engine, tokens: int, recorded: bool) -> int:
    request = json.dumps({"type": "response.create", "response": {"max_output_tokens": tokens, "instructions": "hi"}})
    chunks = 0
    async with connect(f"{engine.http.replace('http', 'ws', 1)}/v1/realtime") as socket:
        await socket.recv()  # session.created
        if recorded:
            async with streamscope.astream_websocket(socket, tracer_provider=PROVIDER) as messages:
                await socket.send(request)
                async for event in messages:
                    chunks += event["type"] == "response.output_text.delta"
            return chunks
        await socket.send(request)
        while True:
            event = json.loads(await socket.recv())
            chunks += event["type"] == "response.output_text.delta"
            if event["type"] == "response.done":
                return chunks


async def grpc_stream(engine: Engine, tokens: int, recorded: bool) -> int:
    generate = engine.channels[recorded].unary_stream(
        GENERATE, request_serializer=Struct.SerializeToString, response_deserializer=Struct.FromString
    )
    chunks = 0
    async for message in generate(struct(prompt="hi", max_tokens=tokens)):
        chunks += bool(message.fields["text"].string_value) if "text" in message.fields else 0
    return chunks


TRANSPORTS: dict[str, Read] = {"sse": sse, "chunked (NDJSON)": ndjson, "websocket": websocket, "grpc": grpc_stream}


async def timed_run(read: Read, engine: Engine, streams: int, tokens: int, recorded: bool) -> tuple[float, int]:
    """CPU seconds of this process and content chunks, for ``streams`` streams read at once."""
    cpu = time.process_time()
    chunks = sum(await asyncio.gather(*(read(engine, tokens, recorded) for _ in range(streams))))
    return time.process_time() - cpu, chunks


async def measure(http: str, grpc_target: str, streams: int, tokens: int, rounds: int) -> dict[str, dict[bool, float]]:
    interceptor = AsyncStreamClientInterceptor(carried, provider="streamscope-engine", tracer_provider=PROVIDER)
    limits = httpx.Limits(max_connections=streams)
    async with (
        httpx.AsyncClient(timeout=60.0, limits=limits) as client,
        grpc.aio.insecure_channel(grpc_target) as plain,
        grpc.aio.insecure_channel(grpc_target, interceptors=[interceptor]) as intercepted,
    ):
        engine = Engine(http, client, {False: plain, True: intercepted})
        best: dict[str, dict[bool, float]] = {name: {} for name in TRANSPORTS}
        for name, read in TRANSPORTS.items():
            await timed_run(read, engine, streams, min(tokens, 20), False)  # connections, caches, imports
            await timed_run(read, engine, streams, min(tokens, 20), True)
            for _ in range(rounds):
                for recorded in (False, True):
                    seconds, chunks = await timed_run(read, engine, streams, tokens, recorded)
                    if chunks < streams:
                        raise SystemExit(f"{name}: {chunks} content chunks read from {streams} streams")
                    per_chunk = seconds / max(chunks, 1) * 1e6
                    best[name][recorded] = min(best[name].get(recorded, per_chunk), per_chunk)
        return best


def start_engine() -> tuple[ChildProcess, str, str]:
    """The simulated engine in a process of its own: its HTTP base URL and gRPC target."""
    engine = ChildProcess("streamscope_cli.main", "engine", "--port", "0", "--grpc-port", "0", name="the engine")
    announced = engine.start().ready()
    found = re.search(r"(http://\S+) .*gRPC (\S+?)\)", announced)
    if found is None:
        engine.stop()
        raise SystemExit(f"the engine announced no ports: {announced!r}")
    return engine, found.group(1), found.group(2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=16, help="streams read at once")
    parser.add_argument("--tokens", type=int, default=400, help="tokens a stream asks for")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="4 streams of 60 tokens, one round")
    args = parser.parse_args()
    streams, tokens, rounds = (4, 60, 1) if args.quick else (args.streams, args.tokens, args.rounds)
    engine, http, grpc_target = start_engine()
    try:
        load = os.getloadavg()[0]
        best = asyncio.run(measure(http, grpc_target, streams, tokens, rounds))
        load_after = os.getloadavg()[0]
    finally:
        engine.stop()
    print(f"{streams} streams at once, {tokens} tokens each, best of {rounds}; load {load:.1f}->{load_after:.1f}")
    print(f"{'transport':<18} {'raw µs/chunk':>13} {'recorded':>9} {'recording adds':>15}")
    for name, runs in best.items():
        raw, recorded = runs[False], runs[True]
        print(f"{name:<18} {raw:>13.1f} {recorded:>9.1f} {recorded - raw:>15.1f}")


if __name__ == "__main__":
    main()
