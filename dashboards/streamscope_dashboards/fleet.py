"""The fleet's headline numbers over a time range: what `streamscope demo` prints and the report opens with.

Each figure is one SQL query over ``streams``, or ``gap_histograms`` for the gaps (the chosen side, the client's by
default), written with the plugin's macros like every panel, so it can be reproduced by hand or in Grafana.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels.common import (
    ROLLUPS_APPLY,
    SELECTED,
    SELECTED_CHUNKS,
    SIZED,
    STORED_BYTES_SQL,
    TABLE_HISTOGRAMS_SELECTED,
    TIMED,
    UNMERGED_PARTS_SQL,
    chosen,
    gap_histogram,
    gap_quantile_ms,
    timed_goodput,
)
from streamscope_ingest.store.sql import QueryResult

Query = Callable[[str], QueryResult]

_GAP_QUANTILES_US = ", ".join(
    f"{gap_quantile_ms(level, 'histogram', 'gaps', name)} * 1000"
    for level, name in ((0.5, "p50"), (0.95, "p95"), (0.99, "p99"))
)
STREAMS_SQL = f"""
SELECT
    count() AS streams,
    quantileExact(0.5)(ttft_us) AS ttft_p50_us,
    quantileExact(0.95)(ttft_us) AS ttft_p95_us,
    quantileExactIf(0.99)(gap_p99_us, {TIMED}) AS p99_of_p99_us,
    {timed_goodput("{slo_us}")} AS itl_goodput,
    quantileExact(0.5)(ttft_us - ttfb_us) AS first_byte_lead_us,
    sumIf(counted_tokens, {SIZED})
        / nullIf(sumIf(content_chunks, {SIZED} AND counted_tokens IS NOT NULL), 0) AS tokens_per_chunk,
    sumIf(tokens, {SIZED} AND tokens_estimated)
        / nullIf(sumIf(content_chunks, {SIZED} AND tokens_estimated), 0) AS estimated_tokens_per_chunk,
    sumIf(wire_bytes, {SIZED}) / nullIf(sumIf(content_bytes, {SIZED} AND wire_bytes > 0), 0) AS wire_per_content_byte,
    countIf(outcome IN ('cancelled', 'disconnected')) / nullIf(countIf(outcome != 'unknown'), 0) AS cancel_rate,
    countIf(NOT {TIMED}) AS incomplete,
    countIf(outcome = 'unknown') AS unknown_outcomes,
    countIf(ttft_us IS NULL) AS unknown_ttft
