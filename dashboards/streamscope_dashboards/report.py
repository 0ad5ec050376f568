"""`streamscope report`: run the dashboard panels for a time range on this machine, no Grafana needed.

The report runs the same panel SQL as the dashboards (macros expanded as the plugin expands them), prints
the tables in the terminal and writes one self-contained HTML file with the charts drawn as inline SVG.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from streamscope_dashboards.fleet import Query, Summary, summarize
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels import PANELS
from streamscope_dashboards.panels.common import Panel, chosen
from streamscope_dashboards.panels.drilldown import LONGEST_STALLED_TRACES, WORST_STALLED_TRACE
from streamscope_ingest.store.sql import QueryResult

_DURATION = re.compile(r"(\d+)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``7d``: how far back a report looks."""
    match = _DURATION.fullmatch(text.strip())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a duration like 30s, 15m, 2h or 7d")
    return timedelta(seconds=int(match.group(1)) * _UNIT_S[match.group(2)])


_NICE_STEPS_S = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400)


def interval_for(start: datetime, end: datetime, buckets: int = 60) -> timedelta:
    """The smallest round step that cuts the range into at most ``buckets`` intervals (as Grafana aims to)."""
    wanted = (end - start).total_seconds() / buckets
    step = next((s for s in _NICE_STEPS_S if s >= wanted), _NICE_STEPS_S[-1])
    return timedelta(seconds=step)


@dataclass(frozen=True)
class PanelResult:
    panel: Panel
    result: QueryResult


@dataclass(frozen=True)
class Report:
    ctx: QueryContext
    slo_us: int
    summary: Summary
    panels: list[PanelResult]
    trace_id: str | None
    """The trace drawn client against server: the longest stall in the range seen from both sides."""
    variables: Mapping[str, Sequence[str]]
    """The dashboard variables the report was narrowed by (the side always among them)."""
    stalled_traces: Sequence[str] = ()
    """The traces of the longest stalls, the longest first (``LONGEST_STALLED_TRACES``)."""

    def result(self, key: str) -> QueryResult | None:
        return next((p.result for p in self.panels if p.panel.key == key), None)

    def with_panel(self, added: PanelResult, *, after: str) -> Report:
        """This report with ``added`` shown after the panel ``after`` (at the end if it has none)."""
        keys = [p.panel.key for p in self.panels]
        at = keys.index(after) + 1 if after in keys else len(keys)
        return replace(self, panels=[*self.panels[:at], added, *self.panels[at:]])


def build_report(
    run: Query,
    start: datetime,
    end: datetime,
    slo_us: int,
    variables: Mapping[str, Sequence[str]] | None = None,
    reading: Callable[[str], None] = lambda title: None,
) -> Report:
    """Every panel over [start, end], narrowed by dashboard ``variables`` (e.g. {"model": ["m-2"]}; the defaults
    if absent: the client side, All of the rest); ``reading`` hears each panel's title before it is queried."""
    ctx = QueryContext(start, end, interval_for(start, end))
    variables = chosen(variables)
    found = run(resolve(WORST_STALLED_TRACE, ctx, variables)).rows
    trace_id = found[0][0] if found else None
    results = []
    for panel in PANELS:
        if panel.variables:
            if trace_id is None:  # the drilldown needs a stalled stream to draw
                continue
            sql = panel.bind(trace_id=trace_id)
        else:
            sql = panel.sql
        reading(panel.title)
        results.append(PanelResult(panel, run(resolve(sql, ctx, variables))))
    reading("the longest stalled streams and the fleet's figures")
    stalled = [row[0] for row in run(resolve(LONGEST_STALLED_TRACES, ctx, variables)).rows]
    return Report(ctx, slo_us, summarize(run, ctx, slo_us, variables), results, trace_id, variables, stalled)


def cell(value: object) -> str:
    """A table cell as both renderers print it."""
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:.0f}"
    return str(value)


def title_line(report: Report) -> str:
    ctx = report.ctx
    return (
        f"streamscope report · {ctx.start:%Y-%m-%d %H:%M:%S} → {ctx.end:%Y-%m-%d %H:%M:%S} UTC"
        f" · {ctx.interval.total_seconds():g} s intervals"
        + "".join(f" · {name} {', '.join(values)}" for name, values in report.variables.items())
    )
