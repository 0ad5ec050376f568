"""The impairments as pure logic: which rules hit a stream, and when which bytes go out. No I/O, no clocks.

``Schedule`` draws, per stream, which rules apply. ``Shaper`` is a state machine the I/O layer drives: it is
given upstream events (``push``, ``end``) and asked what to do at a given monotonic time (``poll``): write
these bytes, wait until then (or until more arrives), or finish (complete the body, or cut the connection).
Everything it really did to the stream is left in ``facts`` for the ground truth.

Stages, in order, whatever the order of the rules in the config:
upstream events → buffer_coalesce hold → rechunk merge hold → rechunk split → write;
stalls and the drop act on the writes, right after the write that completes event ``after_event``
(a longer write is cut there, so "after event K" is exact even when events were merged).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from streamscope_cli.proxy.config import BufferCoalesce, Drop, ImpairmentRule, Rechunk, Stall

HOLD_THRESHOLD_NS = 1_000_000
"""An event counts as held back only past this (1 ms): forwarding itself takes some microseconds."""
MAX_BUFFER_BYTES = 8 * 1024 * 1024
"""Past this many bytes in the proxy, holds are flushed at once: a real gateway's buffer is finite too."""


@dataclass(frozen=True)
class StreamPlan:
    """The rules that apply to one stream (at most one coalesce and one rechunk; any number of stalls)."""

    coalesce: BufferCoalesce | None = None
    rechunk: Rechunk | None = None
    stalls: tuple[Stall, ...] = ()
    drop: Drop | None = None

    @property
    def impaired(self) -> bool:
        return bool(self.coalesce or self.rechunk or self.stalls or self.drop)


