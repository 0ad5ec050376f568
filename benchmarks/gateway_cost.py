"""What `streamscope gateway` costs a stream: the latency it adds to each chunk, and its CPU per chunk relayed.

The upstream is a minimal SSE server in a process of its own that emits OpenAI-style chunks at a fixed pace (one every
``--pace-ms`` per stream), each stamped with the monotonic clock just before it is written. An engine would mix its
own jitter and its CPU into the figures (llama-server's decode shares this machine's cores with the gateway); the
paced server adds next to nothing, so what differs between the paths is the gateway. The same server takes the
gateway's OTLP exports and drops them, so the recording's cost includes encoding and sending its spans.

The client, this process, opens ``streams`` connections at once (their starts spread over one pace) and, for every
chunk, takes the time it read it less its stamp: the chunk's latency from the upstream's write to the client's read.
Three paths, one after another: direct to the upstream; through the gateway's forwarding alone (its ASGI app without
``StreamMiddleware``); through ``streamscope gateway`` itself, recording. The gateway's CPU is its process's user and
system time over the run, divided by the chunks it relayed; the upstream's, beside it, is what writing those chunks
costs a minimal server (mostly the kernel's loopback send). "+p50" and "+p99" are the path's percentile less the
direct path's, at the same number of streams.

    python -m benchmarks.gateway_cost [--quick] [--chunks 300] [--pace-ms 20] [--streams 16,64]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

_STAMP = re.compile(rb'"t":(\d+)\}')
_CHUNK = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"tok "},"finish_reason":null}],"t":%d}\n\n'
)
_END = (
    b'data: {"id":"chatcmpl-1","object":"chat.completion.chunk","model":"m",'
    b'"choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
    b'"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}\n\n'
    b"data: [DONE]\n\n"
)
_TAIL = 256
"""Bytes kept from one read for the next: more than a stamp, so one split between reads is still found."""
_TICK_S = 1 / os.sysconf("SC_CLK_TCK")


# --- the upstream: a paced SSE server --------------------------------------------------------------------------------


async def _upstream_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
            path = head[0].split(" ")[1]
            headers = {name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in head[1:])}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            if path == "/v1/traces":  # the gateway's spans: taken and dropped
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
            else:
                request = json.loads(body)
                await _paced_stream(writer, request["max_tokens"], request["pace_ms"] / 1e3)
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                return
    except (asyncio.IncompleteReadError, ConnectionError):
        return
    finally:
        writer.close()


async def _paced_stream(writer: asyncio.StreamWriter, chunks: int, pace_s: float) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
    start = time.monotonic()
    for index in range(chunks):
        await asyncio.sleep(max(0.0, start + index * pace_s - time.monotonic()))
        event = _CHUNK % time.monotonic_ns()
        writer.write(b"%x\r\n%s\r\n" % (len(event), event))
        await writer.drain()
    end = _END % (chunks, chunks + 8)
    writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(end), end))


def _serve_upstream() -> None:
    async def main() -> None:
        server = await asyncio.start_server(_upstream_connection, "127.0.0.1", 0, backlog=1024)
        print(server.sockets[0].getsockname()[1], flush=True)
        await server.serve_forever()

    asyncio.run(main())


def _serve_forwarding_only(upstream: str) -> None:
    """The gateway's forwarding app alone, served as the gateway serves it: the path without the recording."""
    from streamscope_cli.gateway.app import Gateway
    from streamscope_cli.gateway.run import listening_socket, serve

    sock = listening_socket("127.0.0.1", 0)
    print(sock.getsockname()[1], flush=True)
    serve(Gateway(upstream), sock)


# --- the processes ---------------------------------------------------------------------------------------------------


