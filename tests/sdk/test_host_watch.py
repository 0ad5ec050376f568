"""The host watch on real event loops, threads and sockets: a reader's host that did not run it is told from a
network that was slow. Timings are asserted with wide bounds: the suite runs on busy machines."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import pytest

import streamscope._internal.recorder as recorder_module
from streamscope import StreamRecorder, env
from streamscope import semconv as sc
from streamscope._internal import host_watch
from tests.support import int64s, memory_provider, wait_until

BLOCK_S = 0.3
MS = 1_000  # µs


def busy(seconds: float) -> None:
    """Hold the thread (and the interpreter, between switches) for ``seconds`` of wall time, as CPU-bound code does."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def host_delays(span) -> list[int]:
    return int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US])


def gaps_us(span) -> list[int]:
    offsets = int64s(span.attributes[sc.STREAMSCOPE_CHUNKS_OFFSET_US])
    return [b - a for a, b in zip([0, *offsets], offsets)]


class PausingServer:
    """A TCP server in its own thread that sends ``first``, waits ``pause_s`` and sends ``second``: a server-side
    pause the client reads across the network, with nothing of its own host in it."""

    def __init__(self, pause_s: float) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.pause_s = pause_s
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        connection, _ = self.listener.accept()
        with connection:
            connection.sendall(b"data: first\n\n")
            time.sleep(self.pause_s)
            connection.sendall(b"data: second\n\n")
            connection.recv(1)  # until the client closes

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=10)


async def read_two_events(port: int, provider, between: Callable[[asyncio.AbstractEventLoop], None] | None) -> None:
    """Read the server's two events as a client stream; ``between`` runs on the loop after the first."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    with StreamRecorder(side="client", provider="p", tracer_provider=provider) as recorder:
        for index in range(2):
            event = await reader.readuntil(b"\n\n")
            recorder.chunk(1, len(event), len(event))
            if index == 0 and between is not None:
                between(asyncio.get_running_loop())
    writer.close()
    await writer.wait_closed()


def test_a_loop_blocked_while_the_next_chunk_waits_in_the_socket_is_the_hosts_delay():
    """The server sends the second event 50 ms after the first; the client's loop is busy for 300 ms from the
    first, so the event waits in the socket: most of its gap is the host's."""
    provider, exporter = memory_provider()
    server = PausingServer(pause_s=0.05)
    try:
        asyncio.run(read_two_events(server.port, provider, lambda loop: loop.call_soon(busy, BLOCK_S)))
    finally:
        server.close()
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_HOST_WATCH] == "asyncio"
    delays, gaps = host_delays(span), gaps_us(span)
    assert 200 * MS <= delays[1] <= gaps[1]
    assert delays[0] < 100 * MS


def test_a_server_pause_on_a_free_loop_is_not_the_hosts():
    provider, exporter = memory_provider()
    server = PausingServer(pause_s=BLOCK_S)
    try:
        asyncio.run(read_two_events(server.port, provider, None))
    finally:
        server.close()
    (span,) = exporter.get_finished_spans()
    delays, gaps = host_delays(span), gaps_us(span)
    assert gaps[1] >= 250 * MS  # the pause was measured (it was long enough to be looked at)
    assert delays[1] < 100 * MS


@pytest.mark.parametrize("block", [time.sleep, busy], ids=["sleep", "busy"])
def test_a_task_blocking_the_loop_in_a_gap_shows_on_the_chunk_after_it(block):
    provider, exporter = memory_provider()

    async def main() -> None:
        with StreamRecorder(side="client", provider="p", tracer_provider=provider) as recorder:
            recorder.chunk(1, 4, 4)
            asyncio.get_running_loop().call_later(0.03, block, BLOCK_S)
            await asyncio.sleep(0.1)  # the chunk is due after 100 ms; the loop runs again after 330 ms
            recorder.chunk(1, 4, 4)
            await asyncio.sleep(0.01)
            recorder.chunk(1, 4, 4)  # 10 ms after the one before: not looked at

    asyncio.run(main())
    (span,) = exporter.get_finished_spans()
    delays, gaps = host_delays(span), gaps_us(span)
    assert 200 * MS <= delays[1] <= gaps[1]
    assert delays[2] == 0


