"""A controllable clock for StreamRecorder, so two recorders can hold the very same timeline."""

from __future__ import annotations


class FakeClock:
    """Stands in for the ``time`` module inside streamscope._internal.recorder."""

    def __init__(self, wall_ns: int = 1_800_000_000_000_000_000, perf_ns: int = 5_000_000_000) -> None:
        self.wall_ns = wall_ns
        self.perf = perf_ns

    def advance_us(self, microseconds: int) -> None:
        self.perf += microseconds * 1000

    def time_ns(self) -> int:
        return self.wall_ns + self.perf

    def perf_counter_ns(self) -> int:
        return self.perf
