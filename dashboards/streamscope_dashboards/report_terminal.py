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
        if item.panel.kind == "table":
            console.print(_table(item.panel.title, item.result.names, item.result.rows))


def _table(title: str, names: list[str], rows: list[list]) -> Table:
    """A panel's rows; a wide result with few rows is turned on its side to fit a terminal."""
    if len(names) > _WIDE_COLUMNS and 0 < len(rows) <= _FEW_ROWS:
        table = Table("", *(cell(row[0]) for row in rows), title=title)
        for i, name in enumerate(names[1:], start=1):
            table.add_row(name, *(cell(row[i]) for row in rows))
        return table
    table = Table(*names, title=title)
    for row in rows:
        table.add_row(*(cell(v) for v in row))
    if not rows:
        table.add_row("none", *([""] * (len(names) - 1)))
    return table
