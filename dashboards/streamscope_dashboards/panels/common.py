"""What the boards' panels are built from: the ``Panel`` type, the dashboard variables and their filters, the ITL
SLO, and the SQL builders over the store's tables and histograms (alert rules and the fleet summary use them too).

The panels show one side's view of the streams (the ``side`` variable): the client's by default, the
inter-token latency the application received. Chunks carry their stream's start time, so "over time" buckets
chunks by when their stream started.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from streamscope_ingest.blocks.stalls import DEFAULT_THRESHOLD_US

PanelKind = Literal["heatmap", "histogram", "timeseries", "table", "timeline", "stat"]


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


GAP_BUCKET_RATIO = 1.01
"""``gap_histograms.gap_bucket`` k ≥ 1 holds the gaps in [ratio^(k-1), ratio^k) µs (migration 0030)."""

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


def gap_quantile_ms(level: float, histogram: str, count: str, name: str, longest_ms: str = "gap_max_ms") -> str:
    """SQL for quantile ``level`` of the gaps a sorted ``histogram`` of ``gap_histograms`` buckets counts, ``count``
    in all, in ms: the bucket holding quantileExact's rank, read as its geometric middle, and never past the longest
    gap (``longest_ms``), which may lie below its bucket's middle. ``name`` keeps the expression's alias apart."""
    bucket = f"bucket_{name}"
    at = bucket_at(level, histogram, count)
    return f"if(({at} AS {bucket}) = 0, 0, least(pow({GAP_BUCKET_RATIO}, {bucket} - 0.5) / 1000, {longest_ms}))"


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

VARIABLES = ("tenant", "service", "provider", "model", "route", "transport")
"""Multi-valued dashboard variables, All by default (and in the report). Each filters the column of its name,
but route and transport, which keep a row when its trace has a stream so recorded: route is the server's
(``http.route``), so a client row is kept when its trace's server span was served on one of the chosen routes;
transport is how a stream was carried (``streams.transport``: sse, chunked, websocket, grpc)."""

BY_TRACE = ("route", "transport")
"""The variables that narrow by a stream's trace: the pre-aggregated tables carry no key for them."""
KEYED = tuple(name for name in VARIABLES if name not in BY_TRACE)
"""The variables the pre-aggregated tables carry a key for."""

SIDES = ("client", "server", "gateway", "browser")

SIDE = "side"
"""The single-valued variable naming whose view of the streams the panels show. The client's by default: the
latency the application received. Never All: one stream's sides measure the same content twice."""

DEFAULTS: dict[str, tuple[str, ...]] = {SIDE: (SIDES[0],)}
"""The variables' values before anyone chooses (All for those not named)."""

_CONDITIONS = {name: f"{{alias}}{name} IN (${{{name}:singlequote}})" for name in VARIABLES}

_CHUNK_CONDITIONS = dict(_CONDITIONS)
for _name in BY_TRACE:
    _traces = f"FROM streams WHERE {_name} IN (${{{_name}:singlequote}})"
    _CONDITIONS[_name] = f"{{alias}}trace_id IN (SELECT trace_id {_traces})"
    # on chunks, the stored id bytes: the hex ``trace_id`` there is computed on read, row by row
    _CHUNK_CONDITIONS[_name] = f"{{alias}}trace_id_bytes IN (SELECT toFixedString(unhex(trace_id), 16) {_traces})"


def chosen(variables: Mapping[str, Sequence[str]] | None = None) -> dict[str, Sequence[str]]:
    """The dashboard's variable values: those given, the defaults for the rest."""
    return {**DEFAULTS, **{name: values for name, values in (variables or {}).items() if values}}


def filters(*names: str, alias: str = "", over_chunks: bool = False) -> str:
    """The conditions of the dashboard variables ``names`` (plugin's $__conditionalAll: All adds nothing), on the
    ``chunks`` table if ``over_chunks``."""
    conditions = _CHUNK_CONDITIONS if over_chunks else _CONDITIONS
    return " AND ".join(f"$__conditionalAll({conditions[n].replace('{alias}', alias)}, ${n})" for n in names)


ON_SIDE = f"side = ${{{SIDE}:singlequote}}"


def _selected(over_chunks: bool = False, on_side: bool = True) -> str:
    """Rows in the range of the chosen side (of every side, unless ``on_side``), narrowed by the dashboard's
    variables."""
    side = f"{ON_SIDE} AND " if on_side else ""
    return f"$__timeFilter(start_time) AND {side}{filters(*VARIABLES, over_chunks=over_chunks)}"


SELECTED = _selected()
SELECTED_ANY_SIDE = _selected(on_side=False)
"""For a panel that lists each side apart (a column of its own): the sides are never added together."""

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

