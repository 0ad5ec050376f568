"""Turn the delays carried by token batches into ground-truth records, one per cause and run of events.

A delay belongs to the SSE event that carried the delayed tokens; consecutive events delayed by the same
cause become one record (one window, several chunk indices), as a stall spanning them would be one stall.

Delays that add up (collapsed speculative decoding: the extra part of each step) are summed per event, into
a window of that length ending when the event's content went out, and events join one record only while
their windows overlap (events cut from the same tokens): the time between two such windows was the normal
pace of decoding, not the collapse's doing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_cli.engine.runtime import Delay, TokenBatch
from streamscope_cli.workload.ground_truth import FIRST_TOKEN, GroundTruth, GroundTruthSink


@dataclass
class _Open:
    start_ns: int
    end_ns: int
    indices: list[int] = field(default_factory=list)
    magnitude: float = 0.0


class StreamTruth:
    def __init__(self, sink: GroundTruthSink | None, node: str, trace_id: str, request_id: str) -> None:
        self._sink = sink
        self._node = node
        self._trace_id = trace_id
        self._request_id = request_id
        self._open: dict[str, _Open] = {}

    def event(self, index: int, delays: list[Delay]) -> None:
        """The SSE event numbered ``index`` carried tokens hit by ``delays``."""
        if self._sink is None:
            return
        delays = _summed(delays)
        causes = {d.cause for d in delays}
        for cause in [c for c in self._open if c not in causes]:
            self._close(cause)
        for delay in delays:
            run = self._open.get(delay.cause)
            if run is not None and delay.adds_up and delay.start_ns > run.end_ns:
                self._close(delay.cause)
                run = None
            if run is None:
                run = self._open[delay.cause] = _Open(delay.start_ns, delay.end_ns)
            run.start_ns = min(run.start_ns, delay.start_ns)
            run.end_ns = max(run.end_ns, delay.end_ns)
            run.magnitude = max(run.magnitude, delay.magnitude)
            if not run.indices or run.indices[-1] != index:
                run.indices.append(index)

    def close(self) -> None:
        for cause in list(self._open):
            self._close(cause)

    def _close(self, cause: str) -> None:
        run = self._open.pop(cause)
        assert self._sink is not None
        self._sink.record(
            GroundTruth(
                cause=cause,
                node=self._node,
                start_ns=run.start_ns,
                end_ns=run.end_ns,
                trace_id=self._trace_id,
                request_id=self._request_id,
                chunk_indices=tuple(run.indices),
                magnitude=run.magnitude,
                detail={"kind": FIRST_TOKEN} if cause == Cause.QUEUE else {},
            )
        )


def _summed(delays: list[Delay]) -> list[Delay]:
    """``delays`` with those that add up combined, one per cause: their sum, ending at the latest end."""
    kept = [d for d in delays if not d.adds_up]
    totals: dict[str, tuple[int, float]] = {}
    for d in delays:
        if d.adds_up:
            end_ns, seconds = totals.get(d.cause, (d.end_ns, 0.0))
            totals[d.cause] = (max(end_ns, d.end_ns), seconds + d.magnitude)
    for cause, (end_ns, seconds) in totals.items():
        kept.append(Delay(cause, end_ns - round(seconds * 1e9), end_ns, seconds, adds_up=True))
    return kept


async def chunked(
    generation: AsyncIterator[TokenBatch], tokens_per_chunk: int, truth: StreamTruth, first_index: int
) -> AsyncIterator[int]:
    """The token counts of the events a generation is cut into (``tokens_per_chunk`` each, what is left last), each
    event's delays told to ``truth`` under its index, counted from ``first_index``: every event cut from a batch
    carried its delays, and tokens held for a later event keep theirs."""
    index, pending = first_index, 0
    delays: list[Delay] = []
    async for batch in generation:
        pending += batch.tokens
        delays.extend(batch.delays)
        emitted = False
        while pending >= tokens_per_chunk:
            pending -= tokens_per_chunk
            truth.event(index, delays)
            index += 1
            emitted = True
            yield tokens_per_chunk
        if emitted:
            delays.clear()
    if pending:
        truth.event(index, delays)
        yield pending
    truth.close()