def test_the_heartbeat_stops_when_the_last_stream_on_its_loop_ends():
    async def main() -> None:
        first = StreamRecorder(side="client", provider="p").start()
        second = StreamRecorder(side="client", provider="p").start()
        watch = first._watch
        assert watch is not None and watch is second._watch and watch.kind == "asyncio"
        await asyncio.sleep(0.1)
        first.finish()
        beats = watch.beats
        await asyncio.sleep(0.1)
        assert watch.beating and watch.beats > beats  # the other stream still uses it
        second.finish()
        for _ in range(100):  # its next beat schedules no other
            if not watch.beating:
                break
            await asyncio.sleep(0.01)
        assert not watch.beating
        beats = watch.beats
        await asyncio.sleep(0.2)
        assert watch.beats == beats
        assert not [h for h in asyncio.get_running_loop()._scheduled if not h.cancelled()]  # nothing left to wake it

    asyncio.run(main())


def test_each_loop_has_its_own_watch_and_a_thread_without_a_loop_the_process_one():
    watches: list[host_watch.Watch] = []

    async def on_a_loop() -> None:
        recorder = StreamRecorder(side="client", provider="p").start()
        watches.append(recorder._watch)
        recorder.finish()

    asyncio.run(on_a_loop())
    asyncio.run(on_a_loop())
    recorder = StreamRecorder(side="client", provider="p").start()
    watches.append(recorder._watch)
    recorder.finish()
    assert [w.kind for w in watches] == ["asyncio", "asyncio", "thread"]
    assert watches[0] is not watches[1]


def test_a_thread_holding_the_interpreter_shows_on_a_sync_readers_chunk():
    """A thread that does not let go of the interpreter for 300 ms starves the reader (and the watch's thread):
    the reader's chunk after it carries the delay, measured by the process's watch thread."""
    provider, exporter = memory_provider()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(5.0)  # the hog keeps the interpreter until it is done
    try:
        with StreamRecorder(side="client", provider="p", tracer_provider=provider) as recorder:
            recorder.chunk(1, 4, 4)
            time.sleep(0.05)  # the watch's thread is running
            hog = threading.Thread(target=lambda: (time.sleep(0.02), busy(BLOCK_S)))
            hog.start()
            time.sleep(0.1)  # waiting for the next chunk, which comes while the hog runs: read when it is done
            recorder.chunk(1, 4, 4)
            hog.join()
    finally:
        sys.setswitchinterval(interval)
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_HOST_WATCH] == "thread"
    delays, gaps = host_delays(span), gaps_us(span)
    assert 200 * MS <= delays[1] <= gaps[1]


def test_a_sync_readers_quiet_wait_is_not_the_hosts_and_the_watch_thread_stops_after():
    provider, exporter = memory_provider()
    with StreamRecorder(side="client", provider="p", tracer_provider=provider) as recorder:
        watch = recorder._watch
        recorder.chunk(1, 4, 4)
        time.sleep(BLOCK_S)
        recorder.chunk(1, 4, 4)
    (span,) = exporter.get_finished_spans()
    assert host_delays(span)[1] < 100 * MS
    assert isinstance(watch, host_watch.ThreadWatch)
    wait_until(lambda: not watch.beating, "the watch's thread to stop", timeout_s=10)
    assert not any(t.name == "streamscope-host-watch" for t in threading.enumerate())


def test_only_the_hold_the_read_waited_out_counts():
    ms = 1_000_000  # ns
    watch = host_watch.ThreadWatch()  # never acquired: no thread, only what is recorded below
    for due, ran in ((100, 150), (200, 210), (400, 500)):
        watch._beat(due * ms, ran * ms)
    assert watch.late_us(0, 502 * ms) == 100 * MS  # read as the last hold ended
    assert watch.late_us(0, 530 * ms) == 100 * MS  # or while working through what arrived meanwhile
    assert watch.late_us(450 * ms, 503 * ms) == 50 * MS  # the part of it inside the wait
    assert watch.late_us(0, 580 * ms) == 0  # read well after it: the host ran the reader before
    assert watch.late_us(120 * ms, 212 * ms) == 10 * MS  # the hold before that read, not the ones before it
    watch._beat(600 * ms, 600 * ms + host_watch.SLACK_NS)  # late, but only by the slack: not kept
    assert watch.late_us(660 * ms, 700 * ms) == 0


