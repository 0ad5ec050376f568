"""The report as one self-contained HTML file: charts drawn by matplotlib as inline SVG, tables as HTML.

Nothing is fetched when the file is opened (no scripts, no CDN), so it can be mailed or archived as is.
"""

from __future__ import annotations

import html
import io
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from streamscope_dashboards.panels.quality import ITL_BUCKETS_MS, OVERFLOW_BUCKET
from streamscope_dashboards.report import PanelResult, Report, cell, title_line
from streamscope_ingest.store.sql import QueryResult

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 70rem; color: #222; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 2rem; }
p.note { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.6rem; text-align: right; vertical-align: bottom; }
td { white-space: nowrap; }
div.table { overflow-x: auto; }
th:first-child, td:first-child { text-align: left; }
svg { max-width: 100%; height: auto; }
"""


_NO_METADATA = {"Creator": None, "Date": None, "Format": None, "Type": None}


def _svg(fig: Figure) -> str:
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata=_NO_METADATA)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _figure() -> Figure:
    fig = Figure(figsize=(10, 3.6))
    fig.set_layout_engine("constrained")
    return fig


def _empty(message: str) -> str:
    return f'<p class="note">{html.escape(message)}</p>'


def _buckets(times: list[datetime], interval: timedelta) -> list[datetime]:
    """Every interval from the first bucket with data to the last, the empty ones included."""
    count = int((max(times) - min(times)) / interval) + 1
    return [min(times) + i * interval for i in range(count)]


def _time_ticks(ax: Axes, buckets: list[datetime]) -> None:
    step = max(len(buckets) // 8, 1)
    ax.set_xticks(np.arange(0, len(buckets), step) + 0.5, [f"{t:%H:%M:%S}" for t in buckets[::step]])
    ax.set_xlabel("stream start (UTC)")


def _heatmap(result: QueryResult, interval: timedelta) -> str:
    rows = result.typed_rows()
    if not rows:
        return _empty("No client content chunks in this range.")
    buckets = _buckets([r[0] for r in rows], interval)
    column = {t: i for i, t in enumerate(buckets)}
    counts = np.zeros((len(result.names) - 1, len(buckets)))  # latency bucket × time
    for time, *values in rows:
        counts[:, column[time]] = values
    fig = _figure()
    ax = fig.add_subplot()
    mesh = ax.pcolormesh(
        np.arange(len(buckets) + 1),
        np.arange(counts.shape[0] + 1),
        np.ma.masked_equal(counts, 0),
        norm=LogNorm(vmin=1, vmax=max(counts.max(), 1)),
        cmap="Oranges",
    )
    labels = [f"≤{b}" for b in ITL_BUCKETS_MS] + [f">{ITL_BUCKETS_MS[-1]} ({OVERFLOW_BUCKET})"]
    ax.set_yticks(np.arange(len(labels)) + 0.5, labels)
    ax.set_ylabel("gap (ms)")
    _time_ticks(ax, buckets)
    fig.colorbar(mesh, ax=ax, label="gaps")
    return _svg(fig)


def _histogram(result: QueryResult, interval: timedelta) -> str:
    values = np.array([v for v in result.column(result.names[0]) if v is not None and v > 0], dtype=float)
    if not values.size:
        return _empty("No client streams with gaps in this range.")
    fig = _figure()
    ax = fig.add_subplot()
    bins = np.geomspace(max(values.min(), 0.01), values.max() * 1.001 + 0.01, 40)
    ax.hist(values, bins=bins.tolist(), color="#d95f02")
    ax.set_xscale("log")
    ax.set_xlabel("per-stream p99 gap (ms)")
    ax.set_ylabel("streams")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return _svg(fig)


Draw = Callable[[Axes, np.ndarray, str, np.ndarray], None]


def _over_time(result: QueryResult, interval: timedelta, draw: Draw, counts: bool = False) -> str:
    """A long (time, label, value) result drawn per label against continuous time buckets (NaN where none);
    ``counts`` are whole numbers, so the y axis ticks only those."""
    rows = result.typed_rows()
    if not rows:
        return _empty("Nothing in this range.")
    buckets = _buckets([r[0] for r in rows], interval)
    column = {t: i for i, t in enumerate(buckets)}
    by_label: dict[str, np.ndarray] = defaultdict(lambda: np.full(len(buckets), np.nan))
    for time, label, value in rows:
        by_label[label][column[time]] = value
    fig = _figure()
    ax = fig.add_subplot()
    for label in sorted(by_label):
        draw(ax, np.arange(len(buckets)) + 0.5, label, by_label[label])
    _time_ticks(ax, buckets)
    ax.set_ylabel(result.names[2].replace("_", " "))
    ax.set_ylim(bottom=0)
    if counts:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.legend(loc="upper left", fontsize="small")
    return _svg(fig)


def _stacked_bars(result: QueryResult, interval: timedelta, counts: bool) -> str:
    bottom: list[np.ndarray] = []

    def bar(ax: Axes, x: np.ndarray, label: str, heights: np.ndarray) -> None:
        heights = np.nan_to_num(heights)
        below = bottom[0] if bottom else np.zeros_like(heights)
        ax.bar(x, heights, bottom=below, label=label, width=0.9)
        bottom[:] = [below + heights]

    return _over_time(result, interval, bar, counts)


def _lines(result: QueryResult, interval: timedelta) -> str:
    def line(ax: Axes, x: np.ndarray, label: str, y: np.ndarray) -> None:
        ax.plot(x, y, marker=".", label=label)

    return _over_time(result, interval, line)


def _timeline(result: QueryResult, interval: timedelta) -> str:
    fig = _figure()
    ax = fig.add_subplot()
    for side in sorted(set(result.column("side"))):
        points = [(ms, size) for s, ms, size in result.rows if s == side]
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=side)
    ax.set_xlabel("ms since the request, on each side's clock")
    ax.set_ylabel("content bytes delivered")
    ax.legend(loc="upper left", fontsize="small")
    return _svg(fig)


def _table(result: QueryResult, interval: timedelta) -> str:
    """A wide table wraps its column names at their underscores and scrolls rather than being cut."""
    head = "".join(f"<th>{html.escape(n).replace('_', '_<wbr>')}</th>" for n in result.names)
    body = (
        "".join("<tr>" + "".join(f"<td>{html.escape(cell(v))}</td>" for v in row) + "</tr>" for row in result.rows)
        or f'<tr><td colspan="{len(result.names)}">none</td></tr>'
    )
    return f'<div class="table"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


_RENDERERS: dict[str, Callable[[QueryResult, timedelta], str]] = {
    "heatmap": _heatmap,
    "histogram": _histogram,
    "timeseries": _lines,
    "timeline": _timeline,
    "table": _table,
}


def _section(item: PanelResult, report: Report) -> str:
    panel = item.panel
    if panel.stacked:
        chart = _stacked_bars(item.result, report.ctx.interval, counts=panel.unit == "short")
    else:
        chart = _RENDERERS[panel.kind](item.result, report.ctx.interval)
    note = panel.description + (f" Trace {report.trace_id}." if panel.variables else "")
    return (
        f'<section id="{panel.key}"><h2>{html.escape(panel.title)}</h2>'
        f'<p class="note">{html.escape(note)}</p>{chart}</section>'
    )


def render_html(report: Report, headline: bool = True) -> str:
    """The whole page; without ``headline``, only the panels' sections (for pictures of one panel)."""
    title = html.escape(title_line(report))
    top = ""
    if headline:
        rows = "".join(
            f"<tr><td>{html.escape(name)}</td><td>{html.escape(value)}</td></tr>"
            for name, value in report.summary.rows(report.slo_us)
        )
        top = f"<h1>{title}</h1><section><h2>Client streams</h2><table><tbody>{rows}</tbody></table></section>"
    sections = "".join(_section(item, report) for item in report.panels)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{_STYLE}</style></head><body>{top}{sections}</body></html>\n"
    )


def write_html(report: Report, path: Path) -> None:
    path.write_text(render_html(report), encoding="utf-8")
