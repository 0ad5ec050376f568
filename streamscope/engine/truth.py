"""Turn the delays carried by token batches into ground-truth records, one per cause and run of events.

A delay belongs to the SSE event that carried the delayed tokens; consecutive events delayed by the same
cause become one record (one window, several chunk indices), as a stall spanning them would be one stall.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from streamscope.engine.runtime import Delay
from streamscope.workload.ground_truth import GroundTruth, GroundTruthSink


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
        causes = {d.cause for d in delays}
        for cause in [c for c in self._open if c not in causes]:
            self._close(cause)
        for delay in delays:
            run = self._open.get(delay.cause)
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
            )
        )