ROLLUPS_APPLY = "(" + " AND ".join(f"$__conditionalAll(0, ${name})" for name in BY_TRACE) + ")"
"""True when every route and transport is chosen. The pre-aggregated tables (``gap_histograms`` and the others)
carry neither (a route is the server span's, known once that span arrives), so a panel over them answers from raw
rows while some are chosen: each such panel is a UNION ALL of the two, and the branch whose condition is false
reads nothing."""


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

HISTOGRAMS_SELECTED_ANY_SIDE = f"{HISTOGRAM_STEP} AND {HISTOGRAM_RANGE} AND {filters(*KEYED)} AND {ROLLUPS_APPLY}"
"""Rows of ``gap_histograms`` for the panel's interval, range and variables, of every side (as
``SELECTED_ANY_SIDE``)."""

HISTOGRAMS_SELECTED = f"{HISTOGRAMS_SELECTED_ANY_SIDE} AND {ON_SIDE}"
"""Rows of ``gap_histograms`` for the panel's interval, range, side and variables."""

TABLE_HISTOGRAMS_SELECTED = f"{HISTOGRAMS_OVER_RANGE} AND {ON_SIDE} AND {filters(*KEYED)} AND {ROLLUPS_APPLY}"
"""Rows of ``gap_histograms`` or ``stream_histograms`` counting the range once, for the side and variables."""

STALL_FILTERS = f"{ON_SIDE} AND {filters('tenant', 'service', 'model', *BY_TRACE)}"
"""Stalls and quality rows carry no provider (stalls are found on the client and browser sides)."""

TENANT_FILTER = filters("tenant")

STREAM_TABLES = (
    "chunk_arrays",
    "gap_histograms",
    "stream_histograms",
    "stream_totals",
    "streams",
    "stalls",
    "slow_starts",
    "stream_quality",
    "stream_smoothing",
    "smoothing_histograms",
)
"""The tables a stream fills: its chunks and its row, what the writer counts from them, and the attribution job's
verdicts. What storing a chunk costs is their size together (``STORED_BYTES_SQL``)."""
_STREAM_PARTS = (
    "system.parts WHERE database = currentDatabase() AND active "
    f"AND table IN ({', '.join(repr(table) for table in STREAM_TABLES)})"
)
STORED_BYTES_SQL = f"""
SELECT sum(data_compressed_bytes) / nullIf((SELECT sum(length(gap_us)) FROM chunk_arrays), 0)
FROM {_STREAM_PARTS}
"""
"""Bytes on disk per stored chunk over every table a stream fills (``STREAM_TABLES``: its chunks, its row, the
rollups and the verdicts), over the whole store (parts do not split by time or tenant); NULL while no chunk is
stored (streams of sources without chunks still take rows)."""
UNMERGED_PARTS_SQL = f"SELECT count() - uniqExact(table, partition_id) FROM {_STREAM_PARTS}"
"""How many parts that figure is over beyond one per partition: merging them compresses better, so it falls as
they merge."""


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


def figures_in(selected: str, *figures: str) -> str:
    """The histogram rows ``selected`` of ``figures`` only."""
    return f"{selected} AND figure IN ({', '.join(repr(figure) for figure in figures)})"


def figure_histogram(figures: str | tuple[str, ...], selected: str, *keys: str) -> str:
    """SQL for the sorted histogram (``histogram``: array of (bucket, streams)) of ``stream_histograms`` figures and
    the streams it counts (``counted``), per figure and ``keys`` (each ``name`` or ``expression AS name``) over the
    rows ``selected``."""
    names = ", ".join(["figure", *(key.rsplit(" AS ", 1)[-1] for key in keys)])
    wanted = figures_in(selected, *((figures,) if isinstance(figures, str) else figures))
    return f"""SELECT {names}, sum(n) AS counted, arraySort(groupArray((bucket, n))) AS histogram
        FROM (
            SELECT {", ".join(["figure", *keys])}, bucket, sum(streams) AS n
            FROM stream_histograms
            WHERE {wanted}
            GROUP BY {names}, bucket
        )
        GROUP BY {names}"""


def figure_at(level: float, figure: str) -> str:
    """SQL for quantile ``level`` of ``figure`` over ``figure_histogram`` rows; NULL where none is counted."""
    return _of_figure(figure_quantile(level, "histogram", "counted", f"{figure}_{round(level * 100)}"), figure)


SLO_US = DEFAULT_THRESHOLD_US
"""A client stream meets the ITL SLO when every gap between its content chunks is within the default stall
threshold (``streamscope_ingest.blocks.stalls``): a longer gap is a freeze the reader sees, the line stall counts
and ITL goodput draw too."""

GOODPUT_TARGET = 0.99
"""Share of client streams that must meet it (ITL goodput). One stream in a hundred with a freeze keeps a chat
product trustworthy; the 1% error budget is what the burn-rate alerts spend."""
