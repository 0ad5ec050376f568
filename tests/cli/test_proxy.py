"""The impairment proxy on real sockets: a paced SSE upstream, the proxy in front, a real httpx client behind.

Arrival times are taken on the client with ``time.perf_counter()``. ``iter_raw()`` yields one piece per HTTP
chunk the proxy wrote (h11 never merges chunks), so its pieces show the proxy's write boundaries. Timing is
only asserted as lower bounds or as coarse structure (bursts), never as tight upper bounds.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import secrets
import signal
import ssl
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx
import pytest
from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import StreamingResponse
from websockets.exceptions import ConnectionClosedError
from websockets.sync.client import connect as websocket_connect

from streamscope_cli.proxy import (
    REQUEST_ID_HEADER,
    BufferCoalesce,
    Drop,
    ProxyConfig,
    Rechunk,
    Stall,
    create_app,
    trace_id_of,
)
from streamscope_cli.proxy.app import HEARTBEAT_S
from streamscope_cli.proxy.framing import EventFramer
from streamscope_cli.proxy.impairments import (
    Finish,
    Held,
    Piece,
    Schedule,
    Shaper,
    StreamPlan,
    Wait,
    Write,
    split_write,
)
from streamscope_cli.workload.ground_truth import GroundTruth, MemorySink
from streamscope_collector.serving import BackgroundServer
from tests.support import free_port, wait_until

EVENTS = 30
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta-theta"]
DONE = b"data: [DONE]\n\n"


def event_bytes(i: int) -> bytes:
    return f'data: {{"i": {i}, "content": "{WORDS[i % len(WORDS)]}"}}\n\n'.encode()


def upstream_events(n: int = EVENTS) -> list[bytes]:
    """What the upstream sends for ``n`` tokens: n data events then [DONE] (n + 1 SSE events)."""
    return [event_bytes(i) for i in range(n)] + [DONE]


# ---------------------------------------------------------------- the upstream engine, the proxy, the client


@dataclass
class Upstream:
    url: str
    seen: list[dict]
    """One entry per request: method, path, query, headers, body."""
    cut_short: list[int]
    """For each stream the upstream could not finish (its client went away): how many events it had sent."""

    def last(self) -> dict:
        return self.seen[-1]


def ndjson_line(i: int) -> bytes:
    """One line of an Ollama-style stream: a JSON document and its newline."""
    return b'{"message":{"role":"assistant","content":"t%d"},"done":%s}\n' % (
        i,
        b"false" if i < EVENTS - 1 else b"true",
    )


def message(i: int) -> str | bytes:
    """The upstream WebSocket's message ``i``: every fifth one binary."""
    text = json.dumps({"type": "response.output_text.delta", "delta": WORDS[i % len(WORDS)], "i": i})
    return text.encode() if i % 5 == 4 else text


def upstream_app(seen: list[dict], cut_short: list[int]) -> FastAPI:
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    async def note(request: Request) -> bytes:
        body = await request.body()
        seen.append(
            {
                "method": request.method,
                "path": request.url.path,
                "query": request.url.query,
                "headers": dict(request.headers),
                "body": body,
            }
        )
        return body

    @app.post("/v1/chat/completions")
    async def chat(request: Request, n: int = EVENTS, gap_ms: float = 10.0) -> StreamingResponse:
        await note(request)

        async def events():
            sent = 0
            try:
                for i in range(n):
                    await asyncio.sleep(gap_ms / 1000)
                    yield event_bytes(i)
                    sent += 1
                yield DONE
            finally:
                if sent < n:
                    cut_short.append(sent)

        return StreamingResponse(events(), media_type="text/event-stream", headers={"x-engine": "paced"})

    @app.post("/api/chat")
    async def ollama_chat(request: Request, n: int = EVENTS, gap_ms: float = 10.0) -> StreamingResponse:
        await note(request)

        async def lines():
            for i in range(n):
                await asyncio.sleep(gap_ms / 1000)
                yield ndjson_line(i)

        return StreamingResponse(lines(), media_type="application/x-ndjson")

    @app.post("/v1/broken")
    async def broken(request: Request) -> StreamingResponse:
        await note(request)

        async def events():
            for i in range(3):
                await asyncio.sleep(0.005)
                yield event_bytes(i)
            raise RuntimeError("engine crashed mid-stream (on purpose, for the test)")

        return StreamingResponse(events(), media_type="text/event-stream")

    @app.websocket("/v1/realtime")
    async def realtime(websocket: WebSocket) -> None:
        """Answers each request (``{"n": N, "gap_ms": G}``) with N messages, paced: text, but every fifth binary."""
        seen.append({"path": "/v1/realtime", "headers": dict(websocket.headers)})
        await websocket.accept()
        while True:
            try:
                request = json.loads(await websocket.receive_text())
            except WebSocketDisconnect:
                return
            n, sent = request.get("n", EVENTS), 0
            try:
                for i in range(n):
                    await asyncio.sleep(request.get("gap_ms", 10.0) / 1000)
                    await (websocket.send_bytes if i % 5 == 4 else websocket.send_text)(message(i))
                    sent += 1
            except Exception:  # the socket closed under a send
                cut_short.append(sent)
                return

    @app.api_route("/v1/models", methods=["GET", "HEAD"])
    async def models(request: Request) -> dict:
        await note(request)
        return {"object": "list", "data": [{"id": "m"}]}

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        body = await note(request)
        return {"body": body.decode(), "query": request.url.query, "method": request.method}

    return app


