"""The stream-health panels, defined once: Grafana dashboards are generated from them and the local report
runs them. Each panel is SQL in the ClickHouse plugin's dialect (backend macros only, so the same text also
works in alert rules) over the tables and views in schema/migrations.

The panels show one side's view of the streams (the ``side`` variable): the client's by default, the
inter-token latency the application received. Chunks carry their stream's start time, so "over time" buckets
chunks by when their stream started.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from streamscope.env import DEFAULT_STALL_THRESHOLD_MS

PanelKind = Literal["heatmap", "histogram", "timeseries", "table", "timeline", "stat"]

ITL_BUCKETS_MS = (10, 25, 50, 100, 200, 400, 800, 1600, 3200)
"""Upper bounds of the ITL heatmap's rows; one more row holds everything slower."""
OVERFLOW_BUCKET = "+Inf"
CHANGE_FACTOR = 2
"""Tokens per chunk moving by this factor between two intervals is a chunking change (4 → 1 is 4×)."""
CHANGE_MIN_CHUNKS = 50
"""Chunks needed on both sides of a change, so a quiet interval's noise is not reported."""


def median_of(histogram: str, count: str) -> str:
    """SQL for the median of the values a summed histogram counts (``sumMap`` of ``content_chunks_by_tokens``,
    ``count`` values in all): quantileExact(0.5)'s, the value at index floor(count / 2) of the sorted values, is
    the first key whose running count passes that index."""
    return f"arrayFirst((k, c) -> c > intDiv({count}, 2), mapKeys({histogram}), arrayCumSum(mapValues({histogram})))"


def histogram_quantile(q: float, buckets: str, bounds: str, name: str) -> str:
    """SQL for quantile ``q`` of the values an explicit-bucket histogram counts (OTLP's: bucket i holds the values
    in (bounds[i-1], bounds[i]], the first from 0 (or its bound, when negative), the last every value above the top
    bound): linear within the bucket that holds the rank, as Prometheus' histogram_quantile; the top bound when the
    rank is in the last bucket, NULL with no buckets or nothing counted. ``name`` keeps the expression's own aliases
    apart."""
    running, rank, lower = f"running_{name}", f"rank_{name}", f"lower_{name}"
    at = f"arrayFirstIndex(c -> c >= {q} * arraySum({buckets}), arrayCumSum({buckets}) AS {running})"
    inside = f"({q} * arraySum({buckets}) - ({running}[{rank}] - {buckets}[{rank}])) / {buckets}[{rank}]"
    return (
        f"if(empty({bounds}) OR arraySum({buckets}) = 0, NULL, "
        f"(if(({at} AS {rank}) = 1, least(0, {bounds}[1]), {bounds}[{rank} - 1]) AS {lower}) + "
        f"if({rank} > length({bounds}), 0, ({bounds}[{rank}] - {lower}) * {inside}))"
    )


@dataclass(frozen=True)
class Panel:
    key: str
    """Stable identifier: the report's anchor and the Grafana panel's identity."""
    title: str
    description: str
    kind: PanelKind
    sql: str
    unit: str = ""
    """Grafana unit of the values (ms, percentunit, short, bytes ...)."""
    variables: tuple[str, ...] = ()
    """Dashboard variables the SQL needs (``${name}``), e.g. the trace of a drilldown."""
    stacked: bool = False
    """A time series drawn as stacked bars (counts that add up), not lines."""
    threshold: float | None = None
    """A line drawn at this value (an SLO target), in the panel's unit."""
    x_field: str = ""
    """A timeline's numeric x column (the other columns: the series label, then the value)."""

    def bind(self, **values: str) -> str:
        """The SQL with its variables filled in. Values must be plain identifiers (hex ids, names)."""
        missing = set(self.variables) - values.keys()
        if missing:
            raise ValueError(f"panel {self.key} needs {', '.join(sorted(missing))}")
        sql = self.sql
        for name in self.variables:
            if not re.fullmatch(r"[A-Za-z0-9_.:-]*", values[name]):
                raise ValueError(f"{name}: {values[name]!r} is not a plain identifier")
            sql = sql.replace(f"${{{name}}}", values[name])
        return sql


def _itl_bucket_columns() -> str:
    columns, lower = [], 0
    for upper in ITL_BUCKETS_MS:
        columns.append(f'countIf(gap_us > {lower * 1000} AND gap_us <= {upper * 1000}) AS "{upper}"')
        lower = upper
    columns.append(f'countIf(gap_us > {lower * 1000}) AS "{OVERFLOW_BUCKET}"')
    return ",\n    ".join(columns)


def _itl_bucket_sums() -> str:
    """The heatmap's rows from ``gap_histograms``, whose ``itl_upper_ms`` is the row's bound."""
    bounds = [*ITL_BUCKETS_MS, HISTOGRAM_OVERFLOW_MS]
    names = [*map(str, ITL_BUCKETS_MS), OVERFLOW_BUCKET]
    return ",\n        ".join(f'sumIf(gaps, itl_upper_ms = {b}) AS "{n}"' for b, n in zip(bounds, names, strict=True))


GAP_BUCKET_RATIO = 1.01
"""``gap_histograms.gap_bucket`` k ≥ 1 holds the gaps in [ratio^(k-1), ratio^k) µs (migration 0030)."""
HISTOGRAM_OVERFLOW_MS = 65535
"""``gap_histograms.itl_upper_ms`` of a gap above every bound of ``ITL_BUCKETS_MS``."""
HISTOGRAM_STEPS_S = (3600, 300, 60, 5)
"""The interval lengths ``gap_histograms`` counts at, longest first."""
HISTOGRAM_STEP = (
    f"step = (if(arrayFirst(s -> $__interval_s % s = 0, {list(HISTOGRAM_STEPS_S)}) AS whole_step > 0, "
    f"whole_step, {HISTOGRAM_STEPS_S[-1]}) AS read_step)"
)
"""The longest step the query's interval is a whole multiple of (the shortest, for an interval under it): its
rows fall each in one interval, and the fewest rows are read."""


def _meeting(step: str, start: str = "$__fromTime", end: str = "$__toTime") -> str:
    """Rows of the intervals of ``step`` seconds (SQL) that meet the range (``start`` to ``end``: SQL times)."""
    return f"interval_start > {start} - toIntervalSecond({step}) AND interval_start <= {end}"


HISTOGRAM_RANGE = _meeting("read_step")
"""The rows of every interval that meets the range: a stream that started in the range is always counted, and
one that started up to a step before it may be."""
HISTOGRAM_INTERVAL = (
    f"toStartOfInterval(interval_start, toIntervalSecond(greatest($__interval_s, {HISTOGRAM_STEPS_S[-1]})))"
)


def bucket_at(level: float, histogram: str, count: str) -> str:
    """SQL for the bucket of a sorted ``histogram`` (array of (bucket, count)), ``count`` in all, that holds
    quantileExact's rank for ``level`` (index floor(level × count) of the sorted values)."""
    return f"arrayFirst((b, c) -> c > floor({level} * {count}), {histogram}.1, arrayCumSum({histogram}.2))"


def gap_quantile_ms(level: float, histogram: str, count: str, name: str) -> str:
    """SQL for quantile ``level`` of the gaps a sorted ``histogram`` of ``gap_histograms`` buckets counts, ``count``
    in all, in ms: the bucket holding quantileExact's rank, read as its geometric middle. ``name`` keeps the
    expression's alias apart."""
    bucket = f"bucket_{name}"
    at = bucket_at(level, histogram, count)
    return f"if(({at} AS {bucket}) = 0, 0, pow({GAP_BUCKET_RATIO}, {bucket} - 0.5) / 1000)"


