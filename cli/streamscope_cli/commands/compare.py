"""`streamscope compare`: two bench runs side by side, with a verdict and an exit code for CI."""

from __future__ import annotations

import click

from streamscope.errors import StreamscopeError
from streamscope_cli.options import collector_url_option, storage_option

NO_VERDICT = 3
"""The exit status when the runs could not be compared at all (a mistyped option, a run not found, the store out
of reach): apart from 1 and 2, which are verdicts a CI job acts on."""


class _UsageError(click.UsageError):
    exit_code = NO_VERDICT


class _Command(click.Command):
    """Click's usage errors exit 2, compare's "not enough streams": they exit ``NO_VERDICT`` here."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            raise _UsageError(exc.format_message(), exc.ctx) from None


@click.command(cls=_Command)
@click.argument("baseline")
@click.argument("candidate")
@click.option("--max-regression", multiple=True, metavar="NAME=LIMIT", help=(
    "How much worse a figure may get: 10% of the baseline, or a plain number in its unit (points of a share: "
    "itl_goodput=0.02), or off. Defaults: p99_of_p99=10%, p99_of_max=10%, ttft_p95=10%, itl_goodput=0.02, "
    "tokens_per_s_p50=10%, error_rate=0.01. Repeatable."
))  # fmt: skip
@click.option(
    "--slo-ms", type=click.FloatRange(1), default=None, help="ITL SLO for goodput (default: the stall threshold)."
)
@click.option("--min-streams", type=click.IntRange(2), default=30, show_default=True, help="Fewer in a run: exit 2.")
@click.option("--confidence", type=click.FloatRange(0.5, 0.999), default=0.95, show_default=True)
@click.option(
    "--resamples", type=click.IntRange(100, 100_000), default=1000, show_default=True, help="Bootstrap draws."
)
@storage_option
@collector_url_option
def compare(
    baseline: str,
    candidate: str,
    max_regression: tuple[str, ...],
    slo_ms: float | None,
    min_streams: int,
    confidence: float,
    resamples: int,
    storage_dsn: str | None,
    collector_url: str | None,
) -> None:
    """Compare bench run CANDIDATE with BASELINE (each a run id, or a label: its latest run).

    Each figure side by side, the change with a bootstrap interval (streams resampled, not chunks), and a verdict
    on the gated figures: a regression is a change worse than its limit whose whole interval is on the worse side.
    Exit status: 0 pass, 1 a regression, 2 not enough streams to tell, 3 no comparison made (a mistyped option,
    a run not found, the store out of reach).

    \b
    Example:
      streamscope compare v1.4 v1.5 --max-regression p99_of_p99=5%
    """
    from rich.console import Console

    from streamscope import env
    from streamscope_cli.bench.compare import MIN_BLOCKS, REGRESSION, exit_code, parse_gates
    from streamscope_cli.bench.compare import compare as compare_runs
    from streamscope_cli.bench.figures import read_run
    from streamscope_cli.bench.tables import compare_table
    from streamscope_cli.query import opened_store

    try:
        gates = parse_gates(max_regression)
        slo = slo_ms if slo_ms is not None else env.stall_threshold_us() / 1000
        with opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as query:
            before, after = read_run(query, baseline), read_run(query, candidate)
    except (StreamscopeError, OSError) as exc:
        click.echo(f"Error: {exc}", err=True)
        raise SystemExit(NO_VERDICT) from None
    results = compare_runs(
        before, after, slo_ms=slo, gates=gates, min_streams=min_streams, resamples=resamples, confidence=confidence
    )
    Console().print(compare_table(before, after, results, confidence))
    code = exit_code(results)
    if code == 1:
        click.echo(f"regression: {', '.join(r.figure.name for r in results if r.verdict == REGRESSION)}")
    elif code == 2:
        click.echo(
            f"not enough streams to tell (fewer than {min_streams} values of a gated figure in a run, fewer than "
            f"{MIN_BLOCKS} blocks of streams that ran together, or a gated figure unknown)"
        )
    else:
        click.echo("pass")
    raise SystemExit(code)
