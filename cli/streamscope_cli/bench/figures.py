"""A bench run's figures, from the streams it stored: what ``streamscope bench`` prints and ``compare`` gates on.

Every figure is a function of the run's per-stream statistics (``RunStreams``), so ``compare`` can resample streams
(not chunks) to say how sure a difference is. Percentiles are nearest-rank: each is a value some stream had.

A stream the bench machine's own host held (a stall attributed to ``client_host``: the load generator's loop was
late to read) says nothing of the endpoint's rhythm: it is counted, and kept out of the gap figures, so a busy load
generator cannot pass for a slower release.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from streamscope.errors import StreamscopeError
from streamscope.semconv import STREAMSCOPE_BENCH_LABEL, STREAMSCOPE_BENCH_RUN
from streamscope.semconv import StreamscopeTruthCauseValues as Cause
from streamscope_cli.query import Query
from streamscope_ingest.store.sql import string_literal

RUN = f"resource_attributes['{STREAMSCOPE_BENCH_RUN}']"
LABEL = f"resource_attributes['{STREAMSCOPE_BENCH_LABEL}']"
TIMED = "coverage IN ('full', 'arrivals')"
"""Streams whose every chunk's arrival is known: the per-stream gap figures read only these (as the panels do)."""


@dataclass(frozen=True)
class RunStreams:
    """One run's client streams, a value per stream in each array (NaN where a stream has no such figure)."""

    run: str
    label: str
    ttft_ms: np.ndarray
    gap_p99_ms: np.ndarray
    """Each stream's own p99 gap between content chunks (NaN: not every arrival known, fewer than two, or the
    stream was held by the bench machine's own host); so are the longest gap, jitter and stalls."""
    gap_max_ms: np.ndarray
    jitter: np.ndarray
    """p99 gap / p50 gap of each stream."""
    tokens_per_s: np.ndarray
    tokens: np.ndarray
    stalls: np.ndarray
    error: np.ndarray
    """1 for a stream that failed or timed out (an HTTP error, no answer in time), else 0."""
    cancelled: np.ndarray
    host_held: np.ndarray
    """1 for a stream the bench machine's own host held (out of the gap figures), else 0."""
    started_s: np.ndarray
    """When each stream started, in seconds from the run's first."""
    duration_s: np.ndarray
    span_s: float
    """Seconds from the first stream's start to the last one's end."""
    estimated_tokens: bool
    """Whether the tokens are estimated from bytes (no stream carried the provider's counts per chunk)."""

    @property
    def count(self) -> int:
        return int(self.ttft_ms.size)

    def known(self, name: str) -> int:
        """How many streams have a value of the array ``name``."""
        return int(np.count_nonzero(~np.isnan(getattr(self, name))))

    def take(self, rows: np.ndarray) -> RunStreams:
        """The streams at ``rows`` (a bootstrap resample: indices with repeats)."""
        taken: dict[str, Any] = {name: getattr(self, name)[rows] for name in _ARRAYS}
        return replace(self, **taken)


_ARRAYS = (
    "ttft_ms", "gap_p99_ms", "gap_max_ms", "jitter", "tokens_per_s", "tokens", "stalls", "error", "cancelled",
    "host_held", "started_s", "duration_s",
)  # fmt: skip


def _rank(values: np.ndarray, level: float) -> float:
    """Nearest-rank percentile of the known values; NaN when none is known."""
    known = values[~np.isnan(values)]
    if not known.size:
        return float("nan")
    return float(np.quantile(known, level, method="inverted_cdf"))


@dataclass(frozen=True)
class Figure:
    """A figure of a run, how it is computed from its streams, and which way is worse."""

    name: str
    title: str
    unit: str
    reads: str
    """The per-stream values it is computed from (a ``RunStreams`` array): a run has as many streams for this
    figure as that array has known values."""
    of: Callable[[RunStreams, float], float]
    """(streams, ITL SLO in ms) -> the figure (NaN when the run cannot give it)."""
    worse: int = 1
    """+1 when higher is worse (latencies, error rates), -1 when lower is (goodput, pace)."""
    points: bool = False
    """A share: its threshold is in points (an absolute difference), not a relative change."""

    @property
    def counts_tokens(self) -> bool:
        """A pace in tokens: counted by the provider or estimated from bytes, as the run's streams were."""
        return self.unit == "tok/s"