def gap_histogram(selected: str, *keys: str) -> str:
    """SQL for the sorted histogram (``histogram``: array of (gap_bucket, gaps)) of the content gaps
    ``gap_histograms``' rows ``selected`` count, the gaps in all (``gaps``) and the longest (``gap_max_ms``), per
    ``keys``."""
    names = "".join(f"{key}, " for key in keys)
    per_key = f"\n        GROUP BY {', '.join(keys)}" if keys else ""
    return f"""SELECT {names}sum(counted) AS gaps, arraySort(groupArray((gap_bucket, counted))) AS histogram,
            max(longest) / 1000 AS gap_max_ms
        FROM (
            SELECT {names}gap_bucket, sum(gaps) AS counted, max(gap_max_us) AS longest
            FROM gap_histograms
            WHERE {selected}
            GROUP BY {names}gap_bucket
        ){per_key}"""


STREAM_ZERO_BUCKET = -32768
"""``stream_histograms``' and ``smoothing_histograms``' bucket of a duration or rate of 0 (migration 0032)."""
INDEX_STEPS = 10_000
"""Their bucket k of a quality index holds [k, k + 1) / INDEX_STEPS."""
VARIABLES = ("tenant", "service", "provider", "model", "route")
"""Multi-valued dashboard variables, All by default (and in the report). Each filters the column of its name,
but route: that is the server's (``http.route``), so a client row is kept when its trace's server span was
served on one of the chosen routes."""
SIDES = ("client", "server", "browser")
SIDE = "side"
"""The single-valued variable naming whose view of the streams the panels show. The client's by default: the
latency the application received. Never All: one stream's sides measure the same content twice."""
DEFAULTS: dict[str, tuple[str, ...]] = {SIDE: (SIDES[0],)}
"""The variables' values before anyone chooses (All for those not named)."""
_CONDITIONS = {name: f"{{alias}}{name} IN (${{{name}:singlequote}})" for name in VARIABLES}
_ROUTED = "FROM streams WHERE route IN (${route:singlequote})"
_CONDITIONS["route"] = f"{{alias}}trace_id IN (SELECT trace_id {_ROUTED})"
_CHUNK_CONDITIONS = {
    **_CONDITIONS,
    "route": f"{{alias}}trace_id_bytes IN (SELECT toFixedString(unhex(trace_id), 16) {_ROUTED})",
}
"""On chunks, route compares the stored id bytes: the hex ``trace_id`` there is computed on read, row by row."""


def chosen(variables: Mapping[str, Sequence[str]] | None = None) -> dict[str, Sequence[str]]:
    """The dashboard's variable values: those given, the defaults for the rest."""
    return {**DEFAULTS, **{name: values for name, values in (variables or {}).items() if values}}


def filters(*names: str, alias: str = "", over_chunks: bool = False) -> str:
    """The conditions of the dashboard variables ``names`` (plugin's $__conditionalAll: All adds nothing), on the
    ``chunks`` table if ``over_chunks``."""
    conditions = _CHUNK_CONDITIONS if over_chunks else _CONDITIONS
    return " AND ".join(f"$__conditionalAll({conditions[n].replace('{alias}', alias)}, ${n})" for n in names)


ON_SIDE = f"side = ${{{SIDE}:singlequote}}"


def _selected(over_chunks: bool = False) -> str:
    """Rows in the range of the chosen side, narrowed by the dashboard's variables."""
    return f"$__timeFilter(start_time) AND {ON_SIDE} AND {filters(*VARIABLES, over_chunks=over_chunks)}"


SELECTED = _selected()
TIMED = "coverage IN ('full', 'arrivals')"
"""Streams whose every chunk's arrival is known (``streams.coverage``): per-stream gap figures (a stream's p99, its
longest gap, ITL goodput) read only these. A partial timeline's gaps are those between the chunks kept, so its
longest gap is a floor, not a fact; such streams, and those whose source knew no chunks, are counted apart
(``incomplete``)."""


def timed_goodput(slo_us: str) -> str:
    """ITL goodput as SQL: the share of the streams whose every gap is known that kept each within ``slo_us`` (SQL
    for the SLO in µs); NULL, not NaN, when no stream in the range has every gap known."""
    return f"countIf(ifNull(gap_max_us, 0) <= {slo_us} AND {TIMED}) / nullIf(countIf({TIMED}), 0)"


UNTIMED_CHUNKS = "coverage IN ('partial', 'unreadable')"
"""Streams whose chunks may be stored without every arrival known: of the streams the attribution job rates (those
with chunks), the ones not ``TIMED``. Their set is small where the timed streams' is the fleet, so figures over
timed streams' verdicts leave these out rather than look the timed ones up."""
SIZED = "coverage IN ('full', 'partial')"
"""Streams whose chunks' sizes are known: figures of tokens and bytes per chunk read only these (a source that
stamped arrivals alone says nothing of what a chunk carried)."""
SELECTED_CHUNKS = _selected(over_chunks=True)
ROUTES_ALL = "($__conditionalAll(0, $route))"
"""True when every route is chosen. ``gap_histograms`` carry no route (the server span's, known once that span
arrives), so a panel over them answers from raw chunks while routes are chosen: each such panel is a UNION ALL
of the two, and the branch whose condition is false reads nothing."""


def _within(step: int, start: str, end: str) -> str:
    """Rows of intervals inside the whole intervals of ``step`` that the range holds."""
    return (
        f"interval_start >= toDateTime(intDiv(toUInt32({start}) + {step - 1}, {step}) * {step}, 'UTC') "
        f"AND interval_start < toDateTime(intDiv(toUInt32({end}), {step}) * {step}, 'UTC')"
    )


def over_range(start: str = "$__fromTime", end: str = "$__toTime") -> str:
    """The histogram rows that count the streams started from ``start`` to ``end`` (SQL times; the query's range by
    default) once: each whole hour from the hour's rows, the rest from the longest step that fits, the edges from
    5 s rows (those that meet the range, as ``HISTOGRAM_RANGE``). What it reads grows with the labels, not with the
    range."""
    longest_first = HISTOGRAM_STEPS_S
    parts = []
    for i, step in enumerate(longest_first):
        held = _within(step, start, end) if step != longest_first[-1] else _meeting(str(step), start, end)
        outside = f" AND NOT ({_within(longest_first[i - 1], start, end)})" if i else ""
        parts.append(f"(step = {step} AND {held}{outside})")
    return "(" + "\n    OR ".join(parts) + ")"


HISTOGRAMS_OVER_RANGE = over_range()
"""The histogram rows that count the query's range once, for a panel that does not draw intervals (a table)."""

HISTOGRAMS_SELECTED = (
    f"{HISTOGRAM_STEP} AND {HISTOGRAM_RANGE} AND {ON_SIDE} "
    f"AND {filters('tenant', 'service', 'provider', 'model')} AND {ROUTES_ALL}"
)
"""Rows of ``gap_histograms`` for the panel's interval, range, side and variables."""
TABLE_HISTOGRAMS_SELECTED = (
    f"{HISTOGRAMS_OVER_RANGE} AND {ON_SIDE} AND {filters('tenant', 'service', 'provider', 'model')} AND {ROUTES_ALL}"
)
"""Rows of ``gap_histograms`` or ``stream_histograms`` counting the range once, for the side and variables."""
STALL_FILTERS = f"{ON_SIDE} AND {filters('tenant', 'service', 'model', 'route')}"
"""Stalls and quality rows carry no provider (stalls are found on the client and browser sides)."""
ATTRIBUTED_STALL = (
    "A stall here is attribution's: a content gap of at least 400 ms, or one well over the stream's own rhythm "
    "(at least 150 ms and 3x its median gap). Stall count, stall rate and ITL goodput count only gaps over the "
    f"{DEFAULT_STALL_THRESHOLD_MS:g} ms SLO, so they can count fewer."
)
"""What the stall panels count, next to the SLO's single threshold (``StallRules``' defaults, which a test checks)."""