@pytest.fixture(scope="module")
def upstream():
    seen: list[dict] = []
    cut_short: list[int] = []
    server = BackgroundServer(upstream_app(seen, cut_short), name="upstream").start()
    yield Upstream(f"http://127.0.0.1:{server.port}", seen, cut_short)
    server.stop()


class RuleRecords(MemorySink):
    """What the impairment rules did: ``snapshot`` leaves out the proxy's own pauses (``watchdog`` records), which a
    busy test host may cause at any time; ``all_records`` has them too."""

    def snapshot(self) -> list[GroundTruth]:
        return [r for r in self.all_records() if r.detail.get("source") != "watchdog"]

    def all_records(self) -> list[GroundTruth]:
        return super().snapshot()


@pytest.fixture
def start_proxy():
    servers: list[BackgroundServer] = []

    def start(upstream_url: str, *rules, seed: int | None = None) -> tuple[str, RuleRecords]:
        sink = RuleRecords()
        config = ProxyConfig(upstream=upstream_url, node="gateway-7", impairments=rules, seed=seed)
        server = BackgroundServer(create_app(config, sink), name="proxy").start()
        servers.append(server)
        return f"http://127.0.0.1:{server.port}", sink

    yield start
    for server in servers:
        server.stop()


def new_traceparent() -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return f"00-{trace_id}-{secrets.token_hex(8)}-01", trace_id


@dataclass
class Reading:
    status: int
    headers: httpx.Headers
    reads: list[tuple[float, bytes]]
    """(perf_counter at arrival, bytes) per piece ``iter_raw`` gave."""
    error: Exception | None
    trace_id: str

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.reads)

    def gaps(self) -> list[float]:
        return [b[0] - a[0] for a, b in itertools.pairwise(self.reads)]

    def bursts(self, quiet_s: float = 0.03) -> list[list[bytes]]:
        """Reads grouped into bursts: a new burst starts after ``quiet_s`` without data."""
        groups: list[list[bytes]] = [[self.reads[0][1]]]
        for gap, (_, data) in zip(self.gaps(), self.reads[1:]):
            if gap > quiet_s:
                groups.append([])
            groups[-1].append(data)
        return groups


def read_stream(base: str, path: str = "/v1/chat/completions", *, params: dict | None = None) -> Reading:
    traceparent, trace_id = new_traceparent()
    reads: list[tuple[float, bytes]] = []
    error = None
    with (
        httpx.Client(base_url=base, timeout=10.0) as client,
        client.stream(
            "POST", path, params=params, json={"model": "m", "stream": True}, headers={"traceparent": traceparent}
        ) as response,
    ):
        try:
            for data in response.iter_raw():
                reads.append((time.perf_counter(), data))
        except httpx.RemoteProtocolError as exc:
            error = exc
    return Reading(response.status_code, response.headers, reads, error, trace_id)


def records_for(sink: RuleRecords, trace_id: str, cause: str | None = None) -> list[GroundTruth]:
    return [r for r in sink.snapshot() if r.trace_id == trace_id and (cause is None or r.cause == cause)]


def event_boundaries(events: list[bytes]) -> set[int]:
    return set(itertools.accumulate(len(e) for e in events))


# ---------------------------------------------------------------- pass-through


