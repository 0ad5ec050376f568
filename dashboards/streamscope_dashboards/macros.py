"""The Grafana ClickHouse plugin's backend macros, expanded exactly as the plugin does (v4.19+, macropro).

Panels and alert rules are written once with ``$__timeFilter(start_time)`` and friends. Grafana's plugin
expands them on the server; the local report and the tests expand them here, to the same text, so the SQL
the report runs is the SQL Grafana runs. Frontend-only macros (``$__conditionalAll``) and dashboard variables
are not backend macros and are left alone, as the plugin leaves them (alert rules must not use them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streamscope.errors import StreamscopeError


class MacroError(StreamscopeError):
    """A macro was called with the wrong arguments."""


@dataclass(frozen=True)
class QueryContext:
    """What a panel or rule query is evaluated for: the time range and the bucket interval."""

    start: datetime
    end: datetime
    interval: timedelta

    def __post_init__(self) -> None:
        if self.start.tzinfo is None or self.end.tzinfo is None:
            raise MacroError("query times must be timezone-aware")


def _unix(t: datetime) -> int:
    return int(t.timestamp() // 1)  # Go's t.Unix() truncates toward negative infinity for whole seconds


def _ms(t: datetime) -> int:
    return int(t.timestamp() * 1000 // 1)


def _date(t: datetime) -> str:
    return t.astimezone(UTC).strftime("%Y-%m-%d")


def _interval_seconds(ctx: QueryContext) -> int:
    return max(int(ctx.interval.total_seconds()), 1)


def _interval_ms(ctx: QueryContext) -> int:
    return max(int(ctx.interval / timedelta(milliseconds=1)), 1)


def _interval_notation(ctx: QueryContext) -> str:
    """Grafana's interval text (gtime.FormatInterval): whole count of the largest unit it reaches, y down to ms."""
    ms = int(ctx.interval / timedelta(milliseconds=1))
    for unit, size in (("y", 365 * 86_400_000), ("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)):
        if ms >= size:
            return f"{ms // size}{unit}"
    return f"{ms}ms" if ms >= 1 else "1ms"


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT_S = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def _go_duration_s(text: str) -> int:
    """Go's time.ParseDuration, rounded to whole seconds, as $__timeGroup reads its period."""
    text = text.strip().strip("'\"")
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise MacroError(f"$__timeGroup: invalid period {text!r}")
    seconds = round(sum(float(n) * _DURATION_UNIT_S[u] for n, u in parts))
    if seconds <= 0:
        raise MacroError(f"$__timeGroup: period {text!r} must be at least one second")
    return seconds


def _time_filter(ctx: QueryContext, c: str) -> str:
    return f"{c} >= toDateTime({_unix(ctx.start)}) AND {c} <= toDateTime({_unix(ctx.end)})"


def _date_filter(ctx: QueryContext, c: str) -> str:
    return f"{c} >= toDate('{_date(ctx.start)}') AND {c} <= toDate('{_date(ctx.end)}')"


Handler = Callable[..., str]
_MACROS: dict[str, tuple[int, Handler]] = {
    "timeFilter": (1, _time_filter),
    "timeFilter_ms": (
        1,
        lambda ctx, c: (
            f"{c} >= fromUnixTimestamp64Milli({_ms(ctx.start)}) AND {c} <= fromUnixTimestamp64Milli({_ms(ctx.end)})"
        ),
    ),
    "dateFilter": (1, _date_filter),
    "dateTimeFilter": (2, lambda ctx, d, t: f"({_date_filter(ctx, d)}) AND ({_time_filter(ctx, t)})"),
    "dt": (2, lambda ctx, d, t: f"({_date_filter(ctx, d)}) AND ({_time_filter(ctx, t)})"),
    "fromTime": (0, lambda ctx: f"toDateTime({_unix(ctx.start)})"),
    "toTime": (0, lambda ctx: f"toDateTime({_unix(ctx.end)})"),
    "fromTime_ms": (0, lambda ctx: f"fromUnixTimestamp64Milli({_ms(ctx.start)})"),
    "toTime_ms": (0, lambda ctx: f"fromUnixTimestamp64Milli({_ms(ctx.end)})"),
    "interval_s": (0, lambda ctx: str(_interval_seconds(ctx))),
    "interval_ms": (0, lambda ctx: str(_interval_ms(ctx))),
    "interval": (0, _interval_notation),
    "timeInterval": (
        1,
        lambda ctx, c: f"toStartOfInterval(toDateTime({c}), INTERVAL {_interval_seconds(ctx)} second)",
    ),
    "timeInterval_ms": (
        1,
        lambda ctx, c: f"toStartOfInterval(toDateTime64({c}, 3), INTERVAL {_interval_ms(ctx)} millisecond)",
    ),
    "timeFrom": (1, lambda ctx, c: f"{c} >= toDateTime({_unix(ctx.start)})"),
    "timeTo": (1, lambda ctx, c: f"{c} <= toDateTime({_unix(ctx.end)})"),
    "timeGroup": (2, lambda ctx, c, p: f"toStartOfInterval(toDateTime({c}), INTERVAL {_go_duration_s(p)} second)"),
}
_NAMES = sorted(_MACROS, key=len, reverse=True)  # longest first: $__timeFilter_ms is never $__timeFilter
_NAME_AT = re.compile(r"\$__(" + "|".join(_NAMES) + r")(?![A-Za-z0-9_])")
_COMMENT = re.compile(r"--[^\n]*|/\*.*?\*/", re.DOTALL)
_STRING = re.compile(r"'(?:\\.|[^'\\])*'|\"(?:\\.|[^\"\\])*\"")


def _blank_comments(sql: str) -> str:
    """Comments become spaces (macros in them do not expand); quoted text is kept as it is."""
    out, position = [], 0
    for match in re.finditer(f"{_STRING.pattern}|{_COMMENT.pattern}", sql, re.DOTALL):
        out.append(sql[position : match.start()])
        text = match.group(0)
        out.append(text if text[0] in "'\"" else " " * len(text))
        position = match.end()
    out.append(sql[position:])
    return "".join(out)


def _arguments(sql: str, open_at: int) -> tuple[list[str], int] | None:
    """The top-level comma-separated arguments of the ``(...)`` at ``open_at``, and the index after ``)``."""
    depth, quote, start, args = 0, "", open_at + 1, []
    i = open_at
    while i < len(sql):
        ch = sql[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                args.append(sql[start:i])
                stripped = [a.strip() for a in args]
                return ([] if stripped == [""] else stripped), i + 1
        elif ch == "," and depth == 1:
            args.append(sql[start:i])
            start = i + 1
        i += 1
    return None  # unbalanced: zero arguments, text left in place


def expand(sql: str, ctx: QueryContext) -> str:
    """``sql`` with every backend macro expanded for ``ctx``; raises MacroError on a wrong argument count."""
    sql = _blank_comments(sql)
    out, position = [], 0
    for match in _NAME_AT.finditer(sql):
        if match.start() < position:
            continue  # inside the arguments of a macro already expanded
        name = match.group(1)
        arity, handler = _MACROS[name]
        args: list[str] = []
        end = match.end()
        if end < len(sql) and sql[end] == "(":
            parsed = _arguments(sql, end)
            if parsed is not None:
                args, end = parsed
        if len(args) != arity:
            raise MacroError(f"$__{name} takes {arity} argument(s), got {len(args)}")
        out.append(sql[position : match.start()])
        out.append(handler(ctx, *args))
        position = end
    out.append(sql[position:])
    return "".join(out)


_CONDITIONAL_ALL = "$__conditionalAll"
_VARIABLE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)")


def apply_variables(sql: str, values: Mapping[str, Sequence[str]]) -> str:
    """Dashboard variables as Grafana's frontend applies them before the query leaves the browser.

    ``$__conditionalAll(cond, $var)`` becomes ``cond`` with the variable filled in, or ``1=1`` when the variable
    is All (absent from ``values``, empty, or ``$__all``), matched from the last occurrence backwards as the
    plugin does. ``${var:singlequote}`` gives the values quoted and comma-joined, ``$var`` them comma-joined.
    """
    while (start := sql.rfind(_CONDITIONAL_ALL)) >= 0:
        parsed = _arguments(sql, start + len(_CONDITIONAL_ALL))
        if parsed is None or len(parsed[0]) != 2:
            raise MacroError("$__conditionalAll takes a condition and a variable")
        (condition, variable), end = parsed
        match = _VARIABLE.fullmatch(variable)
        name = match and (match.group(1) or match.group(3))
        chosen = values.get(name or "", [])
        everything = not chosen or "$__all" in chosen
        sql = sql[:start] + ("1=1" if everything else _fill(condition, values)) + sql[end:]
    return _fill(sql, values)


def _fill(sql: str, values: Mapping[str, Sequence[str]]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name not in values:
            return match.group(0)
        if match.group(2) == "singlequote":
            return ",".join("'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'" for v in values[name])
        return ",".join(values[name])

    return _VARIABLE.sub(one, sql)


def resolve(sql: str, ctx: QueryContext, variables: Mapping[str, Sequence[str]] | None = None) -> str:
    """The SQL the data source receives from a dashboard: variables applied (All unless given), then macros."""
    return expand(apply_variables(sql, variables or {}), ctx)