@dataclass
class Child:
    process: subprocess.Popen[str]
    port: int

    def cpu_s(self) -> tuple[float, float]:
        """The process's user and system time so far."""
        with open(f"/proc/{self.process.pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return int(fields[11]) * _TICK_S, int(fields[12]) * _TICK_S


@contextmanager
def _child(command: list[str]) -> Iterator[Child]:
    """A child that prints the port it listens on, as its first line, or the gateway's announcement."""
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    assert process.stdout is not None
    line = process.stdout.readline()
    port = re.search(r"(\d+)(?: ->|$)", line.strip())
    if port is None:
        process.kill()
        raise SystemExit(f"{command[2:4]} did not start: {line!r}")
    try:
        yield Child(process, int(port[1]))
    finally:
        process.terminate()
        process.wait(30)
        process.stdout.close()


# --- the client ------------------------------------------------------------------------------------------------------


async def _read_stream(port: int, chunks: int, pace_ms: float, delay_s: float, latencies: list[int]) -> None:
    await asyncio.sleep(delay_s)
    body = json.dumps({"model": "m", "stream": True, "max_tokens": chunks, "pace_ms": pace_ms}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/chat/completions HTTP/1.1\r\nhost: upstream\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
    )
    tail = b""
    while data := await reader.read(65536):
        now = time.monotonic_ns()
        buffer = tail + data
        end = 0
        for stamp in _STAMP.finditer(buffer):
            latencies.append(now - int(stamp[1]))
            end = stamp.end()
        tail = buffer[max(end, len(buffer) - _TAIL) :]
    writer.close()


def _run(port: int, streams: int, chunks: int, pace_ms: float) -> list[int]:
    """Latencies (ns) of every chunk of ``streams`` streams read at once through ``port``."""
    latencies: list[int] = []

    async def main() -> None:
        spread = pace_ms / 1e3 / streams
        await asyncio.gather(*(_read_stream(port, chunks, pace_ms, i * spread, latencies) for i in range(streams)))

    asyncio.run(main())
    return latencies


def _percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1e6


@dataclass(frozen=True)
class Row:
    path: str
    streams: int
    chunks: int
    p50_ms: float
    p99_ms: float
    gateway_us: tuple[float, float] | None
    """The gateway's user and system CPU per chunk."""
    upstream_us: float
    """The upstream's CPU per chunk (user and system): what writing a chunk costs a minimal server."""


def _measure(path: str, upstream: Child, gateway: Child | None, streams: int, chunks: int, pace_ms: float) -> Row:
    port = gateway.port if gateway else upstream.port
    _run(port, 4, 10, pace_ms)  # warm: connections, imports, the first spans
    gateway_before, upstream_before = gateway.cpu_s() if gateway else (0.0, 0.0), upstream.cpu_s()
    latencies = _run(port, streams, chunks, pace_ms)
    if len(latencies) != streams * chunks:
        raise SystemExit(f"{path}: {len(latencies)} chunks read of {streams * chunks}")
    per_chunk = 1e6 / len(latencies)
    gateway_us = None
    if gateway:
        (user, system), (user_before, system_before) = gateway.cpu_s(), gateway_before
        gateway_us = ((user - user_before) * per_chunk, (system - system_before) * per_chunk)
    upstream_us = (sum(upstream.cpu_s()) - sum(upstream_before)) * per_chunk
    p50, p99 = _percentile(latencies, 0.5), _percentile(latencies, 0.99)
    return Row(path, streams, len(latencies), p50, p99, gateway_us, upstream_us)


def _print_table(rows: list[Row], chunks: int, pace_ms: float) -> None:
    direct = {row.streams: row for row in rows if row.path == "direct"}
    print(f"{chunks} chunks a stream, one every {pace_ms:g} ms; latency: the upstream's write to the client's read")
    columns = [("streams", 7), ("chunks", 7), ("p50 ms", 7), ("p99 ms", 7), ("+p50 ms", 8), ("+p99 ms", 8)]
    columns += [("gateway CPU µs/chunk user sys", 29), ("upstream µs/chunk", 17)]
    print(f"{'path':20} " + " ".join(f"{name:>{width}}" for name, width in columns))
    for row in rows:
        base = direct[row.streams]
        cpu = f"{row.gateway_us[0]:24.0f} {row.gateway_us[1]:4.0f}" if row.gateway_us else f"{'-':>29}"
        print(
            f"{row.path:20} {row.streams:7} {row.chunks:7} {row.p50_ms:7.2f} {row.p99_ms:7.2f} "
            f"{row.p50_ms - base.p50_ms:8.2f} {row.p99_ms - base.p99_ms:8.2f} {cpu} {row.upstream_us:17.0f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="40 chunks a stream: the same table, sooner")
    parser.add_argument("--chunks", type=int, default=300, help="chunks per stream")
    parser.add_argument("--pace-ms", type=float, default=20.0, help="one chunk every this many ms, per stream")
    parser.add_argument("--streams", default="16,64", help="concurrent streams, one run each")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--serve-forwarding-only", metavar="UPSTREAM", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_upstream:
        return _serve_upstream()
    if args.serve_forwarding_only:
        return _serve_forwarding_only(args.serve_forwarding_only)
    if args.quick:
        args.chunks = 40
    counts = [int(n) for n in args.streams.split(",")]
    load_before = os.getloadavg()
    rows: list[Row] = []
    me = [sys.executable, "-m", "benchmarks.gateway_cost"]
    with _child([*me, "--serve-upstream"]) as upstream:
        upstream_url = f"http://127.0.0.1:{upstream.port}"
        recording_command = [sys.executable, "-m", "streamscope_cli.main", "gateway", "--upstream", upstream_url]
        recording_command += ["--port", "0", "--collector", upstream_url]
        with (
            _child([*me, "--serve-forwarding-only", upstream_url]) as forwarding,
            _child(recording_command) as recording,
        ):
            for streams in counts:
                rows.append(_measure("direct", upstream, None, streams, args.chunks, args.pace_ms))
                for path, gateway in (("gateway, forwarding", forwarding), ("gateway, recording", recording)):
                    rows.append(_measure(path, upstream, gateway, streams, args.chunks, args.pace_ms))
    load_after = os.getloadavg()
    _print_table(rows, args.chunks, args.pace_ms)
    print(f"load average (1 min) {load_before[0]:.2f} at start, {load_after[0]:.2f} at end; {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
