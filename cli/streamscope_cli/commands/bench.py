"""`streamscope bench`: load any streaming endpoint and print the run's stream figures."""

from __future__ import annotations

import os
from pathlib import Path

import click

from streamscope_cli.options import fail_plainly, storage_option


@click.command()
@click.option("--url", required=True, metavar="URL", help="The API's base URL, e.g. http://127.0.0.1:8000/v1.")
@click.option("--model", required=True, help="The model to ask for.")
@click.option(
    "--api",
    type=click.Choice(["chat", "completions", "anthropic", "ollama"]),
    default="chat",
    show_default=True,
    help="OpenAI Chat Completions, OpenAI Completions, Anthropic Messages, or Ollama's /api/chat (streamed).",
)
@click.option("--concurrency", type=click.IntRange(1, 4096), default=None, help="Streams open at once (default 8).")
@click.option("--rate", type=click.FloatRange(0.01, 10_000), default=None, help="Poisson arrivals per second instead.")
@click.option("--duration", type=click.FloatRange(1, 86_400), default=None, help="Seconds of sending (default 60).")
@click.option("--requests", type=click.IntRange(1), default=None, help="Send this many requests instead.")
@click.option("--prompt-tokens", default="128", show_default=True, metavar="N|LOW-HIGH", help="Prompt length.")
@click.option("--output-tokens", default="128", show_default=True, metavar="N|LOW-HIGH", help="max_tokens asked.")
@click.option(
    "--prompt-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Draw prompts from this file's non-empty lines instead.",
)
@click.option("--warmup", type=click.IntRange(0), default=0, show_default=True, help="Unrecorded requests first.")
@click.option("--seed", type=int, default=0, show_default=True, help="Same seed, same requests in the same order.")
@click.option(
    "--api-key-env",
    default=None,
    metavar="NAME",
    help="The environment variable holding the API key (OPENAI_API_KEY; ANTHROPIC_API_KEY with --api anthropic; "
    "none with --api ollama).",
)
@click.option("--label", default="", help="A name for the run (the release under test); compare finds runs by it.")
@click.option("--run-id", default="", help="The run's id (default: the time and a random suffix).")
@click.option(
    "--slo-ms", type=click.FloatRange(1), default=None, help="ITL SLO for goodput (default: the stall threshold)."
)
@click.option("--impair", multiple=True, metavar="KIND:KEY=VALUE,...", help=(
    "Send through streamscope proxy's impairments, e.g. stall:duration_ms=300,probability=0.05,after_event=10 "
    "(kinds: stall, buffer_coalesce, rechunk, drop; repeatable)."
))  # fmt: skip
@click.option(
    "--gateway",
    is_flag=True,
    help="Send through a recording gateway (streamscope gateway) in front of the endpoint: each stream's gateway "
    "side is recorded too, so stalls are split between the endpoint and the path.",
)
@click.option(
    "--otlp-port",
    type=click.IntRange(1, 65_535),
    default=None,
    help="The run's collector listens for OTLP/HTTP on this port: an endpoint that records its own side with "
    "streamscope (ServerStream, StreamMiddleware) and exports here has it stored with the run, so stalls are split "
    "between the endpoint and the path.",
)
@click.option("--metrics-url", default=None, metavar="URL", help="Scrape the engine's /metrics meanwhile (GPU agent).")
@click.option("--node", default=None, help="The engine's node name for its metrics (default: the URL's host:port).")
@storage_option
@fail_plainly
def bench(
    url: str,
    model: str,
    api: str,
    concurrency: int | None,
    rate: float | None,
    duration: float | None,
    requests: int | None,
    prompt_tokens: str,
    output_tokens: str,
    prompt_file: Path | None,
    warmup: int,
    seed: int,
    api_key_env: str | None,
    label: str,
    run_id: str,
    slo_ms: float | None,
    impair: tuple[str, ...],
    gateway: bool,
    otlp_port: int | None,
    metrics_url: str | None,
    node: str | None,
    storage_dsn: str | None,
) -> None:
    """Load a streaming endpoint, record every stream, and print per-stream figures.

    Every stream is recorded by the SDK into an embedded collector (--storage), with the run's id and --label, so
    `streamscope compare` can set two runs side by side. Prints TTFT percentiles, the distribution of each stream's
    p99 gap (and its p99 across streams), jitter, ITL goodput, stalls by cause, tokens/s, errors and cancellations.

    \b
    Examples:
      streamscope bench --url http://127.0.0.1:8000/v1 --model sim --duration 30 --label before
      streamscope bench --url http://127.0.0.1:8000/v1 --model sim --duration 30 --label after \\
          --impair stall:duration_ms=300,probability=0.05,after_event=10
      streamscope compare before after
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from streamscope import env
    from streamscope_cli.bench.plan import BenchPlan, Lengths
    from streamscope_cli.bench.run import new_run_id, parse_impairment, run_bench
    from streamscope_cli.bench.tables import run_table

    if concurrency is None and rate is None:
        concurrency = 8
    if duration is None and requests is None:
        duration = 60.0
    key_name = api_key_env or {"anthropic": "ANTHROPIC_API_KEY", "ollama": None}.get(api, "OPENAI_API_KEY")
    if api_key_env and api_key_env not in os.environ:
        raise click.BadParameter(f"{api_key_env} is not set in the environment", param_hint="--api-key-env")
    prompts = tuple(line for line in prompt_file.read_text().splitlines() if line.strip()) if prompt_file else ()
    if prompt_file and not prompts:
        raise click.BadParameter("the file has no non-empty line", param_hint="--prompt-file")
    plan = BenchPlan(
        url=url,
        model=model,
        api=api,
        concurrency=concurrency,
        rate=rate,
        duration_s=duration,
        requests=requests,
        prompt_tokens=Lengths.parse(prompt_tokens, "--prompt-tokens"),
        output_tokens=Lengths.parse(output_tokens, "--output-tokens"),
        prompts=prompts,
        warmup=warmup,
        seed=seed,
        api_key=os.environ.get(key_name) if key_name else None,
        label=label,
        run_id=run_id or new_run_id(),
    )
    slo = slo_ms if slo_ms is not None else env.stall_threshold_us() / 1000
    console = Console()
    columns = (
        [TextColumn("streams"), BarColumn(), MofNCompleteColumn()]
        if requests
        else [TextColumn("{task.completed} streams")]
    )
    with Progress(*columns, TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("streams", total=requests)
        run = run_bench(
            plan,
            storage_dsn=storage_dsn or env.default_storage_dsn(),
            impairments=[parse_impairment(spec) for spec in impair],
            gateway=gateway,
            otlp_port=otlp_port,
            metrics_url=metrics_url,
            node=node,
            announce=progress.console.print,
            on_done=lambda outcome: progress.advance(task),
        )
    console.print(run_table(run, slo))
    if run.report.outcomes.get("error", 0) + run.report.outcomes.get("timeout", 0) == run.report.sent:
        raise click.ClickException("every request failed: nothing to compare (is the endpoint up, and --url its base?)")
    console.print(f"Next: streamscope compare {plan.run_id} OTHER_RUN (a run id or a label)")
