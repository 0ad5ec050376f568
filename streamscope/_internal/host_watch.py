"""Watches of the reader's own host: how much of a wait the host did not run the code that reads the stream.

A chunk that comes late may have been late on the network, or it may have waited in the socket while the
reader's own host did not run the reader: its asyncio event loop was blocked by a task running CPU-bound
code, or its process was starved of CPU, or another thread held the interpreter. Both look the same from the
chunk's arrival time. A watch tells them apart with a heartbeat: it asks to run every ``PERIOD_NS`` and, each
time it runs more than ``SLACK_NS`` late, keeps the interval [when it was due, when it ran] in which the host
ran nothing of what was due. ``late_us(since_ns, until_ns)`` is how much of a wait the hold that ended just as
the reader read covers: what arrived during that hold waited in the socket until it ended; ``holds_us`` gives
the longest hold anywhere in the wait and all of them summed.

- ``LoopWatch``: one per asyncio event loop (weakly keyed by it), a ``loop.call_later`` heartbeat. A loop
  blocked by one of its tasks, or a thread the OS does not schedule, shows as late ticks.
- ``ThreadWatch``: one per process, for readers outside an event loop (sync clients): a daemon thread that
  sleeps ``PERIOD_NS`` and keeps its oversleeps (the process starved of CPU, a thread hogging the interpreter).

A watch beats only while streams use it (``acquire`` / ``release``): after the last one is released the
heartbeat stops at its next beat, so an idle application is not woken. Times are ``time.perf_counter_ns()``.
Nothing here imports asyncio: a loop is looked for only when the application has imported it.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Final, Literal

from streamscope.threads import named_thread

if TYPE_CHECKING:
    from asyncio import AbstractEventLoop

WatchKind = Literal["asyncio", "thread"]

PERIOD_NS: Final = 20_000_000
"""How often the heartbeat asks to run."""
SLACK_NS: Final = 2_000_000
"""Lateness below this is the scheduler's ordinary jitter, not kept."""
READ_NS: Final = 50_000_000
"""A hold that ended this close before a read was the one the read waited out: once the host runs the reader
again, it works through everything that arrived meanwhile, stream after stream, before it is idle."""
CAPACITY: Final = 1024
"""Late intervals kept per watch, the newest; at one a beat, about 20 s of a host late all the time."""


class Watch:
    """The late intervals of one heartbeat, and how many streams use it."""

    kind: WatchKind

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._late: deque[tuple[int, int]] = deque(maxlen=CAPACITY)
        self._due_ns: int | None = None
        """When the pending beat is due; None while the heartbeat is stopped."""
        self._users = 0
        self.beats = 0
        """Beats run so far (for tests and diagnostics)."""

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        """One stream stopped using the watch; the heartbeat stops at its next beat when none is left."""
        with self._lock:
            self._users = max(0, self._users - 1)

    @property
    def beating(self) -> bool:
        """Whether a beat is pending."""
        return self._due_ns is not None

    def late_us(self, since_ns: int, until_ns: int) -> int:
        """Microseconds of [``since_ns``, ``until_ns``] during which the host had not run the reader just before
        it read at ``until_ns``: the longest kept late interval that ended at most ``READ_NS`` before the read (a
        short one while the reader worked through its backlog does not hide it), or the pending beat when it is
        overdue by more than the slack (the host is late right now; its beat has not run to say so), whichever is
        longer; both, when the overdue beat is the one due after the newest hold. Only a hold that just ended
        delays the read: what arrived during an earlier one was read when it ended, so late beats spread over a
        long wait (an interpreter shared by busy threads) do not add up."""
        held, newest = 0, None
        with self._lock:
            due = self._due_ns
            pending = until_ns - max(due, since_ns) if due is not None and until_ns - due > SLACK_NS else 0
            for start, end in reversed(self._late):
                if end > until_ns + SLACK_NS:  # after the read (the slack: a beat and a read race)
                    continue
                newest = newest or (start, end)
                if end < until_ns - READ_NS:
                    break
                held = max(held, min(end, until_ns) - max(start, since_ns))
        if pending and newest and due is not None and due - newest[1] <= PERIOD_NS + SLACK_NS:
            held = until_ns - max(newest[0], since_ns)  # the beat due after that hold is overdue: it never let go
        return max(0, pending, held) // 1000

    def holds_us(self, since_ns: int, until_ns: int) -> tuple[int, int]:
        """Microseconds of the longest kept hold of the host within [``since_ns``, ``until_ns``], wherever it
        fell, and of all of them summed (``late_us`` adds a beat overdue at the read). A hold that ended well
        before the read did not delay it on its own (what arrived during it was read when it ended), but a peer
        on the same host (an engine beside its load generator) was held too, and sent late because of it; a host
        that held the reader several times in one wait held it for their sum."""
        longest = total = 0
        with self._lock:
            for start, end in reversed(self._late):
                if end <= since_ns:
                    break
                if start < until_ns:
                    held = min(end, until_ns) - max(start, since_ns)
                    longest, total = max(longest, held), total + held
        return longest // 1000, total // 1000

    def _beat(self, due_ns: int, ran_ns: int) -> None:
        """Keep [due, ran] when the beat ran late; the lock is held."""
        self.beats += 1
        if ran_ns - due_ns > SLACK_NS:
            self._late.append((due_ns, ran_ns))