def test_pass_through_keeps_bytes_headers_query_and_trace_context(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url)
    direct = read_stream(upstream.url)
    proxied = read_stream(proxy, params={"n": EVENTS, "tag": "a b/ü"})
    assert proxied.status == 200 and proxied.error is None
    assert proxied.body == direct.body == b"".join(upstream_events())
    assert proxied.headers["content-type"].startswith("text/event-stream")
    assert proxied.headers["x-engine"] == "paced"
    assert len(proxied.headers[REQUEST_ID_HEADER]) == 32
    assert len(proxied.headers.get_list("server")) <= 1 and len(proxied.headers.get_list("date")) <= 1
    # unimpaired: the events still come one by one, paced by the engine
    assert len(proxied.reads) == len(upstream_events())
    assert statistics.median(proxied.gaps()) >= 0.005

    seen = upstream.last()
    assert seen["query"] == "n=30&tag=a+b%2F%C3%BC"
    assert trace_id_of(seen["headers"]["traceparent"]) == proxied.trace_id
    assert seen["headers"]["host"] == upstream.url.removeprefix("http://")
    assert sink.snapshot() == []


@pytest.mark.parametrize("pause_s", [0.4, 0.12])
def test_a_pause_of_the_proxy_itself_is_recorded_for_every_stream_it_relays(upstream, pause_s):
    """The proxy's loop held up (as on a starved machine), long enough to make a stall (0.12 s: shorter than a
    retransmission timeout, as long as a third of the shortest stall and more): each stream it was relaying then
    gets a ``connection`` record of the pause, from the watchdog, with its trace id."""
    sink = RuleRecords()
    app = create_app(ProxyConfig(upstream=upstream.url, node="gateway-7"), sink)
    server = BackgroundServer(app, name="proxy").start()
    readings: list[Reading] = []
    try:
        base = f"http://127.0.0.1:{server.port}"
        reader = threading.Thread(target=lambda: readings.append(read_stream(base, params={"n": 60, "gap_ms": 10})))
        reader.start()
        wait_until(lambda: app.state.proxy._relaying, "the proxy relaying the body")
        app.state.proxy._watchdog.get_loop().call_soon_threadsafe(time.sleep, pause_s)  # the loop stops
        reader.join(30)
    finally:
        server.stop()
    (reading,) = readings
    assert reading.error is None and reading.body == b"".join(upstream_events(60))
    paused = [r for r in sink.all_records() if r.trace_id == reading.trace_id]
    assert paused and all(
        r.cause == "connection" and r.detail == {"kind": "paused", "source": "watchdog"} for r in paused
    )
    assert max(r.magnitude for r in paused) >= pause_s - HEARTBEAT_S and paused[0].node == "gateway-7"
    assert records_for(sink, reading.trace_id) == []  # no rule did anything


def test_non_sse_routes_are_forwarded_as_is(upstream, start_proxy):
    proxy, _ = start_proxy(upstream.url)
    with httpx.Client(base_url=proxy, timeout=10.0) as client:
        echoed = client.post("/echo?x=1&x=2", content=b'{"hello": "world"}', headers={"x-custom": "kept"})
        assert echoed.status_code == 200
        assert echoed.json() == {"body": '{"hello": "world"}', "query": "x=1&x=2", "method": "POST"}
        assert upstream.last()["headers"]["x-custom"] == "kept"
        assert upstream.last()["headers"]["content-length"] == "18"

        models = client.get("/v1/models")
        assert models.status_code == 200 and models.json()["data"] == [{"id": "m"}]
        assert models.headers["content-type"] == "application/json"

        missing = client.get("/nowhere")  # the upstream's own 404 comes back, not one of the proxy's
        assert missing.status_code == 404 and missing.json() == {"detail": "Not Found"}

        bad = client.post("/v1/chat/completions?n=lots", json={})  # bad client input is the upstream's business
        assert bad.status_code == 422


def test_a_streamed_upload_and_head_requests_are_forwarded(upstream, start_proxy):
    proxy, _ = start_proxy(upstream.url)

    def upload():
        yield b'{"part": '
        yield b'"one"}'

    with httpx.Client(base_url=proxy, timeout=10.0) as client:
        echoed = client.post("/echo", content=upload())  # chunked transfer encoding, no content-length
        assert echoed.json()["body"] == '{"part": "one"}'
        assert upstream.last()["body"] == b'{"part": "one"}'
        head = client.head("/v1/models")
        assert head.status_code == 200 and head.content == b""
        assert upstream.last()["method"] == "HEAD"


@pytest.mark.parametrize("rules", [(), (BufferCoalesce(flush_ms=30),)], ids=["relayed", "impaired"])
def test_a_client_that_leaves_makes_the_proxy_hang_up_on_the_engine(upstream, start_proxy, rules):
    cut_before = len(upstream.cut_short)
    proxy, _ = start_proxy(upstream.url, *rules)
    with (
        httpx.Client(base_url=proxy, timeout=10.0) as client,
        client.stream("POST", "/v1/chat/completions", json={}) as response,
    ):
        for _ in itertools.islice(response.iter_raw(), 2):
            pass
    wait_until(
        lambda: len(upstream.cut_short) > cut_before, "the proxy to hang up on the engine", timeout_s=5, interval_s=0.01
    )
    assert upstream.cut_short[cut_before:] and upstream.cut_short[-1] < EVENTS