STORED_BYTES_SQL = """
SELECT sum(data_compressed_bytes) / nullIf((SELECT sum(length(gap_us)) FROM chunk_arrays), 0)
FROM system.parts
WHERE database = currentDatabase() AND table = 'chunk_arrays' AND active
"""
"""Bytes on disk per stored chunk, over the whole table (parts do not split by time or tenant); NULL while no
chunk is stored (streams of sources without chunks still take rows)."""


def raw_itl_heatmap(condition: str = "") -> str:
    """The heatmap counted from raw chunks (with ``condition`` added to its filter): the panel's answer while
    routes are chosen, and what layouts of chunks are compared on (benchmarks/chunk_layout.py)."""
    return f"""SELECT $__timeInterval(start_time) AS time,
    {_itl_bucket_columns()}
FROM chunks
WHERE {SELECTED_CHUNKS} AND kind = 'content'{condition}
GROUP BY time"""


ITL_HEATMAP = Panel(
    "itl_heatmap",
    "Inter-token latency over time",
    "Client-side gaps between content chunks, counted per latency bucket (upper bound in ms) per interval.",
    "heatmap",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time,
        {_itl_bucket_sums()}
    FROM gap_histograms
    WHERE {HISTOGRAMS_SELECTED}
    GROUP BY time
    UNION ALL
{raw_itl_heatmap(f" AND NOT {ROUTES_ALL}")}
)
ORDER BY time""",
    unit="ms",
)

STREAM_P99_HISTOGRAM = Panel(
    "stream_p99_histogram",
    "Per-stream p99 inter-token latency",
    "Each client stream's own 99th-percentile gap: the tail that averages hide.",
    "histogram",
    f"""SELECT gap_p99_us / 1000 AS p99_ms