def test_the_longest_hold_anywhere_in_a_wait_is_kept_apart():
    """A hold that ended long before the read did not delay the read, but an engine on the same host was held
    by it: ``holds_us`` keeps the longest hold in the wait, wherever it fell."""
    ms = 1_000_000
    watch = host_watch.ThreadWatch()
    for due, ran in ((100, 150), (200, 420), (430, 440), (600, 610)):
        watch._beat(due * ms, ran * ms)
    assert watch.late_us(0, 700 * ms) == 0  # the read came 90 ms after the last hold
    assert watch.holds_us(0, 700 * ms)[0] == 220 * MS
    assert watch.holds_us(300 * ms, 700 * ms)[0] == 120 * MS  # the part of it inside the wait
    assert watch.holds_us(450 * ms, 700 * ms)[0] == 10 * MS
    assert watch.holds_us(0, 90 * ms)[0] == 0  # before any hold
    assert watch.holds_us(0, 445 * ms)[0] == watch.late_us(0, 445 * ms) == 220 * MS  # the one the read waited out


def test_every_hold_in_a_wait_is_summed_beside_the_longest():
    """A host that held the reader four times in one wait held it for their sum: ``holds_us`` gives the longest
    and the sum of the holds inside the wait."""
    ms = 1_000_000
    watch = host_watch.ThreadWatch()
    for due, ran in ((100, 265), (300, 386), (400, 469), (500, 555)):
        watch._beat(due * ms, ran * ms)
    assert watch.holds_us(0, 600 * ms) == (165 * MS, (165 + 86 + 69 + 55) * MS)
    assert watch.holds_us(300 * ms, 600 * ms) == (86 * MS, (86 + 69 + 55) * MS)
    assert watch.holds_us(150 * ms, 420 * ms) == (115 * MS, (115 + 86 + 20) * MS)  # the parts inside the wait
    assert watch.holds_us(0, 90 * ms) == (0, 0)


def test_a_long_hold_is_not_hidden_by_a_short_one_after_it():
    """A starved process runs its loop late in fits: a long hold, then a short one while it works through what
    arrived meanwhile. The read waited out the long one."""
    ms = 1_000_000
    watch = host_watch.ThreadWatch()
    watch._beat(106 * ms, 272 * ms)
    watch._beat(292 * ms, 295 * ms)
    assert watch.late_us(100 * ms, 301 * ms) == 166 * MS
    assert watch.late_us(200 * ms, 301 * ms) == 72 * MS  # the part of it inside the wait


def test_many_small_lags_over_a_long_wait_do_not_add_up():
    """An interpreter shared with busy threads runs every beat a little late; the read is late by one lag."""
    ms = 1_000_000
    watch = host_watch.ThreadWatch()
    for beat in range(20):
        due = (100 + 20 * beat) * ms
        watch._beat(due, due + 8 * ms)
    assert watch.late_us(90 * ms, 489 * ms) <= 8 * MS


def test_an_overdue_beat_counts_before_it_runs():
    """The host is late right now: the beat due 50 ms ago has not run, so the chunk read now counts that much."""
    watch = host_watch.ThreadWatch()
    now = time.perf_counter_ns()
    watch._due_ns = now - 50_000_000
    assert 50_000 <= watch.late_us(now - 80_000_000, time.perf_counter_ns()) < 80_000
    assert watch.late_us(now - 80_000_000, now - 49_000_000) == 0  # within the slack of its due time