# ---------------------------------------------------------------- buffer_coalesce


def test_buffer_coalesce_by_time_turns_a_paced_stream_into_bursts(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, BufferCoalesce(flush_ms=80))
    wall_before = time.time_ns()
    reading = read_stream(proxy)
    wall_after = time.time_ns()
    events = upstream_events()
    assert reading.error is None
    assert reading.body == b"".join(events)

    # ~300 ms of 10 ms-paced events flushed every ~80 ms: a handful of bursts, each several events long
    assert len(reading.reads) <= len(events) // 3
    bursts = reading.bursts()
    assert 2 <= len(bursts) <= len(events) // 3
    # nothing arrives between flushes (the last flush comes early: the upstream ended)
    assert all(gap >= 0.06 for gap in reading.gaps()[:-1]), reading.gaps()
    # flushes happen on event boundaries: no event is ever split
    assert {end for end in itertools.accumulate(len(d) for _, d in reading.reads)} <= event_boundaries(events)

    records = records_for(sink, reading.trace_id)
    assert records and all(r.cause == "network_buffering" for r in records)
    assert {r.request_id for r in records} == {reading.headers[REQUEST_ID_HEADER]}
    assert {r.node for r in records} == {"gateway-7"}
    assert {r.detail["kind"] for r in records} == {"buffer_coalesce"}
    held = sorted(i for r in records for i in r.chunk_indices)
    assert len(held) == len(set(held)) >= 0.7 * len(events)
    assert set(held) <= set(range(len(events)))
    for record in records:
        assert wall_before <= record.start_ns < record.end_ns <= wall_after
        assert record.magnitude == pytest.approx((record.end_ns - record.start_ns) / 1e9)
    assert max(r.magnitude for r in records) >= 0.07


def test_buffer_coalesce_by_bytes_flushes_whole_events_once_enough_is_held(upstream, start_proxy):
    events = upstream_events()
    flush_bytes = 4 * len(events[0])
    proxy, sink = start_proxy(upstream.url, BufferCoalesce(flush_bytes=flush_bytes))
    reading = read_stream(proxy)
    assert reading.body == b"".join(events)
    sizes = [len(data) for _, data in reading.reads]
    assert all(size >= flush_bytes for size in sizes[:-1]), sizes  # only the final flush (at the end) is short
    assert len(sizes) <= len(events) // 3
    assert {end for end in itertools.accumulate(sizes)} <= event_boundaries(events)
    records = records_for(sink, reading.trace_id, "network_buffering")
    assert len(records) >= len(sizes) - 1
    # the event that fills the buffer goes straight out: it was not held back
    first_flush_events = len([end for end in sorted(event_boundaries(events)) if end <= sizes[0]])
    assert records[0].chunk_indices == tuple(range(first_flush_events - 1))


# ---------------------------------------------------------------- stall


def test_stall_pauses_once_right_after_the_configured_event(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Stall(after_event=9, duration_ms=400))
    reading = read_stream(proxy)
    events = upstream_events()
    assert reading.error is None and reading.body == b"".join(events)

    gaps = reading.gaps()
    long_gaps = [i for i, gap in enumerate(gaps) if gap >= 0.2]
    assert len(long_gaps) == 1, gaps
    (at,) = long_gaps
    assert gaps[at] >= 0.39
    delivered_before = sum(len(data) for _, data in reading.reads[: at + 1])
    assert delivered_before == sum(len(e) for e in events[:10])  # events 0..9, then the pause

    (record,) = records_for(sink, reading.trace_id)
    assert record.cause == "connection"
    assert record.detail == {"kind": "stall", "after_event": "9"}
    assert record.request_id == reading.headers[REQUEST_ID_HEADER]
    assert (record.end_ns - record.start_ns) / 1e9 >= 0.39
    assert record.magnitude >= 0.39
    assert 10 in record.chunk_indices  # the engine kept sending: the next event waited out the stall
    assert min(record.chunk_indices) == 10


