"""`streamscope eval`: score stall attribution against the ground truth a scenario injects."""

from __future__ import annotations

import click

from streamscope_cli.options import fail_plainly, storage_option


@click.command("eval")
@click.argument("scenario")
@storage_option
@click.option("--streams", type=click.IntRange(1, 100_000), default=None, help="Override the scenario's count.")
@fail_plainly
def eval_command(scenario: str, storage_dsn: str | None, streams: int | None) -> None:
    """Run SCENARIO, attribute its stalls, and score them against the injected ground truth.

    Prints per-cause precision, recall and F1, and the confusion matrix.

    \b
    Example:
      streamscope eval mixed
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from streamscope_cli.workload.evaluate import evaluate_named, planned_streams, render

    total = planned_streams(scenario, streams)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(scenario, total=total)
        result = evaluate_named(
            scenario,
            storage_dsn,
            streams,
            step=lambda doing: progress.update(task, description=f"{scenario}: {doing}"),
            on_stream_done=lambda outcome: progress.advance(task),
        )
    click.echo(render(scenario, result))