FROM stream_metrics
WHERE {SELECTED} AND gap_p99_us IS NOT NULL AND {TIMED}""",
    unit="ms",
)

STALLS_BY_CAUSE = Panel(
    "stalls_by_cause",
    "Stalls by cause",
    f"Client stalls per interval, by the cause attribution gave them. {ATTRIBUTED_STALL}",
    "timeseries",
    f"""SELECT $__timeInterval(start_time) AS time, cause, count() AS stalls
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY time, cause
ORDER BY time, cause""",
    unit="short",
    stacked=True,
)


def streams_with(*columns: str) -> str:
    """``streams`` as a subquery with the ``model`` column the variables filter on, and ``columns`` more."""
    extra = "".join(f", {column}" for column in columns)
    return f"(SELECT *, if(response_model != '', response_model, request_model) AS model{extra} FROM streams)"


TOKENS_PER_S = "tokens / if(last_content_us > ttft_us, (last_content_us - ttft_us) / 1e6, NULL)"
"""``stream_metrics.tokens_per_s`` over ``streams`` (a test holds the two together)."""


def figures_of(table: str, keys: str, selected: str) -> str:
    """SQL for each figure of a ``table`` of per-stream histograms per ``keys`` and figure, over rows ``selected``:
    ``counted`` streams, ``positive`` those above bucket 0, ``total`` the sum of the buckets (a count figure's sum)
    and ``median`` the bucket holding the median."""
    median = bucket_at(0.5, "arraySort(groupArray((bucket, n)))", "counted")
    return f"""SELECT {keys}, figure, sum(n) AS counted, sumIf(n, bucket > 0) AS positive,
            sumIf(toUInt64(bucket) * n, bucket > 0) AS total, {median} AS median
        FROM (
            SELECT {keys}, figure, bucket, sum(streams) AS n
            FROM {table}
            WHERE {selected}
            GROUP BY {keys}, figure, bucket
        )
        GROUP BY {keys}, figure"""


def _log_bucket_value(bucket: str, alias: str = "") -> str:
    """SQL for the value a duration's or rate's log ``bucket`` of ``stream_histograms`` or ``smoothing_histograms``
    stands for, its geometric middle (``alias`` names the bucket's expression, read twice)."""
    named = f"({bucket} AS {alias})" if alias else bucket
    return f"if({named} = {STREAM_ZERO_BUCKET}, 0, pow({GAP_BUCKET_RATIO}, {alias or bucket} - 0.5))"


def _of_figure(value: str, figure: str) -> str:
    """SQL for ``value`` on the row of ``figure`` among rows per figure, NULL where there is none."""
    return f"anyIf(toNullable({value}), figure = '{figure}')"


def figure_median(figure: str, index: bool = False) -> str:
    """SQL for the median of ``figure`` over a ``figures_of`` query's rows (per its keys), NULL where none is
    counted: a duration's or rate's log bucket read as its geometric middle, an ``index``'s step as its middle."""
    return _of_figure(f"(median + 0.5) / {INDEX_STEPS}" if index else _log_bucket_value("median"), figure)


def figure_quantile(level: float, histogram: str, count: str, name: str) -> str:
    """SQL for quantile ``level`` of a duration or rate whose ``stream_histograms`` buckets a sorted ``histogram``
    counts, ``count`` in all: the bucket holding quantileExact's rank, read as its geometric middle. ``name`` keeps
    the expression's alias apart."""
    return _log_bucket_value(bucket_at(level, histogram, count), f"bucket_{name}")


def _figures_in(selected: str, *figures: str) -> str:
    """The histogram rows ``selected`` of ``figures`` only."""
    return f"{selected} AND figure IN ({', '.join(repr(figure) for figure in figures)})"


def figure_histogram(figures: str | tuple[str, ...], selected: str, *keys: str) -> str:
    """SQL for the sorted histogram (``histogram``: array of (bucket, streams)) of ``stream_histograms`` figures and
    the streams it counts (``counted``), per figure and ``keys`` (each ``name`` or ``expression AS name``) over the
    rows ``selected``."""
    names = ", ".join(["figure", *(key.rsplit(" AS ", 1)[-1] for key in keys)])
    wanted = _figures_in(selected, *((figures,) if isinstance(figures, str) else figures))
    return f"""SELECT {names}, sum(n) AS counted, arraySort(groupArray((bucket, n))) AS histogram
        FROM (
            SELECT {", ".join(["figure", *keys])}, bucket, sum(streams) AS n
            FROM stream_histograms
            WHERE {wanted}
            GROUP BY {names}, bucket
        )
        GROUP BY {names}"""


_SHAPE_FIGURES = ("tokens_per_s", "first_byte_lead_us", "head_burst_ratio")


_MEDIAN_TOKENS_PER_CHUNK = (
    f"{median_of('sumMap(content_chunks_by_tokens)', 'sum(content_chunks)')} AS median_tokens_per_chunk"
)
"""Over ``stream_totals`` or the streams: exact either way, the chunks by tokens being summed at insert."""

TOKENS_PER_CHUNK = Panel(
    "tokens_per_chunk",
    "Tokens per chunk (median)",
    "Median tokens per content chunk, by provider and model: fewer per chunk costs more envelopes and spans. "
    "The median is the typical chunk; Chunk economics gives the mean (all tokens over all chunks), which a few "
    "large chunks pull up.",
    "timeseries",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time, concat(provider, ' ', model) AS series, {_MEDIAN_TOKENS_PER_CHUNK}
    FROM stream_totals
    WHERE {HISTOGRAMS_SELECTED} AND {SIZED}
    GROUP BY time, series
    HAVING sum(content_chunks) > 0
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, concat(provider, ' ', model) AS series, {_MEDIAN_TOKENS_PER_CHUNK}
    FROM stream_metrics
    WHERE {SELECTED} AND content_chunks > 0 AND {SIZED} AND NOT {ROUTES_ALL}
    GROUP BY time, series
)
ORDER BY time, series""",
    unit="short",
)

BROWSER_RENDER = Panel(
    "browser_render",
    "Render time per chunk in browsers",
    "What the last hop adds to each content chunk in the browser: the app's render work, and the wait from the "
    "chunk's arrival to the frame that showed it (p50 and p95 per interval; chunks whose paint was measured).",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT $__timeInterval(start_time) AS time,
        arrayConcat(quantilesExact(0.5, 0.95)(render_us), quantilesExact(0.5, 0.95)(paint_delay_us)) AS q
    FROM chunks
    WHERE $__timeFilter(start_time) AND side = 'browser' AND kind IN ('first', 'content') AND paint_delay_us > 0
        AND {filters(*VARIABLES, over_chunks=True)}
    GROUP BY time
)
ARRAY JOIN ['render p50', 'render p95', 'arrival to paint p50', 'arrival to paint p95'] AS series,
    arrayMap(x -> x / 1000, q) AS value
ORDER BY time, series""",
    unit="ms",
)

GPU_TO_GLASS = Panel(
    "gpu_to_glass",
    "GPU to glass: the first token",
    "Where a browser's wait for its first token went, averaged per interval over browser streams whose server span "
    "is in the same trace: the engine (request received to first chunk emitted: queue and prefill), the network "
    "(the browser's time to first chunk less the engine's: both hops, and any gateway), and the screen (arrival to "
    "the frame that painted it). Durations on each host, never a clock subtraction.",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT $__timeInterval(b.start_time) AS time,
        avg(s.ttft_us) / 1000 AS engine,
        avg(greatest(toInt64(b.ttft_us) - toInt64(s.ttft_us), 0)) / 1000 AS network,
        avg(f.paint_delay_us) / 1000 AS screen
    FROM stream_metrics AS b
    INNER JOIN stream_metrics AS s ON s.tenant = b.tenant AND s.trace_id = b.trace_id AND s.side = 'server'
    INNER JOIN (
        SELECT tenant, trace_id, span_id, paint_delay_us FROM chunks
        WHERE $__timeFilter(start_time) AND side = 'browser' AND kind = 'first'
    ) AS f ON f.tenant = b.tenant AND f.trace_id = b.trace_id AND f.span_id = b.span_id
    WHERE $__timeFilter(b.start_time) AND b.side = 'browser' AND b.ttft_us IS NOT NULL AND s.ttft_us IS NOT NULL
        AND {filters(*VARIABLES, alias="b.")}
    GROUP BY time
)
ARRAY JOIN ['1 engine', '2 network', '3 screen'] AS series, [engine, network, screen] AS value
ORDER BY time, series""",
    unit="ms",
    stacked=True,
)

CHUNKING_CHANGES = Panel(
    "chunking_changes",
    "Chunking changes",
    f"Intervals where a provider and model's median tokens per chunk moved by {CHANGE_FACTOR}x or more from the "
    f"interval before (at least {CHANGE_MIN_CHUNKS} chunks in each).",
    "table",
    f"""SELECT time, provider, model, previous AS tokens_per_chunk_before, median AS tokens_per_chunk_after,
    previous_chunks AS chunks_before, chunks AS chunks_after
FROM (
    SELECT time, provider, model, median, chunks,
        lagInFrame(median) OVER w AS previous,
        lagInFrame(chunks) OVER w AS previous_chunks
    FROM (
        SELECT {HISTOGRAM_INTERVAL} AS time, provider, model, sum(content_chunks) AS chunks,
            {median_of("sumMap(content_chunks_by_tokens)", "chunks")} AS median
        FROM stream_totals
        WHERE {HISTOGRAMS_SELECTED} AND {SIZED}
        GROUP BY time, provider, model
        HAVING chunks > 0
        UNION ALL
        SELECT $__timeInterval(start_time) AS time, provider, model, sum(content_chunks) AS chunks,
            {median_of("sumMap(content_chunks_by_tokens)", "chunks")} AS median
        FROM stream_metrics
        WHERE {SELECTED} AND content_chunks > 0 AND {SIZED} AND NOT {ROUTES_ALL}
        GROUP BY time, provider, model
    )
    WINDOW w AS (PARTITION BY provider, model ORDER BY time ROWS BETWEEN 1 PRECEDING AND CURRENT ROW)
)
WHERE previous_chunks >= {CHANGE_MIN_CHUNKS} AND chunks >= {CHANGE_MIN_CHUNKS}
    AND (median * {CHANGE_FACTOR} <= previous OR median >= previous * {CHANGE_FACTOR})
ORDER BY time, provider, model""",
)

STALL_CAUSES = Panel(
    "stall_causes",
    "Stall attribution",
    f"Every client stall in the range by cause: how many, how long, how sure. {ATTRIBUTED_STALL}",
    "table",
    f"""SELECT cause, count() AS stalls, round(stalls / sum(stalls) OVER (), 3) AS share,
    quantileExact(0.5)(gap_us) / 1000 AS median_gap_ms, max(gap_us) / 1000 AS worst_gap_ms,
    round(avg(confidence), 2) AS mean_confidence
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY cause
ORDER BY stalls DESC, cause""",
)

STREAM_SHAPE = Panel(
    "stream_shape",
    "Stream shape by model",
    "Client streams by model: pace, the first byte's lead over the first content, bursts at the head "
    "followed by a stall, and streams stuck repeating themselves.",
    "table",
    f"""SELECT * FROM (
    SELECT t.model AS model, t.streams AS streams, f.tokens_per_s_p50 AS tokens_per_s_p50,
        f.first_byte_lead_ms_p50 AS first_byte_lead_ms_p50, f.head_burst_ratio_p50 AS head_burst_ratio_p50,
        t.frontloaded_then_stalled AS frontloaded_then_stalled, t.stuck_loops AS stuck_loops,
        round(t.stalled / t.streams, 3) AS stall_rate
    FROM (
        SELECT model, sum(streams) AS streams, sum(frontloaded_then_stalled) AS frontloaded_then_stalled,
            sum(stuck_loops) AS stuck_loops, sum(stalled) AS stalled
        FROM stream_totals
        WHERE {TABLE_HISTOGRAMS_SELECTED}
        GROUP BY model
    ) AS t
    LEFT JOIN (
        SELECT model, round({figure_median("tokens_per_s")}, 1) AS tokens_per_s_p50,
            round({figure_median("first_byte_lead_us")} / 1000, 1) AS first_byte_lead_ms_p50,
            round({figure_median("head_burst_ratio")}, 2) AS head_burst_ratio_p50
        FROM ({figures_of("stream_histograms", "model", _figures_in(TABLE_HISTOGRAMS_SELECTED, *_SHAPE_FIGURES))})
        GROUP BY model
    ) AS f ON f.model = t.model
    UNION ALL
    SELECT model, count() AS streams,
        round(quantileExact(0.5)(tokens_per_s), 1) AS tokens_per_s_p50,
        round(quantileExact(0.5)(first_byte_lead_us) / 1000, 1) AS first_byte_lead_ms_p50,
        round(quantileExact(0.5)(head_burst_ratio), 2) AS head_burst_ratio_p50,
        countIf(frontloaded_then_stalled) AS frontloaded_then_stalled,
        countIf(stuck_loop) AS stuck_loops,
        round(countIf(stall_count > 0) / streams, 3) AS stall_rate
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROUTES_ALL}
    GROUP BY model
)
ORDER BY streams DESC, model""",
)


MODEL_TEXTURE = Panel(
    "model_texture",
    "Stream texture by model version",
    "Gap distribution (all client content chunks of the model) next to each version's pace, stall rate and "
    "pause before its first tool call: compare a new version with the one before.",
    "table",
    f"""SELECT g.model AS model, g.gaps AS gaps, g.gap_p50_ms AS gap_p50_ms, g.gap_p95_ms AS gap_p95_ms,
    g.gap_p99_ms AS gap_p99_ms, g.gap_max_ms AS gap_max_ms, s.tokens_per_s_p50 AS tokens_per_s_p50,
    s.stall_rate AS stall_rate, s.tool_calls AS tool_calls, s.tool_call_pause_ms_p50 AS tool_call_pause_ms_p50