def test_a_stall_pauses_a_stream_of_json_lines_after_its_line(upstream, start_proxy):
    """Ollama's streams are a JSON document a line, not SSE: the rules count lines as events, byte for byte."""
    proxy, sink = start_proxy(upstream.url, Stall(after_event=9, duration_ms=400))
    reading = read_stream(proxy, "/api/chat")
    lines = [ndjson_line(i) for i in range(EVENTS)]
    assert reading.error is None and reading.body == b"".join(lines)
    long_gaps = [i for i, gap in enumerate(reading.gaps()) if gap >= 0.2]
    assert len(long_gaps) == 1, reading.gaps()
    assert sum(len(data) for _, data in reading.reads[: long_gaps[0] + 1]) == sum(len(line) for line in lines[:10])
    (record,) = records_for(sink, reading.trace_id)
    assert (record.cause, min(record.chunk_indices)) == ("connection", 10)


@dataclass
class Conversation:
    messages: list[tuple[float, str | bytes]]
    """(perf_counter at arrival, message) per message the client got."""
    request_id: str
    trace_id: str

    def gaps(self) -> list[float]:
        return [b[0] - a[0] for a, b in itertools.pairwise(self.messages)]


def converse(base: str, n: int = EVENTS) -> Conversation:
    """One request over a WebSocket through the proxy, its ``n`` answers read as they come."""
    traceparent, trace_id = new_traceparent()
    url = base.replace("http", "ws", 1) + "/v1/realtime"
    with websocket_connect(url, additional_headers={"traceparent": traceparent}, open_timeout=10) as websocket:
        websocket.send(json.dumps({"n": n}))
        got = []
        for _ in range(n):
            received = websocket.recv(timeout=10)
            got.append((time.perf_counter(), received))
        request_id = websocket.response.headers[REQUEST_ID_HEADER]
    return Conversation(got, request_id, trace_id)


def test_a_websocket_is_relayed_message_by_message_with_its_handshake(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url)
    talk = converse(proxy)
    assert [m for _, m in talk.messages] == [message(i) for i in range(EVENTS)]  # text stays text, binary binary
    (handshake,) = [seen for seen in upstream.seen if seen["headers"].get("traceparent", "").count(talk.trace_id)]
    assert handshake["path"] == "/v1/realtime" and sink.snapshot() == []


def test_a_stall_holds_a_websocket_after_its_message(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Stall(after_event=9, duration_ms=400))
    talk = converse(proxy)
    assert [m for _, m in talk.messages] == [message(i) for i in range(EVENTS)]
    long_gaps = [i for i, gap in enumerate(talk.gaps()) if gap >= 0.2]
    assert long_gaps == [9] and talk.gaps()[9] >= 0.39, talk.gaps()
    (record,) = records_for(sink, talk.trace_id)
    assert (record.cause, record.detail, record.request_id) == (
        "connection",
        {"kind": "stall", "after_event": "9"},
        talk.request_id,
    )
    assert min(record.chunk_indices) == 10 and record.magnitude >= 0.39


def test_buffering_holds_websocket_messages_and_releases_them_whole(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, BufferCoalesce(flush_ms=150, flush_bytes=1 << 20))
    talk = converse(proxy)
    assert [m for _, m in talk.messages] == [message(i) for i in range(EVENTS)]  # each message whole, none merged
    bursts = 1 + sum(gap > 0.06 for gap in talk.gaps())
    assert bursts <= EVENTS // 5, talk.gaps()  # 30 messages 10 ms apart, released every 150 ms
    held = records_for(sink, talk.trace_id, "network_buffering")
    assert held and all(r.detail == {"kind": "buffer_coalesce"} for r in held)


def test_a_websocket_to_an_unreachable_upstream_is_closed_with_the_reason(upstream, start_proxy):
    proxy, _ = start_proxy(f"http://127.0.0.1:{free_port()}")
    url = proxy.replace("http", "ws", 1) + "/v1/realtime"
    with websocket_connect(url, open_timeout=10) as websocket, pytest.raises(ConnectionClosedError) as closed:
        websocket.recv(timeout=10)
    assert closed.value.rcvd is not None and closed.value.rcvd.code == 1011
    assert "unreachable" in closed.value.rcvd.reason


def test_a_client_that_leaves_a_websocket_ends_the_upstream_connection(upstream, start_proxy):
    proxy, _ = start_proxy(upstream.url)
    before = len(upstream.cut_short)
    with websocket_connect(proxy.replace("http", "ws", 1) + "/v1/realtime", open_timeout=10) as websocket:
        websocket.send(json.dumps({"n": 1000, "gap_ms": 5}))
        websocket.recv(timeout=10)
    cut = wait_until(lambda: upstream.cut_short[before:], "the upstream's socket closed under a send", timeout_s=10)
    assert cut[0] < 1000


# ---------------------------------------------------------------- rechunk