FROM stream_metrics
WHERE {SELECTED}
"""

GAPS_SQL = f"""
SELECT q[1] AS gap_p50_us, q[2] AS gap_p95_us, q[3] AS gap_p99_us, gaps
FROM (
    SELECT [{_GAP_QUANTILES_US}] AS q, gaps
    FROM ({gap_histogram(TABLE_HISTOGRAMS_SELECTED)})
    WHERE {ROLLUPS_APPLY}
    UNION ALL
    SELECT arrayMap(x -> toFloat64(x), quantilesExact(0.5, 0.95, 0.99)(gap_us)) AS q, count(gap_us) AS gaps
    FROM chunks
    WHERE {SELECTED_CHUNKS} AND kind = 'content' AND NOT {ROLLUPS_APPLY}
    HAVING NOT {ROLLUPS_APPLY}
)
"""
"""The three gap quantiles, from ``gap_histograms`` (within 0.5 %, as ``model_texture``'s), or from the chunks,
exactly, while routes are chosen (the histograms carry no route). Over no gap they are 0, so the gaps are
counted too."""


@dataclass(frozen=True)
class Summary:
    """None, for any figure: no stream in the range can give it (none has every chunk's time, say, when each came
    from a source that knew only its first token), so it is unknown, not 0."""

    streams: int
    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    gap_p50_ms: float | None
    gap_p95_ms: float | None
    gap_p99_ms: float | None
    p99_of_p99_ms: float | None
    itl_goodput: float | None
    """Share of streams whose every gap stayed within the ITL SLO."""
    first_byte_lead_ms: float | None
    """Median time from the first byte to the first content chunk (a buffering gateway widens it)."""
    tokens_per_chunk: float | None
    """Over the streams whose tokens were counted (a provider's cumulative usage on every chunk, the engine's own
    count on its server span, or the provider's total for an answer read to its end), never estimated from bytes."""
    wire_per_content_byte: float | None
    """Bytes on the wire per byte of content: the envelope overhead, over the streams whose wire bytes are known (a
    wrapper that reads parsed events, as the OpenAI client's, sees none)."""
    cancel_rate: float | None
    """Over the streams whose outcome is known."""
    stored_bytes_per_chunk: float | None
    """Over the parts of every table a stream fills as they are now: the store merges small parts into larger ones,
    which compress better, so the figure falls for a while after a write."""
    incomplete_streams: int = 0
    """Streams without every chunk's time (chunks lost, unreadable, a source that knew none): out of the per-stream
    gap figures."""
    unmerged_parts: int = 0
    """Active parts of the stream tables beyond one per partition: merges still to come."""
    estimated_tokens_per_chunk: float | None = None
    """Over the streams whose chunks' tokens were estimated from their bytes (about 4 a token): never mixed with the
    other."""
    unknown_outcomes: int = 0
    """Streams whose source did not say how they ended: out of the cancellation rate."""
    unknown_ttft: int = 0
    """Streams without a time to the first token (no token came, or their source timed none: chunk arrivals with
    no content, a first chunk of any kind): out of the TTFT figures."""

    def rows(self, slo_us: int) -> list[tuple[str, str]]:
        """(metric, value) lines, as the demo and the report print them."""
        return [
            ("streams", f"{self.streams}"),
            (
                "TTFT p50 / p95",
                _numbers((self.ttft_p50_ms, self.ttft_p95_ms), ".0f", " ms / ", " ms") + self._unknown_ttft(),
            ),
            (
                "gap p50 / p95 / p99",
                _numbers((self.gap_p50_ms, self.gap_p95_ms, self.gap_p99_ms), ".1f", " / ", " ms"),
            ),
            ("p99 across streams of per-stream p99", _numbers((self.p99_of_p99_ms,), ".0f", "", " ms")),
            (f"ITL goodput (every gap within {slo_us / 1000:.0f} ms)", _number(self.itl_goodput, ".1%")),
            ("first byte to first content, median", _numbers((self.first_byte_lead_ms,), ".1f", "", " ms")),
            (
                "tokens per chunk (mean) / wire bytes per content byte",
                f"{self._tokens_per_chunk()} / {_number(self.wire_per_content_byte, '.1f')}",
            ),
            ("cancelled or disconnected", _number(self.cancel_rate, ".1%") + self._unknown_outcomes()),
            (
                "streams without every chunk's time (left out of goodput and per-stream p99)",
                f"{self.incomplete_streams}",
            ),
            ("stored bytes per chunk, all tables", _number(self.stored_bytes_per_chunk, ".2f") + self._unmerged()),
        ]

    def _tokens_per_chunk(self) -> str:
        counted, estimated = self.tokens_per_chunk, self.estimated_tokens_per_chunk
        if estimated is None:
            return _number(counted, ".2f")
        shown = f"{estimated:.2f} estimated from bytes"
        return shown if counted is None else f"{counted:.2f} counted ({shown})"

    def _unmerged(self) -> str:
        parts = self.unmerged_parts
        merging = parts > 0 and self.stored_bytes_per_chunk is not None
        return f" (over {parts} more parts than merged: falls as they merge)" if merging else ""

    def _unknown_ttft(self) -> str:
        n = self.unknown_ttft
        return f" (first token not timed: {n} stream{'s' if n != 1 else ''})" if n else ""

    def _unknown_outcomes(self) -> str:
        n = self.unknown_outcomes
        return f" (outcome unknown: {n} stream{'s' if n != 1 else ''})" if n else ""


def summarize(
    run: Query, ctx: QueryContext, slo_us: int, variables: Mapping[str, Sequence[str]] | None = None
) -> Summary:
    values = chosen(variables)
    row = run(resolve(STREAMS_SQL.replace("{slo_us}", str(int(slo_us))), ctx, values)).rows[0]
    streams, ttft50, ttft95, p99p99, goodput, lead, per_chunk, estimated, envelope, cancels, incomplete, unknown = row[
        :12
    ]
    (unknown_ttft,) = row[12:]
    gap50, gap95, gap99, gaps = run(resolve(GAPS_SQL, ctx, values)).rows[0]
    if not gaps:
        gap50 = gap95 = gap99 = None
    (stored,) = run(STORED_BYTES_SQL).rows[0]
    (unmerged,) = run(UNMERGED_PARTS_SQL).rows[0]

    def ms(value: float | None) -> float | None:
        known = _known(value)
        return None if known is None else known / 1000

    return Summary(
        streams=int(streams),
        ttft_p50_ms=ms(ttft50),
        ttft_p95_ms=ms(ttft95),
        gap_p50_ms=ms(gap50),
        gap_p95_ms=ms(gap95),
        gap_p99_ms=ms(gap99),
        p99_of_p99_ms=ms(p99p99),
        itl_goodput=_known(goodput),
        first_byte_lead_ms=ms(lead),
        tokens_per_chunk=_known(per_chunk),
        estimated_tokens_per_chunk=_known(estimated),
        wire_per_content_byte=_known(envelope),
        cancel_rate=_known(cancels),
        stored_bytes_per_chunk=_known(stored),
        unmerged_parts=int(unmerged),
        incomplete_streams=int(incomplete or 0),
        unknown_outcomes=int(unknown or 0),
        unknown_ttft=int(unknown_ttft or 0),
    )


def _known(value: float | None) -> float | None:
    """``value``, or None for an aggregate over no row (NULL, or NaN where ClickHouse divides by zero)."""
    return None if value is None or math.isnan(value) else float(value)


def _number(value: float | None, spec: str) -> str:
    return "unknown" if value is None else format(value, spec)


def _numbers(values: tuple[float | None, ...], spec: str, between: str, unit: str) -> str:
    """Figures read together (p50 / p95), with their unit; unknown when any is."""
    if any(value is None for value in values):
        return "unknown"
    return between.join(format(value, spec) for value in values) + unit
