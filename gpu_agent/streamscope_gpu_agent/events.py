"""Events derived from the agent's samples: the moments that explain a stall on this node.

Instant events cover the sampling interval in which they happened (a preemption counted between two
scrapes happened somewhere in that window). Level events (KV high-water, acceptance drop, queue spike,
throttling) open when a value crosses one threshold and close when it crosses back over a second one, so a
value hovering at the threshold does not flap; they are emitted when they close, with their peak.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.samples import Sample, XidEvent

BURST_METRICS = (m.ENGINE_PROMPT_TOKENS, m.ENGINE_PROMPT_TOKENS_COMPUTED, m.ENGINE_STEP_TOKENS_MAX)
"""Prompt tokens admitted in an interval (computed ones, where the engine tells them from cached ones), or one
step's size: a prefill burst when they reach the threshold."""


@dataclass(frozen=True)
class EngineEvent:
    kind: str
    start_ns: int
    end_ns: int | None
    magnitude: float
    engine: str = ""
    gpu_uuid: str = ""
    xid: int | None = None


@dataclass(frozen=True)
class Thresholds:
    kv_high: float = 0.90
    kv_low: float = 0.80
    prefill_burst_tokens: float = 4096
    """Prompt tokens admitted in one interval, or one step's size, that count as a prefill burst."""
    spec_drop: float = 0.4
    spec_recover: float = 0.55
    queue_high: float = 8
    queue_low: float = 2

    def __post_init__(self) -> None:
        if not (self.kv_low < self.kv_high and self.spec_drop < self.spec_recover and self.queue_low < self.queue_high):
            raise ValueError("each closing threshold must lie on the calm side of its opening threshold")


@dataclass
class _Level:
    start_ns: int
    peak: float


@dataclass
class EventDeriver:
    thresholds: Thresholds = field(default_factory=Thresholds)
    _open: dict[tuple[str, str, str], _Level] = field(default_factory=dict)
    _last_ns: int = 0

    def observe(self, batch: Iterable[Sample], interval_start_ns: int) -> list[EngineEvent]:
        """Events that ``batch`` (one scrape or one GPU reading) completes."""
        t = self.thresholds
        events: list[EngineEvent] = []
        batch = list(batch)
        # cached prompt tokens cost no compute: where the engine says which were computed, only those make a burst
        computed = {sample.engine for sample in batch if sample.metric == m.ENGINE_PROMPT_TOKENS_COMPUTED}
        for sample in batch:
            self._last_ns = max(self._last_ns, sample.time_ns)
            metric, value, now = sample.metric, sample.value, sample.time_ns
            window = min(interval_start_ns, now)
            if metric == m.ENGINE_PREEMPTIONS and value > 0:
                events.append(EngineEvent("preemption", window, now, value, engine=sample.engine))
            elif metric == m.ENGINE_PROMPT_TOKENS and sample.engine in computed:
                continue
            elif metric in BURST_METRICS and value >= t.prefill_burst_tokens:
                events.append(EngineEvent("prefill_burst", window, now, value, engine=sample.engine))
            elif metric == m.ENGINE_KV_USAGE:
                events += self._level("kv_high_water", sample, value >= t.kv_high, value <= t.kv_low, higher=True)
            elif metric == m.ENGINE_SPEC_ACCEPTANCE:
                events += self._level(
                    "spec_acceptance_drop", sample, value < t.spec_drop, value >= t.spec_recover, higher=False
                )
            elif metric == m.ENGINE_REQUESTS_WAITING:
                events += self._level("queue_spike", sample, value >= t.queue_high, value <= t.queue_low, higher=True)
            elif metric == m.GPU_CLOCK_EVENT_REASONS:
                events += self._level("throttle", sample, value != 0, value == 0, higher=True)
            elif metric == m.GPU_LOST:
                events += self._level("gpu_lost", sample, value != 0, value == 0, higher=True)
        return _dedupe_bursts(events)

    def restarted(self, engine: str, at_ns: int) -> EngineEvent:
        return EngineEvent("engine_restart", at_ns, at_ns, 1.0, engine=engine)

    def xid(self, error: XidEvent) -> EngineEvent:
        """The instant event of a GPU error the driver reported (an XID, or the GPU unavailable or asking for a
        recovery action)."""
        return EngineEvent(
            error.kind, error.time_ns, error.time_ns, float(error.xid), gpu_uuid=error.gpu_uuid, xid=error.xid
        )

    def close_all(self) -> list[EngineEvent]:
        """Level events still open (the agent is stopping), closed at the last sample time."""
        events = [
            EngineEvent(kind, level.start_ns, self._last_ns, level.peak, engine=engine, gpu_uuid=gpu)
            for (kind, engine, gpu), level in self._open.items()
        ]
        self._open.clear()
        return events

    def _level(self, kind: str, sample: Sample, opens: bool, closes: bool, *, higher: bool) -> list[EngineEvent]:
        key = (kind, sample.engine, sample.gpu_uuid)
        level = self._open.get(key)
        if level is None:
            if opens:
                self._open[key] = _Level(sample.time_ns, sample.value)
            return []
        level.peak = max(level.peak, sample.value) if higher else min(level.peak, sample.value)
        if not closes:
            return []
        del self._open[key]
        return [EngineEvent(kind, level.start_ns, sample.time_ns, level.peak, sample.engine, sample.gpu_uuid)]


def _dedupe_bursts(events: list[EngineEvent]) -> list[EngineEvent]:
    """One prefill burst per engine and interval, even when both of its signals fired."""
    kept: dict[tuple[str, int], EngineEvent] = {}
    others = []
    for event in events:
        if event.kind != "prefill_burst":
            others.append(event)
            continue
        key = (event.engine, event.start_ns)
        if key not in kept or event.magnitude > kept[key].magnitude:
            kept[key] = event
    return others + list(kept.values())