FROM (
    SELECT model, gaps, {gap_quantile_ms(0.5, "histogram", "gaps", "p50")} AS gap_p50_ms,
        {gap_quantile_ms(0.95, "histogram", "gaps", "p95")} AS gap_p95_ms,
        {gap_quantile_ms(0.99, "histogram", "gaps", "p99")} AS gap_p99_ms, gap_max_ms
    FROM ({gap_histogram(TABLE_HISTOGRAMS_SELECTED, "model")})
    UNION ALL
    SELECT model, count() AS gaps, quantilesExact(0.5, 0.95, 0.99)(gap_us)[1] / 1000 AS gap_p50_ms,
        quantilesExact(0.5, 0.95, 0.99)(gap_us)[2] / 1000 AS gap_p95_ms,
        quantilesExact(0.5, 0.95, 0.99)(gap_us)[3] / 1000 AS gap_p99_ms, max(gap_us) / 1000 AS gap_max_ms
    FROM chunks
    WHERE {SELECTED_CHUNKS} AND kind = 'content' AND NOT {ROUTES_ALL}
    GROUP BY model
) AS g
LEFT JOIN (
    SELECT model,
        round({figure_median("tokens_per_s")}, 1) AS tokens_per_s_p50,
        round(anyIf(positive, figure = 'stall_count') / anyIf(counted, figure = 'stall_count'), 3) AS stall_rate,
        anyIf(positive, figure = 'tool_call') AS tool_calls,
        {figure_median("tool_call_pause_us")} / 1000 AS tool_call_pause_ms_p50
    FROM ({figures_of("stream_histograms", "model", TABLE_HISTOGRAMS_SELECTED)})
    GROUP BY model
    UNION ALL
    SELECT model, round(quantileExact(0.5)(tokens_per_s), 1) AS tokens_per_s_p50,
        round(countIf(stall_count > 0) / count(), 3) AS stall_rate,
        countIf(first_tool_call_seq IS NOT NULL) AS tool_calls,
        quantileExact(0.5)(tool_call_pause_us) / 1000 AS tool_call_pause_ms_p50
    FROM {streams_with(f"{TOKENS_PER_S} AS tokens_per_s")}
    WHERE {SELECTED} AND NOT {ROUTES_ALL}
    GROUP BY model
) AS s ON s.model = g.model
ORDER BY model""",
)

STREAM_QUALITY = Panel(
    "stream_quality",
    "Streaming quality indices",
    "Etalon's fluidity-index (share of tokens on time against deadlines with carried slack; 1 is perfect) and "
    "an Andes-style QoE (delivery against an expected TTFT and reading pace; 1 is perfect), by model.",
    "table",
    f"""SELECT model, count() AS streams,
    round(quantileExact(0.5)(fluidity_index), 3) AS fluidity_p50,
    round(quantileExact(0.1)(fluidity_index), 3) AS fluidity_p10,
    round(quantileExact(0.5)(andes_qoe), 3) AS andes_qoe_p50,
    round(quantileExact(0.1)(andes_qoe), 3) AS andes_qoe_p10
FROM stream_quality
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
GROUP BY model
ORDER BY streams DESC, model""",
)


def _before_and_after(column: str) -> str:
    """A column for each side of a trade: ``{when}`` in ``column`` is ``before``, then ``after``."""
    return ", ".join(column.format(when=when) for when in ("before", "after"))


SMOOTHING_HISTOGRAMS_SELECTED = (
    f"{HISTOGRAMS_OVER_RANGE} AND {ON_SIDE} AND {filters('tenant', 'service', 'model')} AND {ROUTES_ALL}"
)
"""Rows of ``smoothing_histograms`` counting the range once, for the side and variables (no provider: as
``stream_smoothing``)."""


_LONGEST_GAP_MEDIANS = _before_and_after(
    f"round({figure_median('longest_gap_{when}_us')} / 1000, 1) AS longest_gap_p50_{{when}}_ms"
)


SMOOTHING_TRADE = Panel(
    "smoothing_trade",
    "What smoothing would buy",
    "Each stream replayed behind a client-side smoothing buffer that shows nothing until its depth has passed "
    "since the first chunk, then one chunk per the stream's own median gap: what it adds to TTFT and to the "
    "end of the answer, the streams that still show a stall and the stalls left (as attribution counts them), "
    "the median longest gap, and the quality indices' medians before and after, over streams whose every "
    "chunk's time is known. Worth it where stalls fall much more than the indices do.",
    "table",
    f"""SELECT * FROM (
    SELECT depth_ms, anyIf(counted, figure = 'stalls_before') AS streams,
        round({figure_median("added_end_us")} / 1000, 1) AS added_end_p50_ms,
        {_before_and_after("round(anyIf(positive, figure = 'stalls_{when}') / streams, 3) AS stalled_share_{when}")},
        {_before_and_after("anyIf(total, figure = 'stalls_{when}') AS stall_count_{when}")},
        {_LONGEST_GAP_MEDIANS},
        {_before_and_after(f"round({figure_median('fluidity_{when}', index=True)}, 3) AS fluidity_p50_{{when}}")},
        {_before_and_after(f"round({figure_median('andes_{when}', index=True)}, 3) AS andes_qoe_p50_{{when}}")}
    FROM ({figures_of("smoothing_histograms", "depth_ms", SMOOTHING_HISTOGRAMS_SELECTED)})
    GROUP BY depth_ms
    UNION ALL
    SELECT depth_ms, count() AS streams,
        round(quantileExact(0.5)(added_end_us) / 1000, 1) AS added_end_p50_ms,
        {_before_and_after("round(countIf(stalls_{when} > 0) / count(), 3) AS stalled_share_{when}")},
        {_before_and_after("sum(stalls_{when}) AS stall_count_{when}")},
        {_before_and_after("round(quantileExact(0.5)(longest_gap_{when}_us) / 1000, 1) AS longest_gap_p50_{when}_ms")},
        {_before_and_after("round(quantileExact(0.5)(fluidity_{when}), 3) AS fluidity_p50_{when}")},
        {_before_and_after("round(quantileExact(0.5)(andes_{when}), 3) AS andes_qoe_p50_{when}")}
    FROM stream_smoothing
    WHERE $__timeFilter(start_time) AND {STALL_FILTERS} AND NOT {ROUTES_ALL}
        AND (trace_id, span_id) NOT IN (
            SELECT trace_id, span_id FROM streams WHERE $__timeFilter(start_time) AND {UNTIMED_CHUNKS}
        )
    GROUP BY depth_ms
)
ORDER BY depth_ms""",
)


STRUCTURED_OUTPUT = Panel(
    "structured_output",
    "Structured output as it streams",
    "Streams whose JSON answer (a JSON response format) or first tool call's arguments the SDK followed, by model "
    "and document: the median time to the first token, to the first usable field (its value complete: what a UI "
    "can first show or act on), the median wait between the two, the median time to a valid document (over those "
    "that became valid), and the shares that closed valid, were cut off before closing (truncated) or broke the "
    "JSON grammar (malformed).",
    "table",
    f"""SELECT model, json_document AS document, count() AS streams,
    round(quantileExact(0.5)(ttft_us) / 1000, 1) AS ttft_p50_ms,
    round(quantileExact(0.5)(first_field_us) / 1000, 1) AS first_field_p50_ms,
    round(quantileExact(0.5)(toInt64(first_field_us) - toInt64(ttft_us)) / 1000, 1) AS first_field_after_ttft_p50_ms,
    round(quantileExact(0.5)(json_valid_us) / 1000, 1) AS valid_p50_ms,
    round(countIf(json_outcome = 'valid') / count(), 3) AS valid_share,
    round(countIf(json_outcome = 'truncated') / count(), 3) AS truncated_share,
    round(countIf(json_outcome = 'malformed') / count(), 3) AS malformed_share
