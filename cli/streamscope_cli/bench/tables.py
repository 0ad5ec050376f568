"""The tables ``bench`` and ``compare`` print: one figure a row, "unknown" where the run cannot give it."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from rich.table import Table

from streamscope_cli.bench.compare import NOT_GATED, REGRESSION, Compared
from streamscope_cli.bench.figures import FIGURES, Figure, RunStreams
from streamscope_cli.bench.run import BenchRun


def value(figure: Figure, number: float, estimated: bool = False) -> str:
    if math.isnan(number):
        return "unknown"
    if figure.unit == "share":
        return f"{number:.1%}"
    shown = f"{number:.1f} {figure.unit}" if figure.unit else f"{number:.2f}"
    return shown + (" (estimated)" if estimated and figure.counts_tokens else "")


def run_table(run: BenchRun, slo_ms: float) -> Table:
    streams = run.streams
    title = f"streamscope bench · run {streams.run}" + (f" ({streams.label})" if streams.label else "")
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("streams", f"{streams.count}" + out_of_gap_figures(streams))
    for figure in FIGURES:
        name = figure.title.replace("the SLO", f"{slo_ms:g} ms")
        table.add_row(name, value(figure, figure.of(streams, slo_ms), streams.estimated_tokens))
    table.add_row("stalls by cause", ", ".join(f"{cause} {n}" for cause, n in run.stalls) or "none")
    if run.engine_events is not None:
        events = ", ".join(f"{kind} {n}" for kind, n in run.engine_events) or "none"
        table.add_row("engine's /metrics (GPU agent)", f"{run.engine_scrapes} scrapes; events: {events}")
    table.add_row(
        "outcomes (as the client saw them)", ", ".join(f"{n} {o}" for o, n in sorted(run.report.outcomes.items()))
    )
    if run.not_exported:
        table.add_row("streams not exported (not in these figures)", f"{run.not_exported}")
    return table


def out_of_gap_figures(streams: RunStreams) -> str:
    """The streams out of the gap figures, and why."""
    held = int(streams.host_held.sum())
    untimed = int(np.isnan(streams.gap_max_ms).sum()) - held
    why = [f"{untimed} without every chunk's time"] if untimed else []
    why += [f"{held} held by this machine's own host (a busy load generator)"] if held else []
    return f" ({'; '.join(why)}: out of the gap figures)" if why else ""


def compare_table(baseline: RunStreams, candidate: RunStreams, results: Sequence[Compared], confidence: float) -> Table:
    table = Table(title=f"streamscope compare · {_name(baseline)} → {_name(candidate)}")
    for column in ("figure", "baseline", "candidate", f"change [{confidence:.0%} interval]", "gate", "verdict"):
        table.add_column(column, justify="left" if column in ("figure", "verdict") else "right")
    table.add_row("streams", f"{baseline.count}", f"{candidate.count}", "", "", "")
    for r in results:
        f = r.figure
        verdict = f"[bold red]{r.verdict}[/bold red]" if r.verdict == REGRESSION else r.verdict
        gate = "" if r.verdict == NOT_GATED or r.gate is None else str(r.gate)
        before, after = (
            value(f, r.baseline, baseline.estimated_tokens),
            value(f, r.candidate, candidate.estimated_tokens),
        )
        table.add_row(f.name, before, after, _change(r), gate, verdict)
    return table


def _change(r: Compared) -> str:
    if math.isnan(r.change):
        return "unknown"
    relative = r.gate.relative if r.gate else not r.figure.points

    def show(x: float) -> str:
        if relative:
            return f"{x:+.1%}"
        return f"{x * 100:+.1f} pts" if r.figure.unit == "share" else f"{x:+.2f} {r.figure.unit}".rstrip()

    interval = "" if math.isnan(r.low) else f" [{show(r.low)}, {show(r.high)}]"
    return show(r.change) + interval


def _name(streams: RunStreams) -> str:
    return streams.run + (f" ({streams.label})" if streams.label else "")