FIGURES = (
    Figure("ttft_p50", "TTFT p50", "ms", "ttft_ms", lambda s, slo: _rank(s.ttft_ms, 0.5)),
    Figure("ttft_p95", "TTFT p95", "ms", "ttft_ms", lambda s, slo: _rank(s.ttft_ms, 0.95)),
    Figure("ttft_p99", "TTFT p99", "ms", "ttft_ms", lambda s, slo: _rank(s.ttft_ms, 0.99)),
    Figure(
        "stream_p99_p50", "per-stream p99 gap, p50 across streams", "ms", "gap_p99_ms",
        lambda s, slo: _rank(s.gap_p99_ms, 0.5),
    ),
    Figure(
        "stream_p99_p90", "per-stream p99 gap, p90 across streams", "ms", "gap_p99_ms",
        lambda s, slo: _rank(s.gap_p99_ms, 0.9),
    ),
    Figure(
        "p99_of_p99", "p99 across streams of per-stream p99 gap", "ms", "gap_p99_ms",
        lambda s, slo: _rank(s.gap_p99_ms, 0.99),
    ),
    Figure(
        "p99_of_max", "p99 across streams of each stream's longest gap", "ms", "gap_max_ms",
        lambda s, slo: _rank(s.gap_max_ms, 0.99),
    ),
    Figure(
        "jitter_p50", "jitter (p99 / p50 gap), p50 across streams", "", "jitter", lambda s, slo: _rank(s.jitter, 0.5)
    ),
    Figure(
        "itl_goodput", "ITL goodput (every gap within the SLO)", "share", "gap_max_ms",
        lambda s, slo: _share(s.gap_max_ms[~np.isnan(s.gap_max_ms)] <= slo), worse=-1, points=True,
    ),
    Figure("stalls_per_stream", "stalls per stream, mean", "", "stalls", lambda s, slo: _mean(s.stalls)),
    Figure(
        "tokens_per_s_p50", "tokens/s per stream, p50", "tok/s", "tokens_per_s",
        lambda s, slo: _rank(s.tokens_per_s, 0.5), worse=-1,
    ),
    Figure(
        "fleet_tokens_per_s", "tokens/s, all streams", "tok/s", "tokens",
        lambda s, slo: float(np.nansum(s.tokens)) / s.span_s if s.span_s > 0 else float("nan"), worse=-1,
    ),
    Figure("error_rate", "errors and timeouts", "share", "error", lambda s, slo: _mean(s.error), points=True),
    Figure(
        "cancel_rate", "cancelled or disconnected", "share", "cancelled", lambda s, slo: _mean(s.cancelled),
        points=True,
    ),
)  # fmt: skip
BY_NAME = {figure.name: figure for figure in FIGURES}


def _share(flags: np.ndarray) -> float:
    return float(flags.mean()) if flags.size else float("nan")


def _mean(values: np.ndarray) -> float:
    known = values[~np.isnan(values)]
    return float(known.mean()) if known.size else float("nan")


def read_run(query: Query, selector: str) -> RunStreams:
    """The client streams of the run named ``selector``: a run id, or a label (its latest run)."""
    run, label = find_run(query, selector)
    rows = query(
        f"""SELECT toFloat64(ttft_us) / 1000 AS ttft, if({TIMED}, gap_p99_us / 1000, NULL) AS p99,
            if({TIMED}, ifNull(gap_max_us, 0) / 1000, NULL) AS longest, if({TIMED}, jitter_ratio, NULL) AS jitter,
            tokens / if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL) AS pace,
            tokens, if({TIMED}, stall_count, NULL) AS stalls, outcome IN ('error', 'timeout') AS failed,
            outcome IN ('cancelled', 'disconnected') AS left,
            (trace_id, span_id) IN (
                SELECT trace_id, span_id FROM stalls WHERE side = 'client' AND cause = '{Cause.CLIENT_HOST}'
            ) AS held,
            toUnixTimestamp64Micro(start_time) AS started_us, duration_us, tokens_estimated
        FROM streams
        WHERE side = 'client' AND {RUN} = {string_literal(run)}"""
    ).rows
    if not rows:
        raise StreamscopeError(f"run {run} has no client streams in the store")
    column = list(zip(*rows, strict=True))

    def floats(i: int) -> np.ndarray:
        return np.array([np.nan if v is None else float(v) for v in column[i]], dtype=np.float64)

    started_us = np.array(column[10], dtype=np.int64)
    duration_us = np.array([int(v or 0) for v in column[11]], dtype=np.int64)
    first = int(started_us.min())
    arrays: dict[str, Any] = {name: floats(i) for i, name in enumerate(_ARRAYS[:10])}
    held = arrays["host_held"] > 0
    for name in ("gap_p99_ms", "gap_max_ms", "jitter", "stalls"):
        arrays[name][held] = np.nan
    return RunStreams(
        run,
        label,
        **arrays,
        started_s=(started_us - first) / 1e6,
        duration_s=duration_us / 1e6,
        span_s=(int((started_us + duration_us).max()) - first) / 1e6,
        estimated_tokens=any(bool(v) for v in column[12]),
    )


def find_run(query: Query, selector: str) -> tuple[str, str]:
    """(run id, label) of the run ``selector`` names: its id, or a label (the latest run with it)."""
    named = string_literal(selector)
    found = query(
        f"""SELECT {RUN} AS run, any({LABEL}) AS label
        FROM streams
        WHERE side = 'client' AND {RUN} != '' AND ({RUN} = {named} OR {LABEL} = {named})
        GROUP BY run
        ORDER BY (run = {named}) DESC, min(start_time) DESC
        LIMIT 1"""
    ).rows
    if not found:
        raise StreamscopeError(
            f"no bench run with id or label {selector!r} in the store (streamscope bench prints its run id; "
            "--storage names the store it wrote)"
        )
    return str(found[0][0]), str(found[0][1])


def stalls_by_cause(query: Query, run: str) -> list[tuple[str, int]]:
    """The run's attributed stalls, by cause (what the attribution job wrote for its client streams)."""
    rows = query(
        f"""SELECT cause, count() AS n FROM stalls
        WHERE side = 'client' AND (trace_id, span_id) IN (
            SELECT trace_id, span_id FROM streams WHERE side = 'client' AND {RUN} = {string_literal(run)})
        GROUP BY cause ORDER BY n DESC, cause"""
    ).rows
    return [(str(cause), int(n)) for cause, n in rows]