FROM {streams_with("if(length(json_field_us) > 0, json_field_us[1], NULL) AS first_field_us")}
WHERE {SELECTED} AND json_document != ''
GROUP BY model, document
ORDER BY streams DESC, model, document""",
)

RETRACTED_TEXT = Panel(
    "retracted_text",
    "Text taken back",
    "Streams that showed text and then withdrew it (speculative drafts a verifier rejected, a replaced suffix), by "
    "model: the share of streams that did, how often, the tokens withdrawn per stream and as a share of the tokens "
    "shown, and how long the oldest withdrawn text had been on screen when it went (median and p95 over the "
    "withdrawals). The final answer may be right; the reader watched it change.",
    "table",
    f"""SELECT model, count() AS streams, round(countIf(retractions > 0) / count(), 3) AS retracting_share,
    sum(retractions) AS withdrawals, round(sum(retracted_tokens) / count(), 2) AS retracted_tokens_per_stream,
    round(sum(retracted_tokens) / nullIf(sum(tokens), 0), 4) AS retracted_token_share,
    round(quantileExactArray(0.5)(retraction_shown_us) / 1000, 1) AS shown_before_retraction_p50_ms,
    round(quantileExactArray(0.95)(retraction_shown_us) / 1000, 1) AS shown_before_retraction_p95_ms
FROM {streams_with()}
WHERE {SELECTED}
GROUP BY model
ORDER BY withdrawals DESC, streams DESC, model""",
)

_CHUNK_RATIOS = (
    "round({alias}tokens / nullIf({alias}chunks, 0), 2) AS mean_tokens_per_chunk, "
    "round({alias}wire_bytes / nullIf({alias}chunks, 0), 1) AS wire_bytes_per_chunk, "
    "round({alias}wire_bytes / nullIf({alias}content_bytes, 0), 2) AS wire_per_content_byte"
)
"""Chunk economics' ratios of its sums (``{alias}``: the sums' table alias and a dot, or nothing)."""

_CHUNK_PACE_SELECTED = _figures_in(TABLE_HISTOGRAMS_SELECTED, "chunks_per_s")

CHUNK_ECONOMICS = Panel(
    "chunk_economics",
    "Chunk economics",
    "What a chunk costs: tokens (the mean) and wire bytes per chunk by provider and model, chunks per second; "
    "OTLP bytes received per stored chunk (the collector's request log) and bytes on disk per chunk "
    "(ClickHouse parts).",
    "table",
    f"""SELECT *,
    (SELECT round(sum(received_bytes) / nullIf(sum(rows['chunks']), 0), 2)
        FROM ingest_requests WHERE $__timeFilter(time) AND signal = 'traces') AS otlp_bytes_per_chunk,
    (SELECT round(({STORED_BYTES_SQL.strip()}), 2)) AS stored_bytes_per_chunk
FROM (
    SELECT t.provider AS provider, t.model AS model, t.streams AS streams, t.chunks AS chunks,
        {_CHUNK_RATIOS.format(alias="t.")}, f.chunks_per_s_p50 AS chunks_per_s_p50
    FROM (
        SELECT provider, model, sum(streams) AS streams, sum(content_chunks) AS chunks, sum(tokens) AS tokens,
            sum(wire_bytes) AS wire_bytes, sum(content_bytes) AS content_bytes
        FROM stream_totals
        WHERE {TABLE_HISTOGRAMS_SELECTED} AND {SIZED}
        GROUP BY provider, model
    ) AS t
    LEFT JOIN (
        SELECT provider, model, round({figure_median("chunks_per_s")}, 1) AS chunks_per_s_p50
        FROM ({figures_of("stream_histograms", "provider, model", _CHUNK_PACE_SELECTED)})
        GROUP BY provider, model
    ) AS f ON f.provider = t.provider AND f.model = t.model
    UNION ALL
    SELECT provider, model, streams, chunks, {_CHUNK_RATIOS.format(alias="")}, chunks_per_s_p50
    FROM (
        SELECT provider, model, count() AS streams, sum(content_chunks) AS chunks, sum(tokens) AS tokens,
            sum(wire_bytes) AS wire_bytes, sum(content_bytes) AS content_bytes,
            round(quantileExact(0.5)(chunks_per_s), 1) AS chunks_per_s_p50
        FROM stream_metrics
        WHERE {SELECTED} AND {SIZED} AND NOT {ROUTES_ALL}
        GROUP BY provider, model
    )
)
ORDER BY chunks DESC, provider, model""",
)

CANCELLATION = Panel(
    "cancellation",
    "Cancellation tax",
    "Client streams cancelled or cut off, the tokens servers generated after that, and how long the cancel "
    "took to reach the server (round trip plus reaction, aligned through content).",
    "table",
    f"""SELECT t.streams AS streams, t.cancelled AS cancelled, round(cancelled / streams, 3) AS cancel_rate,
    c.tokens_after_cancel AS tokens_after_cancel, c.propagation_ms_p50 AS propagation_ms_p50,
    c.propagation_ms_p95 AS propagation_ms_p95