def test_rechunk_merge_sends_three_events_per_write(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Rechunk(merge_events=3))
    events = upstream_events()
    reading = read_stream(proxy)
    assert reading.error is None and reading.body == b"".join(events)
    ends = list(itertools.accumulate(len(data) for _, data in reading.reads))
    every_third = set(itertools.accumulate(len(b"".join(events[i : i + 3])) for i in range(0, len(events), 3)))
    assert set(ends) <= every_third
    assert len(reading.reads) <= len(events) // 3 + 2
    records = records_for(sink, reading.trace_id, "network_buffering")
    assert records and {r.detail["kind"] for r in records} == {"rechunk"}
    assert 0 in records[0].chunk_indices  # the first event waited for the next two


def test_rechunk_split_moves_write_boundaries_but_not_bytes(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Rechunk(split_bytes=7))
    events = upstream_events()
    reading = read_stream(proxy)
    assert reading.error is None and reading.body == b"".join(events)
    sizes = [len(data) for _, data in reading.reads]
    assert max(sizes) <= 7
    assert len(sizes) >= len(reading.body) // 7
    assert records_for(sink, reading.trace_id) == []  # splitting holds nothing back


# ---------------------------------------------------------------- drop


def test_drop_truncates_the_body_after_the_configured_event(upstream, start_proxy):
    cut_before = len(upstream.cut_short)
    proxy, sink = start_proxy(upstream.url, Drop(after_event=5))
    wall_before = time.time_ns()
    reading = read_stream(proxy)
    events = upstream_events()
    # what really happens: the chunked body never gets its last chunk, so httpx raises RemoteProtocolError
    assert isinstance(reading.error, httpx.RemoteProtocolError)
    assert reading.body == b"".join(events[:6])

    (record,) = records_for(sink, reading.trace_id)
    assert record.cause == "connection"
    assert record.detail["kind"] == "drop"
    assert record.start_ns == record.end_ns >= wall_before
    assert record.chunk_indices == ()
    # the proxy hung up on the engine too, so the engine stopped generating
    wait_until(
        lambda: len(upstream.cut_short) > cut_before, "the proxy to hang up on the engine", timeout_s=5, interval_s=0.01
    )
    assert upstream.cut_short[cut_before:] and upstream.cut_short[-1] < EVENTS


def test_a_drop_after_the_last_event_is_not_recorded_when_the_stream_is_shorter(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Drop(after_event=50))
    reading = read_stream(proxy, params={"n": 5, "gap_ms": 1})
    assert reading.error is None and reading.body == b"".join(upstream_events(5))
    assert records_for(sink, reading.trace_id) == []


# ---------------------------------------------------------------- probabilities and seeds


def test_probability_zero_never_impairs(upstream, start_proxy):
    rules = (
        BufferCoalesce(flush_ms=50, probability=0.0),
        Stall(after_event=0, duration_ms=300, probability=0.0),
        Rechunk(merge_events=4, probability=0.0),
        Drop(after_event=1, probability=0.0),
    )
    proxy, sink = start_proxy(upstream.url, *rules, seed=1)
    for _ in range(3):
        reading = read_stream(proxy, params={"n": 8, "gap_ms": 5})
        assert reading.error is None and reading.body == b"".join(upstream_events(8))
        assert len(reading.reads) == 9  # one write per event, as the engine wrote them
        assert max(reading.gaps()) < 0.25
    assert sink.snapshot() == []


def test_the_proxy_loads_its_certificates_once_not_per_request(upstream, start_proxy, monkeypatch):
    """A verifying TLS context costs ~30 ms of CPU to build (the system's certificates loaded and parsed): built for
    each request, it put a queue of that work in front of every stream's first byte (TTFT p50 +470 ms at 16 streams
    through the proxy) and kept the proxy's loop busy on a busy host."""
    proxy, _ = start_proxy(upstream.url)
    loads = []
    real = ssl.SSLContext.load_verify_locations
    with httpx.Client(base_url=proxy, timeout=10.0) as client:  # the test's own context, built before counting
        monkeypatch.setattr(ssl.SSLContext, "load_verify_locations", lambda *a, **k: loads.append(1) or real(*a, **k))
        for n in range(4):
            response = client.post("/v1/chat/completions", params={"n": 2, "gap_ms": 1}, json={"stream": True})
            assert response.content == b"".join(upstream_events(2)), n
    assert len(loads) <= 1


def test_path_prefix_limits_a_rule_to_matching_paths(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Drop(after_event=0, path_prefix="/v1/embeddings"))
    reading = read_stream(proxy, params={"n": 3, "gap_ms": 1})
    assert reading.error is None and sink.snapshot() == []


