"""``streamscope compare``: each figure of two bench runs side by side, how sure the difference is, and a verdict.

The confidence interval of a difference comes from a bootstrap over streams, not chunks (a stream keeps all of its
gaps together, so a run of slow gaps in one stream is not mistaken for many independent ones), resampled in blocks
of the streams that ran together: a hiccup of the engine or of a host slows every stream open at that moment, so
concurrent streams are not independent, and resampling them one by one would make one shared hiccup look like a
sure shift of the tail. A gated figure regresses when its change is worse than its
threshold *and* the whole interval lies on the worse side of no change: noise alone does not fail a release, and a
real shift smaller than the threshold does not either.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from streamscope.errors import ConfigError
from streamscope_cli.bench.figures import BY_NAME, FIGURES, Figure, RunStreams

PASS, REGRESSION, UNKNOWN, NOT_GATED = "pass", "regression", "not enough streams", "not gated"
KINDS_DIFFER = "unknown: tokens counted in one run, estimated from bytes in the other"
"""A pace (tokens/s) of a run whose provider counted its tokens against one whose tokens were estimated from their
bytes: the two read different numbers for the same text, so their difference is no change of pace."""
MIN_BLOCKS = 8
"""Fewer blocks of streams that ran together in a run, and a bootstrap cannot tell its noise from a shift: streams
all started at once (a run of as many requests as its concurrency) are one block, and every resample the same."""


@dataclass(frozen=True)
class Gate:
    """How much worse a figure may get: ``limit`` as a share of the baseline (``relative``) or in points."""

    limit: float
    relative: bool

    def __str__(self) -> str:
        return f"{self.limit * 100:g}%" if self.relative else f"{self.limit:g}"


DEFAULT_GATES = {
    "p99_of_p99": Gate(0.10, relative=True),
    "p99_of_max": Gate(0.10, relative=True),
    "ttft_p95": Gate(0.10, relative=True),
    "itl_goodput": Gate(0.02, relative=False),
    "tokens_per_s_p50": Gate(0.10, relative=True),
    "error_rate": Gate(0.01, relative=False),
}
"""Gated unless the user says otherwise: the stutter a user feels (p99 of per-stream p99, goodput), the one freeze
a long stream's p99 does not see (a stream of 100 gaps or more has its p99 below its longest gap: the p99 across
streams of each one's longest), the wait for the first token, the pace, and failures."""


def parse_gates(given: Sequence[str]) -> dict[str, Gate]:
    """The default gates with ``--max-regression NAME=LIMIT`` applied: ``10%`` is relative to the baseline, a plain
    number an absolute change in the figure's unit (points of a share: ``0.02`` is two points), ``off`` ungates."""
    gates = dict(DEFAULT_GATES)
    for item in given:
        name, sep, limit = item.partition("=")
        name, limit = name.strip(), limit.strip()
        if not sep or name not in BY_NAME:
            raise ConfigError(f"--max-regression takes NAME=LIMIT with NAME one of {', '.join(BY_NAME)}, got {item!r}")
        if limit == "off":
            gates.pop(name, None)
            continue
        found = re.fullmatch(r"(\d+(?:\.\d+)?)(%?)", limit)
        if not found:
            raise ConfigError(f"--max-regression {name}: LIMIT is a share (10%), a number (0.02) or off, got {limit!r}")
        value = float(found.group(1))
        gates[name] = Gate(value / 100, relative=True) if found.group(2) else Gate(value, relative=False)
    return gates


@dataclass(frozen=True)
class Compared:
    """One figure of both runs, the change (relative or in points, as its gate reads it) and its interval."""

    figure: Figure
    baseline: float
    candidate: float
    change: float
    low: float
    high: float
    gate: Gate | None
    verdict: str


def compare(
    baseline: RunStreams,
    candidate: RunStreams,
    *,
    slo_ms: float,
    gates: Mapping[str, Gate],
    min_streams: int = 30,
    resamples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> list[Compared]:
    """Every figure of the two runs, in ``FIGURES`` order, with a verdict on the gated ones: not enough streams when
    either run has fewer than ``min_streams`` values of the figure or fewer than ``MIN_BLOCKS`` blocks."""
    rng = np.random.default_rng(seed)
    base_blocks, cand_blocks = together(baseline), together(candidate)
    resampled = [
        (baseline.take(_draw(base_blocks, rng)), candidate.take(_draw(cand_blocks, rng))) for _ in range(resamples)
    ]
    tail = (1 - confidence) / 2
    results = []
    kinds_differ = baseline.estimated_tokens != candidate.estimated_tokens
    for figure in FIGURES:
        gate = gates.get(figure.name)
        if kinds_differ and figure.counts_tokens:
            base, cand = figure.of(baseline, slo_ms), figure.of(candidate, slo_ms)
            verdict = NOT_GATED if gate is None else KINDS_DIFFER
            results.append(Compared(figure, base, cand, math.nan, math.nan, math.nan, gate, verdict))
            continue
        relative = gate.relative if gate else not figure.points
        base, cand = figure.of(baseline, slo_ms), figure.of(candidate, slo_ms)
        change = _change(base, cand, relative)
        changes = np.array([_change(figure.of(b, slo_ms), figure.of(c, slo_ms), relative) for b, c in resampled])
        known = changes[~np.isnan(changes)]
        low, high = math.nan, math.nan
        if known.size:
            low, high = (float(np.quantile(known, q, method="inverted_cdf")) for q in (tail, 1 - tail))
        too_few = (
            min(baseline.known(figure.reads), candidate.known(figure.reads)) < min_streams
            or min(len(base_blocks), len(cand_blocks)) < MIN_BLOCKS
            or math.isnan(change)
            or math.isnan(low)
        )
        if gate is None:
            verdict = NOT_GATED
        elif too_few:
            verdict = UNKNOWN
        else:
            worse_side = low if figure.worse > 0 else -high  # the interval's end nearest to "no change or better"
            regressed = change * figure.worse > gate.limit and worse_side > 0
            verdict = REGRESSION if regressed else PASS
        results.append(Compared(figure, base, cand, change, low, high, gate, verdict))
    return results


def together(streams: RunStreams) -> list[np.ndarray]:
    """The run's streams in blocks of those that started within one typical stream's length of each other (the
    median duration): the unit a bootstrap resamples."""
    length = max(float(np.median(streams.duration_s)), 1e-3) if streams.count else 1.0
    block = np.floor(streams.started_s / length).astype(np.int64)
    order = np.argsort(block, kind="stable")
    cuts = np.flatnonzero(np.diff(block[order])) + 1
    return np.split(order, cuts)


def _draw(blocks: list[np.ndarray], rng: np.random.Generator) -> np.ndarray:
    """A resample: as many blocks as the run has, drawn with replacement, their streams together."""
    return np.concatenate([blocks[i] for i in rng.integers(0, len(blocks), len(blocks))])


def exit_code(results: Sequence[Compared]) -> int:
    """1 when a gated figure regressed, else 2 when one could not be told (for want of streams, or its tokens
    counted in one run and estimated in the other), else 0."""
    verdicts = {r.verdict for r in results}
    return 1 if REGRESSION in verdicts else 2 if verdicts & {UNKNOWN, KINDS_DIFFER} else 0


def _change(base: float, cand: float, relative: bool) -> float:
    if math.isnan(base) or math.isnan(cand):
        return math.nan
    if not relative:
        return cand - base
    if base == 0:
        return 0.0 if cand == 0 else math.copysign(math.inf, cand)
    return (cand - base) / abs(base)