FROM (
    SELECT sum(streams) AS streams, sum(cancelled) AS cancelled
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    HAVING streams > 0
    UNION ALL
    SELECT count() AS streams, countIf(outcome IN ('cancelled', 'disconnected')) AS cancelled
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROUTES_ALL}
    HAVING streams > 0
) AS t
CROSS JOIN (
    SELECT sum(tokens_after_cancel) AS tokens_after_cancel,
        quantileExact(0.5)(propagation_us) / 1000 AS propagation_ms_p50,
        quantileExact(0.95)(propagation_us) / 1000 AS propagation_ms_p95
    FROM cancellations
    WHERE {SELECTED}
) AS c""",
)

STREAM_TIMELINE = Panel(
    "stream_timeline",
    "One stream, from the server to the screen",
    "Content delivered over time on each side of one trace, each side timed from its own span start (the "
    "client sending the request, the server receiving it: one network hop apart, never a clock subtraction); "
    "for a browser, also when each chunk was painted.",
    "timeline",
    """SELECT side, ms_since_request, content_bytes FROM (
    SELECT side, seq, offset_us / 1000 AS ms_since_request,
        sum(content_bytes) OVER (PARTITION BY side ORDER BY seq) AS content_bytes
    FROM chunk_timeline
    WHERE trace_id_bytes = unhex('${trace_id}') AND kind IN ('first', 'content')
    UNION ALL
    SELECT 'browser painted' AS side, seq, (offset_us + paint_delay_us) / 1000 AS ms_since_request,
        sum(content_bytes) OVER (ORDER BY seq) AS content_bytes
    FROM chunk_timeline
    WHERE trace_id_bytes = unhex('${trace_id}') AND side = 'browser' AND kind IN ('first', 'content')
        AND paint_delay_us > 0
)
ORDER BY side, seq""",
    variables=("trace_id",),
    x_field="ms_since_request",
)

WORST_STALLED_TRACE = f"""SELECT trace_id
FROM stalls
WHERE $__timeFilter(start_time) AND server_gap_us IS NOT NULL AND {STALL_FILTERS}
ORDER BY gap_us DESC, trace_id
LIMIT 1"""
"""The trace the report draws in STREAM_TIMELINE: the longest stall in the range seen from both sides."""
WORST_STALLED_TRACES = """SELECT trace_id
FROM stalls
WHERE $__timeFilter(start_time) AND side = 'client' AND server_gap_us IS NOT NULL
GROUP BY trace_id
ORDER BY max(gap_us) DESC, trace_id
LIMIT 50"""
"""The drilldown's choice of traces, the worst first: the client streams of the range with the longest stalls seen
from both sides (the dashboard opens on the first)."""

SLO_US = int(DEFAULT_STALL_THRESHOLD_MS * 1000)
"""A client stream meets the ITL SLO when every gap between its content chunks is within the default stall
threshold (400 ms): a longer gap is a freeze the reader sees, the line stall counts and ITL goodput draw too."""
GOODPUT_TARGET = 0.99
"""Share of client streams that must meet it (ITL goodput). One stream in a hundred with a freeze keeps a chat
product trustworthy; the 1% error budget is what the burn-rate alerts spend."""
TENANT_FILTER = filters("tenant")


def _figure_at(level: float, figure: str) -> str:
    """SQL for quantile ``level`` of ``figure`` over ``figure_histogram`` rows; NULL where none is counted."""
    return _of_figure(figure_quantile(level, "histogram", "counted", f"{figure}_{round(level * 100)}"), figure)


FLEET_STATS = Panel(
    "fleet_stats",
    "Client streams",
    "Streams in the range, TTFT p50 and p95, the p99 of per-stream p99 gaps, ITL goodput (share of streams whose "
    f"every gap stayed within {SLO_US // 1000} ms), the share of streams with a stall, and the streams whose "
    "timeline is known only in part (chunks lost by the sender, unreadable, a source that knew no chunks), which "
    "the gap figures leave out.",
    "stat",
    f"""SELECT t.counted AS streams, f.ttft_p50 / 1000 AS ttft_p50_ms, f.ttft_p95 / 1000 AS ttft_p95_ms,
    f.p99_of_p99 / 1000 AS p99_of_p99_ms, t.itl_goodput AS itl_goodput, t.stall_rate AS stall_rate,
    t.incomplete AS incomplete
FROM (
    SELECT sum(streams) AS counted, sumIf(streams, {TIMED}) AS timed,
        (timed - sumIf(over_slo, {TIMED})) / nullIf(timed, 0) AS itl_goodput,
        sumIf(stalled, {TIMED}) / nullIf(timed, 0) AS stall_rate, sumIf(streams, NOT {TIMED}) AS incomplete
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    HAVING {ROUTES_ALL}
) AS t
CROSS JOIN (
    SELECT {_figure_at(0.5, "ttft_us")} AS ttft_p50, {_figure_at(0.95, "ttft_us")} AS ttft_p95,
        {_figure_at(0.99, "gap_p99_us")} AS p99_of_p99
    FROM ({figure_histogram(("ttft_us", "gap_p99_us"), TABLE_HISTOGRAMS_SELECTED)})
) AS f
UNION ALL
SELECT count() AS streams,
    quantileExact(0.5)(ttft_us) / 1000 AS ttft_p50_ms, quantileExact(0.95)(ttft_us) / 1000 AS ttft_p95_ms,
    quantileExactIf(0.99)(gap_p99_us, {TIMED}) / 1000 AS p99_of_p99_ms,
    {timed_goodput(str(SLO_US))} AS itl_goodput,
    countIf(stall_count > 0 AND {TIMED}) / nullIf(countIf({TIMED}), 0) AS stall_rate,
    countIf(NOT {TIMED}) AS incomplete
FROM stream_metrics
WHERE {SELECTED} AND NOT {ROUTES_ALL}
HAVING NOT {ROUTES_ALL}""",
)

ITL_GOODPUT = Panel(
    "itl_goodput",
    "ITL goodput against the SLO",
    f"Share of client streams per interval whose every gap stayed within {SLO_US // 1000} ms; the line is the "
    f"{GOODPUT_TARGET:.0%} target the burn-rate alerts watch.",
    "timeseries",
    f"""SELECT * FROM (
    SELECT {HISTOGRAM_INTERVAL} AS time, 'goodput' AS series,
        (sum(streams) - sum(over_slo)) / sum(streams) AS itl_goodput
    FROM stream_totals
    WHERE {HISTOGRAMS_SELECTED} AND {TIMED}
    GROUP BY time
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, 'goodput' AS series,
        countIf(ifNull(gap_max_us, 0) <= {SLO_US}) / count() AS itl_goodput
    FROM stream_metrics
    WHERE {SELECTED} AND {TIMED} AND NOT {ROUTES_ALL}
    GROUP BY time
)
ORDER BY time""",
    unit="percentunit",
    threshold=GOODPUT_TARGET,
)

TTFT_OVER_TIME = Panel(
    "ttft_over_time",
    "Time to first token",
    "TTFT p50 and p95 of client streams per interval.",
    "timeseries",
    f"""SELECT time, series, value FROM (
    SELECT time, [{figure_quantile(0.5, "histogram", "counted", "p50")},
        {figure_quantile(0.95, "histogram", "counted", "p95")}] AS q
    FROM ({figure_histogram("ttft_us", HISTOGRAMS_SELECTED, f"{HISTOGRAM_INTERVAL} AS time")})
    UNION ALL
    SELECT $__timeInterval(start_time) AS time, arrayMap(x -> toFloat64(x), quantilesExact(0.5, 0.95)(ttft_us)) AS q
    FROM stream_metrics
    WHERE {SELECTED} AND ttft_us IS NOT NULL AND NOT {ROUTES_ALL}
    GROUP BY time
)
ARRAY JOIN ['p50', 'p95'] AS series, arrayMap(x -> x / 1000, q) AS value
ORDER BY time, series""",
    unit="ms",
)

CLIENT_VS_SERVER = Panel(
    "client_vs_server",
    "Longest stalls, client against server",
    "The client's gap next to the server's gap for the same content: a server gap close to the client's puts "
    "the delay at the engine, a small one puts it on the path.",
    "table",
    f"""SELECT start_time, trace_id, node_name, cause, round(confidence, 2) AS confidence,
    gap_us / 1000 AS client_gap_ms, server_gap_us / 1000 AS server_gap_ms
FROM stalls
WHERE $__timeFilter(start_time) AND {STALL_FILTERS}
ORDER BY gap_us DESC
LIMIT 50""",
)

ENGINE_EVENTS = Panel(
    "engine_events",
    "Engine and GPU events",
    "What the GPU agents saw on the serving nodes: preemptions, KV high-water, prefill bursts, spec-decode "
    "acceptance drops, queue spikes, restarts, XIDs, throttling.",
    "table",
    f"""SELECT start_time, node_name, kind, round(magnitude, 3) AS magnitude
FROM engine_events
WHERE $__timeFilter(start_time) AND {TENANT_FILTER}
ORDER BY start_time DESC
LIMIT 200""",
)

OTLP_BYTES_PER_CHUNK = Panel(
    "otlp_bytes_per_chunk",
    "OTLP bytes per chunk",
    "Trace bytes the collector received (as sent, compressed or not) per chunk stored, per interval.",
    "timeseries",
    f"""SELECT $__timeInterval(time) AS time, 'received' AS series,
    sum(received_bytes) / nullIf(sum(rows['chunks']), 0) AS bytes_per_chunk
