"""What a stall is, in one place: the rule every count, table and panel uses.

A stall is a gap between content chunks, as the reader saw them, that is longer than the stall threshold
(``STREAMSCOPE_STALL_THRESHOLD_MS``, 400 ms by default: a freeze anyone notices), or one well over the stream's
own rhythm: at least ``relative_floor_us`` and ``relative_factor`` times its median gap (a stream that ticks
every 40 ms has stalled after 150 ms). ``streams.stall_count``, ITL goodput and the SLO count the first kind, a
figure that compares streams; the ``stalls`` table, where attribution names each stall's cause, holds both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, overload

from streamscope import env

if TYPE_CHECKING:
    import numpy as np

EXPLAINING_SHARE = 1 / 3
"""A delay made a stall only if it held the content for at least this share of it (how ground truth labels stalls).
A stall is at least three times its stream's usual gap, so two thirds of it or more is excess; a cause that held
content for less than half of that excess (a 14 ms spec-decode slowdown inside a 215 ms node-wide pause) did not
make it."""

DEFAULT_THRESHOLD_US = round(env.DEFAULT_STALL_THRESHOLD_MS * 1000)
"""The default stall threshold, and the ITL SLO the generated dashboards and alert rules read."""


@dataclass(frozen=True)
class StallRule:
    threshold_us: int = DEFAULT_THRESHOLD_US
    """A content gap longer than this is a stall in any stream."""
    relative_factor: float = 3.0
    relative_floor_us: int = 150_000
    """A gap at least this long (or the threshold, if lower) and ``relative_factor`` times the stream's median
    gap is a stall of that stream's rhythm."""

    @property
    def shortest_us(self) -> int:
        """The shortest gap that can be a stall: the relative floor, or the threshold if lower."""
        return min(self.relative_floor_us, self.threshold_us)

    @classmethod
    def configured(cls) -> StallRule:
        """The rule with the threshold ``STREAMSCOPE_STALL_THRESHOLD_MS`` sets (a ConfigError when it is bad)."""
        return cls(threshold_us=env.stall_threshold_us())

    @overload
    def over_threshold(self, gaps: float) -> bool: ...
    @overload
    def over_threshold(self, gaps: np.ndarray) -> np.ndarray: ...
    def over_threshold(self, gaps: float | np.ndarray) -> bool | np.ndarray:
        """Which ``gaps`` (µs) are longer than the threshold: the stalls every stream is held to."""
        return gaps > self.threshold_us

    def stalls_among(self, gaps: np.ndarray, median: float | np.ndarray) -> np.ndarray:
        """Which of a stream's ``gaps`` (µs, as shown) are stalls: over the threshold, or long and many times the
        ``median`` gap. ``gaps`` may be rows of one stream shown in several ways, each with its ``median`` (a
        column)."""
        import numpy as np  # here, not above: the panels and the CLI read the thresholds without numpy

        usual = np.maximum(median, 1.0)
        return self.over_threshold(gaps) | ((gaps >= self.shortest_us) & (gaps >= self.relative_factor * usual))