def test_the_same_seed_makes_the_same_decisions(upstream, start_proxy):
    def decisions(seed: int) -> list[bool]:
        proxy, sink = start_proxy(upstream.url, Stall(after_event=0, duration_ms=5, probability=0.5), seed=seed)
        traces = [read_stream(proxy, params={"n": 2, "gap_ms": 1}).trace_id for _ in range(12)]
        stalled = {r.trace_id for r in sink.snapshot()}
        return [trace in stalled for trace in traces]

    first = decisions(seed=1234)
    assert 0 < sum(first) < len(first)  # a real draw, not all or nothing
    assert decisions(seed=1234) == first
    schedule_a, schedule_b = (Schedule([Stall(duration_ms=1, probability=0.5)], seed=s) for s in (1, 2))
    assert [schedule_a.plan("/").impaired for _ in range(64)] != [schedule_b.plan("/").impaired for _ in range(64)]


# ---------------------------------------------------------------- upstream failures


def test_unreachable_upstream_is_a_502_and_the_proxy_keeps_serving(start_proxy):
    port = free_port()
    proxy, _ = start_proxy(f"http://127.0.0.1:{port}")
    with httpx.Client(base_url=proxy, timeout=10.0) as client:
        for _ in range(2):
            response = client.post("/v1/chat/completions", json={"stream": True})
            assert response.status_code == 502
            assert response.headers["content-type"] == "application/json"
            message = response.json()["error"]["message"]
            assert f"127.0.0.1:{port}" in message and "unreachable" in message
        # the engine comes up on that port: the same proxy now gets through
        seen: list[dict] = []
        late = BackgroundServer(upstream_app(seen, []), port=port, name="late-upstream").start()
        try:
            assert client.get("/v1/models").json()["data"] == [{"id": "m"}]
        finally:
            late.stop()


def test_an_upstream_that_breaks_mid_stream_cuts_the_client_and_nothing_else(upstream, start_proxy):
    proxy, sink = start_proxy(upstream.url, Stall(after_event=0, duration_ms=10))
    broken = read_stream(proxy, "/v1/broken")
    assert isinstance(broken.error, httpx.RemoteProtocolError)
    assert broken.body == b"".join(event_bytes(i) for i in range(3))
    assert [r.detail["kind"] for r in records_for(sink, broken.trace_id)] == ["stall"]  # no invented drop
    after = read_stream(proxy, params={"n": 3, "gap_ms": 1})
    assert after.error is None and after.body == b"".join(upstream_events(3))


# ---------------------------------------------------------------- config


def test_from_dict_builds_the_documented_example():
    config = ProxyConfig.from_dict(
        {
            "upstream": "http://127.0.0.1:8000/",
            "node": "gateway-1",
            "seed": 7,
            "impairments": [
                {"kind": "buffer_coalesce", "flush_ms": 200, "flush_bytes": 4096, "probability": 0.3},
                {"kind": "stall", "after_event": 10, "duration_ms": 800, "path_prefix": "/v1/chat"},
                {"kind": "rechunk", "merge_events": 3},
                {"kind": "drop", "after_event": 25, "probability": 0.02},
            ],
        }
    )
    assert config.upstream == "http://127.0.0.1:8000"
    assert config.impairments == (
        BufferCoalesce(flush_ms=200.0, flush_bytes=4096, probability=0.3),
        Stall(after_event=10, duration_ms=800.0, path_prefix="/v1/chat"),
        Rechunk(merge_events=3),
        Drop(after_event=25, probability=0.02),
    )
    assert ProxyConfig.from_dict({"upstream": "https://engine"}).impairments == ()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], "must be a mapping"),
        ({}, "upstream is required"),
        ({"upstream": "localhost:8000"}, "http:// or https:// URL"),
        ({"upstream": "http://h", "nodes": "x"}, "unknown key 'nodes'"),
        ({"upstream": "http://h", "seed": "7"}, "seed must be an integer"),
        ({"upstream": "http://h", "impairments": {"kind": "drop"}}, "impairments must be a list"),
        ({"upstream": "http://h", "impairments": [{"kind": "jitter"}]}, r"impairments\[0\]: kind must be one of"),
        ({"upstream": "http://h", "impairments": ["drop"]}, r"impairments\[0\]: each impairment must be a mapping"),
        (
            {"upstream": "http://h", "impairments": [{"kind": "drop"}]},
            r"impairments\[0\] \(drop\): missing after_event",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "stall", "duration_ms": 5}, {"kind": "stall"}]},
            r"impairments\[1\] \(stall\): missing duration_ms",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "stall", "duration_ms": "slow"}]},
            r"impairments\[0\] \(stall\): duration_ms must be a number, got 'slow'",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "drop", "after_event": 1, "probability": 1.5}]},
            "probability must be a number from 0 to 1",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "drop", "after_event": True}]},
            "after_event must be an integer",
        ),
        ({"upstream": "http://h", "impairments": [{"kind": "buffer_coalesce"}]}, "set flush_bytes, flush_ms or both"),
        (
            {"upstream": "http://h", "impairments": [{"kind": "rechunk", "merge_events": 1}]},
            "merge_events must be an integer >= 2",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "stall", "duration_ms": 5, "path_prefix": "v1"}]},
            "path_prefix must be empty or start with '/'",
        ),
        (
            {"upstream": "http://h", "impairments": [{"kind": "stall", "duration_ms": 5, "after": 3}]},
            r"unknown key 'after'; expected one of after_event, duration_ms, path_prefix, probability",
        ),
    ],
)
def test_from_dict_rejects_bad_input_with_a_clear_message(data, message):
    with pytest.raises(ValueError, match=message):
        ProxyConfig.from_dict(data)