class Schedule:
    """Decides which rules apply to each stream, reproducibly.

    Each rule has its own ``random.Random`` seeded from (seed, rule position) and draws exactly once per stream
    whose path it matches, so a fixed seed gives the same decisions for the same sequence of streams, and
    adding a rule does not change the draws of the others.
    """

    def __init__(self, rules: Sequence[ImpairmentRule], seed: int | None) -> None:
        self._rules = tuple(rules)
        self._rngs = [random.Random(f"{seed}:{i}") if seed is not None else random.Random() for i in range(len(rules))]

    def plan(self, path: str) -> StreamPlan:
        chosen = [
            rule
            for rule, rng in zip(self._rules, self._rngs)
            if path.startswith(rule.path_prefix) and rng.random() < rule.probability
        ]
        drops = [r for r in chosen if isinstance(r, Drop)]
        return StreamPlan(
            coalesce=next((r for r in chosen if isinstance(r, BufferCoalesce)), None),
            rechunk=next((r for r in chosen if isinstance(r, Rechunk)), None),
            stalls=tuple(r for r in chosen if isinstance(r, Stall)),
            drop=min(drops, key=lambda r: r.after_event) if drops else None,
        )


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes of upstream event ``index``; ``ends_event`` on the piece holding its last byte."""

    index: int
    data: bytes
    ends_event: bool = True


@dataclass(frozen=True, slots=True)
class Write:
    pieces: tuple[Piece, ...]

    @property
    def data(self) -> bytes:
        return b"".join(piece.data for piece in self.pieces)


@dataclass(frozen=True, slots=True)
class Wait:
    until_ns: int | None
    """Poll again at this monotonic time, or as soon as something arrives; None: only when something arrives."""


@dataclass(frozen=True, slots=True)
class Finish:
    complete: bool
    """True: end the body normally. False: cut the connection (a drop, or the upstream broke off)."""


Step = Write | Wait | Finish


@dataclass(frozen=True, slots=True)
class Held:
    """Events a hold stage kept back: ``kind`` is the rule (buffer_coalesce or rechunk)."""

    kind: str
    start_ns: int
    end_ns: int
    indices: tuple[int, ...]
    longest_ns: int


@dataclass(frozen=True, slots=True)
class Stalled:
    start_ns: int
    end_ns: int
    after_event: int
    indices: tuple[int, ...]
    """Events that had reached the proxy but were not yet written when the stall ended."""


@dataclass(frozen=True, slots=True)
class Dropped:
    at_ns: int
    after_event: int


Fact = Held | Stalled | Dropped


def split_write(write: Write, max_bytes: int) -> list[Write]:
    """Cut a write into writes of at most ``max_bytes``; an event cut in two keeps ``ends_event`` on its tail."""
    writes: list[Write] = []
    current: list[Piece] = []
    room = max_bytes
    for piece in write.pieces:
        data = piece.data
        while data:
            part, data = data[:room], data[room:]
            current.append(Piece(piece.index, part, piece.ends_event and not data))
            room -= len(part)
            if room == 0:
                writes.append(Write(tuple(current)))
                current, room = [], max_bytes
    if current:
        writes.append(Write(tuple(current)))
    return writes


class _Hold:
    """Keeps whole events until a byte, event-count or age threshold, then lets them all go as one group."""

    def __init__(
        self,
        kind: str,
        *,
        max_bytes: int | None = None,
        max_age_ns: int | None = None,
        max_events: int | None = None,
        threshold_ns: int,
    ) -> None:
        self.kind = kind
        self._max_bytes, self._max_age_ns, self._max_events = max_bytes, max_age_ns, max_events
        self._threshold_ns = threshold_ns
        self._items: list[tuple[Piece, int]] = []
        self._bytes = 0

    def __bool__(self) -> bool:
        return bool(self._items)

    @property
    def indices(self) -> list[int]:
        return [piece.index for piece, _ in self._items]

    def add(self, piece: Piece, now_ns: int) -> tuple[list[Piece], Held | None] | None:
        self._items.append((piece, now_ns))
        self._bytes += len(piece.data)
        if (self._max_bytes is not None and self._bytes >= self._max_bytes) or (
            self._max_events is not None and len(self._items) >= self._max_events
        ):
            return self.flush(now_ns)
        return None

    def deadline(self) -> int | None:
        if not self._items or self._max_age_ns is None:
            return None
        return self._items[0][1] + self._max_age_ns

    def flush(self, now_ns: int) -> tuple[list[Piece], Held | None]:
        items, self._items, self._bytes = self._items, [], 0
        held = [(piece.index, since) for piece, since in items if now_ns - since > self._threshold_ns]
        fact = None
        if held:
            first = min(since for _, since in held)
            fact = Held(self.kind, first, now_ns, tuple(index for index, _ in held), now_ns - first)
        return [piece for piece, _ in items], fact


class Shaper:
    """One impaired stream's output schedule. Times are monotonic nanoseconds supplied by the caller."""

    def __init__(
        self,
        plan: StreamPlan,
        *,
        hold_threshold_ns: int = HOLD_THRESHOLD_NS,
        max_buffer_bytes: int = MAX_BUFFER_BYTES,
    ) -> None:
        self.facts: list[Fact] = []
        self.buffered_bytes = 0
        """Bytes received and not yet handed out: the I/O layer stops reading the upstream past the limit."""
        self.max_buffer_bytes = max_buffer_bytes
        self._incoming: deque[Piece] = deque()
        self._out: deque[Write] = deque()
        self._next_index = 0
        self._coalesce = self._merge = None
        if plan.coalesce is not None:
            rule = plan.coalesce
            max_age = None if rule.flush_ms is None else round(rule.flush_ms * 1e6)
            self._coalesce = _Hold(
                rule.kind, max_bytes=rule.flush_bytes, max_age_ns=max_age, threshold_ns=hold_threshold_ns
            )
        if plan.rechunk is not None and plan.rechunk.merge_events is not None:
            self._merge = _Hold(plan.rechunk.kind, max_events=plan.rechunk.merge_events, threshold_ns=hold_threshold_ns)
        self._split = plan.rechunk.split_bytes if plan.rechunk is not None else None
        self._stall_after: dict[int, int] = {}
        for stall in plan.stalls:
            duration = round(stall.duration_ms * 1e6)
            self._stall_after[stall.after_event] = self._stall_after.get(stall.after_event, 0) + duration
        self._drop_after = plan.drop.after_event if plan.drop is not None else None
        self._armed_stall: tuple[int, int] | None = None  # (after_event, duration) to start at the next poll
        self._stall: tuple[int, int, int] | None = None  # (after_event, start, end) of the stall under way
        self._armed_drop = False
        self._ended = False
        self._upstream_ok = True
        self._finish: Finish | None = None

    def push(self, data: bytes) -> None:
        """A whole event arrived from the upstream; events are numbered from 0 in arrival order."""
        self._incoming.append(Piece(self._next_index, data))
        self._next_index += 1
        self.buffered_bytes += len(data)

    def end(self, upstream_ok: bool = True) -> None:
        """The upstream body ended (``upstream_ok`` False: it broke off, so the client's body is cut too)."""
        self._ended = True
        self._upstream_ok = self._upstream_ok and upstream_ok

    def take_facts(self) -> list[Fact]:
        facts, self.facts = self.facts, []
        return facts

    def poll(self, now_ns: int) -> Step:
        if self._finish is not None:
            return self._finish
        if self._armed_stall is not None:
            after_event, duration = self._armed_stall
            self._stall, self._armed_stall = (after_event, now_ns, now_ns + duration), None
        if self._stall is not None:
            after_event, start, end = self._stall
            if now_ns < end:
                return Wait(end)
            self._stall = None
            self.facts.append(Stalled(start, now_ns, after_event, tuple(self._unwritten_indices())))
        if self._armed_drop:
            assert self._drop_after is not None
            self.facts.append(Dropped(now_ns, self._drop_after))
            return self._finished(Finish(False))
        while self._incoming:
            self._into_coalesce(self._incoming.popleft(), now_ns)
        deadline = self._coalesce.deadline() if self._coalesce is not None else None
        overflow = self.buffered_bytes > self.max_buffer_bytes and not self._out
        if self._coalesce and (self._ended or overflow or (deadline is not None and now_ns >= deadline)):
            self._after_coalesce(self._flush(self._coalesce, now_ns), now_ns)
        if self._merge and (self._ended or overflow):
            self._emit(self._flush(self._merge, now_ns))
        if self._out:
            return self._next_write()
        if self._ended:
            return self._finished(Finish(self._upstream_ok))
        return Wait(self._coalesce.deadline() if self._coalesce is not None else None)

    def _finished(self, finish: Finish) -> Finish:
        self._finish = finish
        self._incoming.clear()
        self._out.clear()
        return finish

    def _flush(self, hold: _Hold, now_ns: int) -> list[Piece]:
        pieces, fact = hold.flush(now_ns)
        if fact is not None:
            self.facts.append(fact)
        return pieces

    def _into_coalesce(self, piece: Piece, now_ns: int) -> None:
        if self._coalesce is None:
            self._after_coalesce([piece], now_ns)
            return
        flushed = self._coalesce.add(piece, now_ns)
        if flushed is not None:
            pieces, fact = flushed
            if fact is not None:
                self.facts.append(fact)
            self._after_coalesce(pieces, now_ns)

    def _after_coalesce(self, pieces: list[Piece], now_ns: int) -> None:
        if self._merge is None:
            self._emit(pieces)
            return
        for piece in pieces:
            flushed = self._merge.add(piece, now_ns)
            if flushed is not None:
                merged, fact = flushed
                if fact is not None:
                    self.facts.append(fact)
                self._emit(merged)

    def _emit(self, pieces: list[Piece]) -> None:
        if not pieces:
            return
        write = Write(tuple(pieces))
        self._out.extend(split_write(write, self._split) if self._split is not None else [write])

    def _next_write(self) -> Write:
        write = self._out.popleft()
        for position, piece in enumerate(write.pieces):
            if not piece.ends_event:
                continue
            stall = self._stall_after.pop(piece.index, None)
            drop = piece.index == self._drop_after
            if stall is None and not drop:
                continue
            if position + 1 < len(write.pieces):  # cut the write right after the event
                self._out.appendleft(Write(write.pieces[position + 1 :]))
                write = Write(write.pieces[: position + 1])
            if stall is not None:
                self._armed_stall = (piece.index, stall)
            self._armed_drop = drop
            break
        self.buffered_bytes -= sum(len(piece.data) for piece in write.pieces)
        return write

    def _unwritten_indices(self) -> list[int]:
        indices = [piece.index for write in self._out for piece in write.pieces if piece.ends_event]
        for hold in (self._coalesce, self._merge):
            if hold is not None:
                indices += hold.indices
        indices += [piece.index for piece in self._incoming]
        return sorted(set(indices))
