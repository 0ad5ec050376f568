"""Run the scheduler in real time: each step sleeps for its computed duration, then hands out tokens.

Every token batch carries the delays that really hit it, as the scheduler saw them: a request's wait for its
first admission, when a step left it waiting (its first batch: the first token's wait), a preemption (from
the moment the request lost its KV to this batch), a prefill sharing its step (when the prefill part of the
step exceeds a threshold), collapsed speculative decoding, a throttled GPU (the part of the step its
slowdown added) or a faulted one (the time it ran nothing, before this step). The app turns them into ground
truth.

A collapsed step's delay is only the time the collapse added: the last part of the step, as long as the
share of the step's decoding time (not its prefill part, nor the loop running late) that normal acceptance
would not have needed for the tokens it emitted (``StepResult.collapse_added``). Content that waited through
several collapsed steps was delayed by the sum of their parts.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

from streamscope_cli.engine.gpu import SimulatedGpu
from streamscope_cli.engine.metrics import EngineMetrics
from streamscope_cli.engine.scheduler import Scheduler, Sequence, StepResult


@dataclass(frozen=True)
class Delay:
    cause: str
    start_ns: int
    end_ns: int
    magnitude: float
    """Seconds the cause added (the prefill part of a step; the time since a preemption; the part of a step
    that collapsed speculative decoding added)."""
    adds_up: bool = False
    """The delay is extra time at the end of its step (collapsed speculative decoding): for content that
    waited through several such steps the delays add up, into one window that ends when the content went out."""


@dataclass(frozen=True)
class TokenBatch:
    tokens: int
    at_ns: int
    """Wall-clock end of the step that produced them."""
    delays: tuple[Delay, ...] = ()
    time_in_queue_s: float | None = None
    """On a request's first batch: from its arrival to its first admission (what vLLM's spans call its time in
    queue)."""


@dataclass
class _Request:
    queue: asyncio.Queue[TokenBatch | None]
    arrival_ns: int
    last_tokens_ns: int = 0
    preempted_ns: int = 0
    queued: bool = False
    """A step left it waiting before it was first admitted."""
    admitted_ns: int = 0
    abandoned: bool = False


class Engine:
    """The scheduler, its metrics and its step loop; start it on the loop that serves requests."""

    def __init__(
        self,
        scheduler: Scheduler,
        metrics: EngineMetrics,
        *,
        interference_threshold_s: float = 0.05,
        ignore_disconnect: bool = False,
        gpu: SimulatedGpu | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.gpu = gpu
        self.metrics = metrics
        self.interference_threshold_s = interference_threshold_s
        self.ignore_disconnect = ignore_disconnect
        self._requests: dict[str, _Request] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.steps = 0

    def submit(self, sequence: Sequence) -> AsyncIterator[TokenBatch]:
        """Admit ``sequence`` now (ValueError if it can never fit) and return its token batches as they come.

        The caller must ``release`` the request when it stops reading before the end.
        """
        self._ensure_running()
        self.scheduler.add(sequence)
        request = _Request(queue=asyncio.Queue(), arrival_ns=time.time_ns())
        self._requests[sequence.request_id] = request
        self._wake.set()
        return self._batches(sequence.request_id, request)

    async def _batches(self, request_id: str, request: _Request) -> AsyncIterator[TokenBatch]:
        try:
            while (batch := await request.queue.get()) is not None:
                yield batch
        finally:
            self.release(request_id)

    def remaining_tokens(self, request_id: str) -> int:
        """Tokens the engine has yet to generate for ``request_id`` (0 once finished or aborted)."""
        sequence = self.scheduler.sequences.get(request_id)
        return sequence.max_tokens - sequence.generated if sequence else 0

    def release(self, request_id: str) -> None:
        """The consumer stopped reading: abort the sequence, or with ignore_disconnect let it run to the end."""
        request = self._requests.get(request_id)
        if request is None:
            return
        if self.ignore_disconnect and request_id in self.scheduler.sequences:
            request.abandoned = True
            return
        if request_id in self.scheduler.sequences:
            self.scheduler.abort(request_id)
            self.metrics.record_finished("abort", (time.time_ns() - request.arrival_ns) / 1e9)
        del self._requests[request_id]

    def _ensure_running(self) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run(), name="engine-steps")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            if not self.scheduler.has_work:
                self._wake.clear()
                await self._wake.wait()
                continue
            hung_from_ns = time.time_ns()
            hang_s = self.gpu.hang_s(hung_from_ns) if self.gpu is not None else 0.0
            if hang_s > 0:
                await asyncio.sleep(hang_s)
            start_ns = time.time_ns()
            step = self.scheduler.step()
            slowdown = self.gpu.slowdown(start_ns) if self.gpu is not None else 1.0
            await asyncio.sleep(step.duration_s * slowdown)
            self._deliver(
                step,
                start_ns,
                time.time_ns(),
                throttled_s=step.duration_s * (slowdown - 1),
                hung_from_ns=hung_from_ns if hang_s > 0 else None,
            )
            self.steps += 1

    def _deliver(
        self, step: StepResult, start_ns: int, end_ns: int, throttled_s: float = 0.0, hung_from_ns: int | None = None
    ) -> None:
        for request_id in step.preempted:
            if request_id in self._requests:
                self._requests[request_id].preempted_ns = self._requests[request_id].preempted_ns or start_ns
        for request_id in step.left_waiting:
            if request_id in self._requests:
                self._requests[request_id].queued = True
        for request_id in step.admitted:
            if request_id in self._requests:
                self._requests[request_id].admitted_ns = start_ns
        gaps: dict[str, float] = {}
        interference = step.prefill_s >= self.interference_threshold_s
        decoded = set(step.decoded)
        decode_ns = (step.duration_s - step.prefill_s) * 1e9
        for request_id, tokens in step.emitted.items():
            request = self._requests.get(request_id)
            if request is None:
                continue
            delays = []
            if request.queued and not request.last_tokens_ns:
                wait_ns = request.admitted_ns - request.arrival_ns
                delays.append(Delay("queue", request.arrival_ns, request.admitted_ns, wait_ns / 1e9))
            if request.preempted_ns:
                delays.append(Delay("kv_pressure", request.preempted_ns, end_ns, (end_ns - request.preempted_ns) / 1e9))
                request.preempted_ns = 0
            if interference and request_id in decoded:
                delays.append(Delay("prefill_interference", start_ns, end_ns, step.prefill_s))
            added_ns = round(step.collapse_added.get(request_id, 0.0) * decode_ns)
            if added_ns > 0:
                delays.append(Delay("spec_decode", end_ns - added_ns, end_ns, added_ns / 1e9, adds_up=True))
            if throttled_s > 0:
                throttled_ns = round(throttled_s * 1e9)
                delays.append(Delay("gpu_throttle", end_ns - throttled_ns, end_ns, throttled_s, adds_up=True))
            if hung_from_ns is not None:
                delays.append(Delay("gpu_fault", hung_from_ns, end_ns, (end_ns - hung_from_ns) / 1e9))
            queued_s: float | None = None
            if request.last_tokens_ns:
                gaps[request_id] = (end_ns - request.last_tokens_ns) / 1e9
            else:
                self.metrics.record_first_token((end_ns - request.arrival_ns) / 1e9)
                if request.admitted_ns:
                    queued_s = max(request.admitted_ns - request.arrival_ns, 0) / 1e9
            request.last_tokens_ns = end_ns
            if not request.abandoned:
                request.queue.put_nowait(TokenBatch(tokens, end_ns, tuple(delays), queued_s))
        for request_id in step.finished:
            request = self._requests.pop(request_id, None)
            if request is not None:
                self.metrics.record_finished("stop", (end_ns - request.arrival_ns) / 1e9)
                request.queue.put_nowait(None)
        self.metrics.record_step(step, self.scheduler, gaps)