# ---------------------------------------------------------------- pure parts


def test_the_framer_cuts_whole_events_whatever_the_reads():
    # CR, LF and CRLF line ends; a stray blank line belongs to the next event; the last one ends in a lone CR
    events = [b'data: {"a":1}\n\n', b": keep-alive\r\n\r\n", b"\ndata: z\n\n", b"event: x\rdata: y\r\r"]
    body = b"".join(events)
    for size in (1, 2, 5, len(body)):
        framer = EventFramer()
        cut = [e for i in range(0, len(body), size) for e in framer.feed(body[i : i + size])] + framer.close()
        assert cut == events, size
    framer = EventFramer()
    assert framer.feed(b"data: 1\n\ndata: no blank line") == [b"data: 1\n\n"]
    assert framer.close() == [b"data: no blank line"]


def test_the_shaper_holds_and_flushes_on_its_deadline():
    ms = 1_000_000
    shaper = Shaper(StreamPlan(coalesce=BufferCoalesce(flush_ms=50)))
    shaper.push(b"a\n\n")
    assert shaper.poll(0) == Wait(50 * ms)
    shaper.push(b"b\n\n")
    assert shaper.poll(20 * ms) == Wait(50 * ms)
    write = shaper.poll(50 * ms)
    assert isinstance(write, Write) and write.data == b"a\n\nb\n\n"
    assert shaper.take_facts() == [Held("buffer_coalesce", 0, 50 * ms, (0, 1), 50 * ms)]
    shaper.end()
    assert shaper.poll(60 * ms) == Finish(True)
    assert shaper.take_facts() == []


def test_the_shaper_cuts_a_merged_write_at_the_drop():
    shaper = Shaper(StreamPlan(rechunk=Rechunk(merge_events=3), drop=Drop(after_event=1)))
    for data in (b"a\n\n", b"b\n\n", b"c\n\n"):
        shaper.push(data)
    write = shaper.poll(0)
    assert isinstance(write, Write) and write.data == b"a\n\nb\n\n"
    assert shaper.poll(1) == Finish(False)


def test_split_write_keeps_bytes_and_marks_event_ends():
    write = Write((Piece(0, b"abcde"), Piece(1, b"fgh")))
    pieces = split_write(write, 3)
    assert [w.data for w in pieces] == [b"abc", b"def", b"gh"]
    assert [(p.index, p.ends_event) for w in pieces for p in w.pieces] == [
        (0, False),
        (0, True),
        (1, False),
        (1, True),
    ]


def test_trace_id_of_reads_w3c_traceparent_only():
    trace_id = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace_id_of(f"00-{trace_id}-00f067aa0ba902b7-01") == trace_id
    assert trace_id_of(None) == ""
    assert trace_id_of("00-" + "0" * 32 + "-00f067aa0ba902b7-01") == ""
    assert trace_id_of("garbage") == ""


# ---------------------------------------------------------------- the long-running process


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_run_proxy_serves_until_a_signal_and_exits_cleanly(upstream, signum):
    script = (
        "import sys\n"
        "from streamscope_cli.proxy import ProxyConfig, run_proxy\n"
        "run_proxy(ProxyConfig(upstream=sys.argv[1]), port=0, on_ready=lambda port: print(port, flush=True))\n"
        "print('stopped', flush=True)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, upstream.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        response = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=10.0)
        assert response.status_code == 200
        os.kill(process.pid, signum)
        out, err = process.communicate(timeout=15)
        assert process.returncode == 0, err
        assert out.strip() == "stopped"
        assert "Traceback" not in err
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