FROM ingest_requests
WHERE $__timeFilter(ingest_requests.time) AND signal = 'traces' AND {TENANT_FILTER}
GROUP BY time
ORDER BY time""",
    unit="decbytes",
)


def node_metric(key: str, title: str, description: str, metric: str, aggregate: str, unit: str) -> Panel:
    """One engine or GPU metric of ``engine_samples`` per node (and GPU) over time."""
    return Panel(
        key,
        title,
        description,
        "timeseries",
        f"""SELECT $__timeInterval(time) AS time,
    if(gpu_uuid = '', node_name, concat(node_name, ' gpu', toString(gpu_index))) AS series,
    {aggregate}(value) AS {metric}
FROM engine_samples
WHERE $__timeFilter(engine_samples.time) AND metric = '{metric}' AND {TENANT_FILTER}
GROUP BY time, series
ORDER BY time, series""",
        unit=unit,
    )


KV_USAGE = node_metric("kv_usage", "KV-cache usage", "Peak KV-cache usage per node.", "kv_usage", "max", "percentunit")
PREEMPTIONS = node_metric(
    "preemptions", "Preemptions", "Requests preempted per interval (KV pressure).", "preemptions", "sum", "short"
)
STEP_TOKENS = node_metric(
    "step_tokens_max",
    "Largest step",
    "Tokens in the largest engine step per interval: a prefill joining the batch shows as a spike.",
    "step_tokens_max",
    "max",
    "short",
)
REQUESTS_WAITING = node_metric(
    "requests_waiting", "Requests waiting", "Queued requests per node.", "requests_waiting", "max", "short"
)
SPEC_ACCEPTANCE = node_metric(
    "spec_acceptance",
    "Draft acceptance",
    "Speculative decoding acceptance per node (a collapse slows every stream on it).",
    "spec_acceptance",
    "min",
    "percentunit",
)
GPU_UTILIZATION = node_metric(
    "gpu_utilization", "GPU utilisation", "Share of time a kernel ran, per GPU.", "utilization", "avg", "percentunit"
)
GPU_MEMORY = node_metric(
    "gpu_memory", "GPU memory used", "Device memory in use, per GPU.", "memory_used_bytes", "max", "bytes"
)
GPU_POWER = node_metric("gpu_power", "GPU power", "Board power draw, per GPU.", "power_watts", "avg", "watt")

TRACE = "trace_id = '${trace_id}'"
TRACE_STREAMS = Panel(
    "trace_streams",
    "The trace's streams",
    "Every side of the trace with its own statistics (each on its own host's clock).",
    "table",
    f"""SELECT side, service, node_name, model, outcome, ttft_us / 1000 AS ttft_ms, gap_p99_us / 1000 AS gap_p99_ms,
    gap_max_us / 1000 AS gap_max_ms, stall_count, tokens
FROM stream_metrics
WHERE {TRACE}
ORDER BY side""",
    variables=("trace_id",),
)
TRACE_STALLS = Panel(
    "trace_stalls",
    "The trace's stalls",
    "Each stall with its cause, confidence and the evidence attribution used.",
    "table",
    f"""SELECT seq, cause, round(confidence, 2) AS confidence, gap_us / 1000 AS client_gap_ms,
    server_gap_us / 1000 AS server_gap_ms, toString(evidence) AS evidence
FROM stalls
WHERE {TRACE}
ORDER BY seq""",
    variables=("trace_id",),
)
TRACE_NODE_EVENTS = Panel(
    "trace_node_events",
    "Events on the trace's node while it streamed",
    "Engine events on the node that served the trace, from 5 s before the stream to 5 s after it.",
    "table",
    f"""SELECT e.start_time AS start_time, e.end_time AS end_time, e.kind AS kind, round(e.magnitude, 3) AS magnitude
FROM engine_events AS e
INNER JOIN (
    SELECT node_name, min(start_time) - INTERVAL 5 SECOND AS low,
        max(start_time + toIntervalMicrosecond(duration_us)) + INTERVAL 5 SECOND AS high
    FROM streams
    WHERE {TRACE} AND side = 'server'
    GROUP BY node_name
) AS s ON s.node_name = e.node_name
WHERE e.start_time BETWEEN s.low AND s.high
ORDER BY e.start_time""",
    variables=("trace_id",),
)

STREAM_SOURCES = Panel(
    "stream_sources",
    "Where the streams came from",
    "Streams by the instrumentation that sent them and how much of each it knew: full (every chunk's time and "
    "size), partial (chunks lost by the sender), arrivals (each chunk's time, not its size), first_token (the time "
    "to the first token and the duration), duration (the call only), unreadable. Each figure reads only the "
    "streams that can give it.",
    "table",
    f"""SELECT source, coverage, streams, round(streams / sum(streams) OVER (), 3) AS share
FROM (
    SELECT source, coverage, sum(streams) AS streams
    FROM stream_totals
    WHERE {TABLE_HISTOGRAMS_SELECTED}
    GROUP BY source, coverage
    UNION ALL
    SELECT source, coverage, count() AS streams
    FROM stream_metrics
    WHERE {SELECTED} AND NOT {ROUTES_ALL}
    GROUP BY source, coverage
)
ORDER BY streams DESC, source, coverage""",
)

GENAI_METRICS = Panel(
    "genai_metrics",
    "What other instrumentations measured",
    "The GenAI histograms instrumentations export over OTLP (gen_ai.client.operation.duration, "
    "gen_ai.client.token.usage, gen_ai.server.time_to_first_token, ...), over the range: how many measurements, "
    "their mean, and p50 and p95 read off the buckets (within a bucket, by linear interpolation); failed calls "
    "(error_type) apart. A measurement counts when the interval of the point that carried it lies within the "
    "range (a series' first point stored covers its whole life so far). Durations are in seconds, as sent. A "
    "call these measure has no chunk timing unless the streamscope SDK saw it too.",
    "table",
    f"""SELECT metric, token_type, error_type, source, model, unit, measurements,
    if(unsummed > 0, NULL, round(total / measurements, 4)) AS mean,
    round({histogram_quantile(0.5, "buckets", "bounds", "p50")}, 4) AS p50,
    round({histogram_quantile(0.95, "buckets", "bounds", "p95")}, 4) AS p95
FROM (
    SELECT metric, token_type, error_type, source, model, unit, bounds, sum(count) AS measurements,
        sum(sum) AS total, countIf(sum IS NULL) AS unsummed, sumForEach(bucket_counts) AS buckets
    FROM genai_metric_intervals
    WHERE $__timeFilter(time) AND since >= $__fromTime AND {filters("tenant", "service", "provider", "model")}
    GROUP BY metric, token_type, error_type, source, model, unit, bounds
    HAVING measurements > 0
)
ORDER BY metric, token_type, error_type, source, model""",
)

PANELS: tuple[Panel, ...] = (
    ITL_HEATMAP,
    STREAM_P99_HISTOGRAM,
    STALLS_BY_CAUSE,
    TOKENS_PER_CHUNK,
    STALL_CAUSES,
    STREAM_SHAPE,
    MODEL_TEXTURE,
    STREAM_QUALITY,
    SMOOTHING_TRADE,
    STRUCTURED_OUTPUT,
    RETRACTED_TEXT,
    CHUNK_ECONOMICS,
    CHUNKING_CHANGES,
    CANCELLATION,
    BROWSER_RENDER,
    GPU_TO_GLASS,
    STREAM_TIMELINE,
    STREAM_SOURCES,
    GENAI_METRICS,
)
