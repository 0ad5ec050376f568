"""The report in the terminal: the headline numbers and every table panel (the charts are in the HTML)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from streamscope_dashboards.report import Report, cell, title_line

_WIDE_COLUMNS = 6
_FEW_ROWS = 4


def print_report(report: Report, console: Console) -> None:
    console.print(f"[bold]{title_line(report)}[/bold]")
    headline = Table("metric", "value", title="Client streams")
    for name, value in report.summary.rows(report.slo_us):
        headline.add_row(name, value)
    console.print(headline)
    for item in report.panels:
        if item.panel.kind != "table":
            continue
        names, rows = item.result.names, item.result.rows
        if not rows:
            console.print(f"[italic]{item.panel.title}: nothing in this range[/italic]")
            continue
        console.print(_table(item.panel.title, names, rows))
    if report.stalled_traces:
        console.print("The longest stalls' traces (`streamscope replay TRACE_ID` plays one again):")
        for trace in report.stalled_traces:
            console.print(trace, soft_wrap=True)


def _table(title: str, names: list[str], rows: list[list]) -> Table:
    """A panel's rows; a wide result with few rows is turned on its side to fit a terminal. A narrow terminal folds
    headers and cells onto more lines rather than cutting them."""
    if len(names) > _WIDE_COLUMNS and len(rows) <= _FEW_ROWS:
        table = _folding([""] + [cell(row[0]) for row in rows], title)
        for i, name in enumerate(names[1:], start=1):
            table.add_row(name, *(cell(row[i]) for row in rows))
        return table
    table = _folding(names, title)
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    return table


def _folding(headers: list[str], title: str) -> Table:
    table = Table(title=title)
    for header in headers:
        table.add_column(header, overflow="fold")
    return table