class LoopWatch(Watch):
    """A heartbeat on one asyncio event loop; ``acquire`` is called on that loop's thread."""

    kind: WatchKind = "asyncio"

    def __init__(self, loop: AbstractEventLoop) -> None:
        super().__init__()
        self._loop = weakref.ref(loop)

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._due_ns is not None:
                return
            loop = self._loop()
            if loop is None:
                return
            self._due_ns = time.perf_counter_ns() + PERIOD_NS
        loop.call_later(PERIOD_NS / 1e9, self._tick)

    def _tick(self) -> None:
        ran = time.perf_counter_ns()
        loop = self._loop()
        with self._lock:
            if self._due_ns is not None:
                self._beat(self._due_ns, ran)
            if self._users == 0 or loop is None or loop.is_closed():
                self._due_ns = None
                return
            self._due_ns = ran + PERIOD_NS
        loop.call_later(PERIOD_NS / 1e9, self._tick)


class ThreadWatch(Watch):
    """A heartbeat thread for the process, started when a stream first needs it."""

    kind: WatchKind = "thread"

    def __init__(self) -> None:
        super().__init__()
        self._thread: threading.Thread | None = None

    def acquire(self) -> None:
        with self._lock:
            self._users += 1
            if self._thread is not None:
                return
            self._due_ns = time.perf_counter_ns() + PERIOD_NS
            self._thread = named_thread(self._run, "streamscope-host-watch")
            thread = self._thread
        thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                due = self._due_ns
            if due is None:
                return
            time.sleep(max(0, due - time.perf_counter_ns()) / 1e9)
            ran = time.perf_counter_ns()
            with self._lock:
                self._beat(due, ran)
                if self._users == 0:
                    self._due_ns = None
                    self._thread = None
                    return
                self._due_ns = ran + PERIOD_NS

    def _forget_thread(self) -> None:
        """In a forked child: the heartbeat thread did not come along; the next stream starts one."""
        self._lock = threading.Lock()
        self._users = 0
        self._due_ns = None
        self._thread = None


_loop_watches: weakref.WeakKeyDictionary[AbstractEventLoop, LoopWatch] = weakref.WeakKeyDictionary()
_thread_watch: ThreadWatch | None = None
_watches_lock = threading.Lock()


def running_loop() -> AbstractEventLoop | None:
    """The asyncio event loop running in this thread, if any, without importing asyncio."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    loop: AbstractEventLoop | None = asyncio._get_running_loop()
    return loop


def acquire() -> Watch:
    """The watch for a stream read on this thread, acquired: its event loop's, else the process's thread."""
    global _thread_watch
    loop = running_loop()
    with _watches_lock:
        if loop is not None:
            watch: Watch | None = _loop_watches.get(loop)
            if watch is None:
                watch = _loop_watches[loop] = LoopWatch(loop)
        else:
            watch = _thread_watch
            if watch is None:
                watch = _thread_watch = ThreadWatch()
    watch.acquire()
    return watch


def _after_fork_in_child() -> None:
    global _watches_lock
    _watches_lock = threading.Lock()
    if _thread_watch is not None:
        _thread_watch._forget_thread()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