@pytest.mark.parametrize("encoding", ["packed", "events"])
def test_the_span_carries_what_the_schema_says_in_either_encoding(encoding):
    provider, exporter = memory_provider()

    async def main() -> None:
        with StreamRecorder(side="client", provider="p", encoding=encoding, tracer_provider=provider) as recorder:
            recorder.chunk(0, 0, 10)
            recorder.chunk(1, 4, 20)
            asyncio.get_running_loop().call_soon(time.sleep, BLOCK_S)
            await asyncio.sleep(0.01)
            recorder.chunk(1, 4, 20)

    asyncio.run(main())
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_HOST_WATCH] == "asyncio"
    if encoding == "packed":
        delays = host_delays(span)
        assert len(delays) == 3 and delays[1] == 0 and delays[2] >= 200 * MS
        assert not span.events
    else:
        assert sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US not in span.attributes
        events = [dict(e.attributes) for e in span.events]
        assert [e.get(sc.STREAMSCOPE_CHUNK_HOST_DELAY_US, 0) >= 200 * MS for e in events] == [False, False, True]
        assert sc.STREAMSCOPE_CHUNK_HOST_DELAY_US not in events[1]  # only where not 0


@pytest.mark.parametrize("side", ["server", "gateway"])
def test_servers_and_gateways_watch_their_own_host_too(side):
    """A serving process too busy to send (tokenising, an interpreter shared with other requests) is its own cause,
    told apart from its engine; the longest hold anywhere in a wait is a reader's figure only."""
    provider, exporter = memory_provider()
    with StreamRecorder(side=side, provider="p", tracer_provider=provider) as recorder:
        assert recorder._watch is not None
        recorder.chunk(1, 4, 4)
    (span,) = exporter.get_finished_spans()
    assert span.attributes[sc.STREAMSCOPE_HOST_WATCH] == "thread"  # no event loop here: the process's watch
    assert sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US in span.attributes
    assert sc.STREAMSCOPE_CHUNKS_HOST_HELD_US not in span.attributes


@pytest.mark.parametrize(
    ("value", "on"),
    [("", True), ("on", True), ("1", True), ("off", False), ("0", False), ("False", False), (" no ", False)],
)
def test_the_env_switch(monkeypatch, value, on):
    monkeypatch.setenv(env.STREAMSCOPE_HOST_WATCH, value)
    assert env.host_watch_enabled() is on


def test_a_recorder_with_the_watch_off_sends_neither_the_watch_nor_the_delays(monkeypatch):
    monkeypatch.setattr(recorder_module, "_watch_host", False)  # as STREAMSCOPE_HOST_WATCH=off at import
    provider, exporter = memory_provider()

    async def main() -> None:
        with StreamRecorder(side="client", provider="p", tracer_provider=provider) as recorder:
            assert recorder._watch is None
            recorder.chunk(1, 4, 4)

    asyncio.run(main())
    (span,) = exporter.get_finished_spans()
    assert sc.STREAMSCOPE_HOST_WATCH not in span.attributes
    assert sc.STREAMSCOPE_CHUNKS_HOST_DELAY_US not in span.attributes


def test_the_env_switch_turns_the_watch_off():
    probe = (
        "from streamscope import StreamRecorder; import threading;"
        "r = StreamRecorder(side='client', provider='p').start(); r.chunk(1, 1, 1);"
        "print(r._watch, [t.name for t in threading.enumerate()]); r.finish()"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, env.STREAMSCOPE_HOST_WATCH: "false"},
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() == "None ['MainThread']"


def test_a_stream_outside_an_event_loop_imports_no_asyncio():
    probe = (
        "import sys, streamscope; streamscope.StreamRecorder(side='client', provider='p').start();"
        "print('asyncio' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_a_hold_the_host_has_not_let_go_of_since_counts_whole():
    """After a long hold the loop works through what arrived meanwhile; its next beat is overdue again."""
    ms = 1_000_000
    watch = host_watch.ThreadWatch()
    watch._beat(100 * ms, 550 * ms)
    watch._due_ns = 550 * ms + host_watch.PERIOD_NS  # the beat due after it has not run
    assert watch.late_us(50 * ms, 610 * ms) == 510 * MS
    watch._due_ns = 700 * ms  # a later beat is due: the host ran the reader in between
    assert watch.late_us(50 * ms, 720 * ms) == 20 * MS
