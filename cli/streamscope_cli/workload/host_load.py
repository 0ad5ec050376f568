"""Load on the clients' host during a run, and a watchdog of their event loop; both recorded as ground truth.

``HostActivity``, entered by ``drive`` around a run, does three things on the clients' asyncio loop and host:

- A ``target: client`` load blocks the loop with CPU-bound work (hashing, in the loop's own thread) for
  ``busy_ms`` every ``period_s``, at phases drawn from the scenario's seed, as an application doing
  synchronous work on its loop would. Each block is a ``client_host`` record of the client process (detail
  source ``injected``) with no trace id: it delayed every stream that process was reading.
- A ``target: machine`` load starts child processes that spin on the CPU with the load's duty cycle for the
  whole run. No burn is recorded as such: what reaches the clients of it is what the watchdog sees.
- A watchdog, always: a heartbeat on the loop every ``HEARTBEAT_S`` records each wake-up at least ``LATE_S``
  late as a ``client_host`` record (detail source ``watchdog``), less what an injected block already covers.
  The loop really did not run then, whatever made it late (a burner, the machine, other work in the
  process), just as the proxy records bytes it really held: ground truth is what happened, so a stall on a
  busy host gets its true label and scoring stays fair there. It costs one timer a hundred times a second.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from types import TracebackType

from streamscope_cli.workload.ground_truth import GroundTruth, GroundTruthSink
from streamscope_cli.workload.scenario import HostLoad

HEARTBEAT_S = 0.010
LATE_S = 0.050
"""A heartbeat this late is recorded: well above a loaded loop's usual lateness of a few milliseconds."""
KEEP_BLOCKS_NS = 10 * 1_000_000_000
"""How long an injected block is remembered, to keep the watchdog from recording it again."""

_WORK = bytes(64 * 1024)
_BURNER = """
import os, sys, time
parent, period, busy, phase = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
origin = time.monotonic() - phase
while os.getppid() == parent:
    now = time.monotonic()
    into = (now - origin) % period
    if into < busy:
        until = now + min(busy - into, 0.5)
        while time.monotonic() < until:
            pass
    else:
        time.sleep(min(period - into, 0.5))
"""
"""One spinning process: busy for the first ``busy`` seconds of each period, idle for the rest, until it is
stopped or its parent is gone (looked at every half second at most)."""


def busy_wait(seconds: float) -> None:
    """Hold the calling thread on the CPU for ``seconds`` (hashing, which lets the process's other threads run)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        hashlib.sha256(_WORK).digest()


def spawn_burner(period_s: float, busy_s: float, phase_s: float = 0.0) -> subprocess.Popen[bytes]:
    """One process spinning on the CPU for ``busy_s`` of every ``period_s`` (always, when they are equal), until
    ``stop_burners`` or this process is gone."""
    args = [str(p) for p in (os.getpid(), period_s, busy_s, phase_s)]
    return subprocess.Popen([sys.executable, "-c", _BURNER, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def stop_burners(burners: Sequence[subprocess.Popen[bytes]]) -> None:
    for burner in burners:
        burner.terminate()
    for burner in burners:
        try:
            burner.wait(timeout=5)
        except subprocess.TimeoutExpired:
            burner.kill()
            burner.wait()


def block_times(load: HostLoad, seed: int, index: int) -> Iterator[float]:
    """When each of a client load's blocks begins (seconds from the start of the run), without end: the first at
    ``start_s`` or a phase within the first period, each moved by up to ``jitter`` of the period's idle time."""
    rng = random.Random(f"host_load:{seed}:{index}")
    idle = load.period_s - load.busy_ms / 1000
    first = load.start_s if load.start_s is not None else rng.uniform(0, idle)
    for k in itertools.count():
        yield first + k * load.period_s + load.jitter * rng.uniform(-0.5, 0.5) * idle


def uncovered(start: int, end: int, covers: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The parts of [start, end) that no window in ``covers`` covers."""
    pieces, cursor = [], start
    for c_start, c_end in sorted(covers):
        if c_end <= cursor or c_start >= end:
            continue
        if c_start > cursor:
            pieces.append((cursor, c_start))
        cursor = max(cursor, c_end)
    if cursor < end:
        pieces.append((cursor, end))
    return pieces


class HostActivity:
    """The host loads of a run and the loop's watchdog, on the running loop (``async with``)."""

    def __init__(
        self,
        loads: Sequence[HostLoad],
        *,
        seed: int,
        sink: GroundTruthSink | None,
        node: str,
        cause: str = "client_host",
        heartbeat_s: float = HEARTBEAT_S,
        late_s: float = LATE_S,
    ) -> None:
        """``cause``: what the records name (``server_host`` when the loop is a serving process's)."""
        self.loads, self.seed, self.sink, self.node, self.cause = tuple(loads), seed, sink, node, cause
        self.heartbeat_s, self.late_s = heartbeat_s, late_s
        self._blocks: list[tuple[int, int]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._burners: list[subprocess.Popen[bytes]] = []

    async def __aenter__(self) -> HostActivity:
        started = time.monotonic()
        try:
            for index, load in enumerate(self.loads):
                if load.target == "machine":
                    self._start_burners(load, index)
                else:
                    self._tasks.append(asyncio.create_task(self._block_loop(load, index, started)))
            self._tasks.append(asyncio.create_task(self._watch()))
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks.clear()
        stop_burners(self._burners)
        self._burners.clear()

    def _start_burners(self, load: HostLoad, index: int) -> None:
        rng = random.Random(f"host_load:{self.seed}:{index}")
        period, busy = load.period_s, load.busy_ms / 1000
        for _ in range(load.processes):
            self._burners.append(spawn_burner(period, busy, rng.uniform(0, period) if busy < period else 0.0))

    async def _block_loop(self, load: HostLoad, index: int, started: float) -> None:
        busy_s = load.busy_ms / 1000
        for at in block_times(load, self.seed, index):
            await asyncio.sleep(max(0.0, at - (time.monotonic() - started)))
            start_ns = time.time_ns()
            busy_wait(busy_s)
            end_ns = time.time_ns()
            self._blocks.append((start_ns, end_ns))
            self._record(start_ns, end_ns, busy_s, "injected")

    async def _watch(self) -> None:
        while True:
            due = time.monotonic() + self.heartbeat_s
            await asyncio.sleep(self.heartbeat_s)
            late = time.monotonic() - due
            if late < self.late_s:
                continue
            end_ns = time.time_ns()
            self._blocks = [block for block in self._blocks if block[1] > end_ns - KEEP_BLOCKS_NS]
            for start, end in uncovered(end_ns - round(late * 1e9), end_ns, self._blocks):
                if end - start >= self.late_s * 1e9:
                    self._record(start, end, (end - start) / 1e9, "watchdog")

    def _record(self, start_ns: int, end_ns: int, magnitude: float, source: str) -> None:
        if self.sink is not None:
            self.sink.record(
                GroundTruth(
                    cause=self.cause,
                    node=self.node,
                    start_ns=start_ns,
                    end_ns=end_ns,
                    magnitude=magnitude,
                    detail={"target": "client" if self.cause == "client_host" else "server", "source": source},
                )
            )
