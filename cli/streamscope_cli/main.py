"""The ``streamscope`` command: thin subcommands that build a config and call one function each.

User mistakes and unavailable services end with a one-line message and exit status 1, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click


def main() -> None:
    _cli()(prog_name="streamscope")


def _fail_plainly(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn streamscope's own errors (and unreachable ports or stores) into a one-line message."""
    from functools import wraps

    from streamscope.errors import StreamscopeError

    @wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (StreamscopeError, OSError) as exc:
            raise click.ClickException(str(exc)) from None

    return wrapper


def _cli() -> click.Group:
    from streamscope import __version__, env
    from streamscope_dashboards.panels import SIDES

    storage_option = click.option(
        "--storage",
        "storage_dsn",
        envvar=env.STREAMSCOPE_STORAGE,
        default=None,
        metavar="DSN",
        help="chdb:///abs/path (embedded, default under ~/.local/share/streamscope) or clickhouse://user:pass@host:8123/db.",
    )

    collector_url_option = click.option(
        "--collector-url",
        envvar=env.STREAMSCOPE_COLLECTOR_URL,
        default=None,
        metavar="URL",
        help="Query through this collector instead of opening the store.",
    )

    def collector_option(help: str, default: str | None = "http://127.0.0.1:4318") -> Callable[[Any], Any]:
        """``--collector``: the OTLP/HTTP base URL a command sends to."""
        return click.option(
            "--collector", "collector_url", default=default, show_default=bool(default), metavar="URL", help=help
        )

    @click.group(
        context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110},
        epilog='Example: streamscope demo, then streamscope sql "SELECT side, count() FROM streams GROUP BY side"',
    )
    @click.version_option(__version__, prog_name="streamscope")
    def cli() -> None:
        """Observability for LLM token streams: record every chunk, see every stall."""

    @cli.command()
    @storage_option
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
    @click.option("--http-port", default=4318, show_default=True, type=click.IntRange(0, 65535), help="OTLP/HTTP port.")
    @click.option("--grpc-port", default=4317, show_default=True, type=click.IntRange(0, 65535), help="OTLP/gRPC port.")
    @click.option("--no-grpc", is_flag=True, help="Serve OTLP over HTTP only.")
    @click.option(
        "--query-storage",
        "query_storage_dsn",
        envvar=env.STREAMSCOPE_QUERY_STORAGE,
        default=None,
        help="The same store as an account that may read, for lookups and attribution [default: --storage].",
    )
    @click.option(
        "--no-migrate",
        is_flag=True,
        help="Do not create or update the tables (run `streamscope migrate` as an account that may).",
    )
    @click.option(
        "--max-request-mib",
        default=64,
        show_default=True,
        type=click.IntRange(1, 1024),
        help="Largest request body, after decompression.",
    )
    @click.option(
        "--cors-origin",
        "cors_origins",
        multiple=True,
        envvar=env.STREAMSCOPE_CORS_ORIGINS,
        help="An origin whose pages may send browser spans (repeatable; * for any; env: comma-separated).",
    )
    @click.option(
        "--browser-token",
        envvar=env.STREAMSCOPE_BROWSER_TOKEN,
        default=None,
        help="Public token pages must send with browser spans (default: the browser route is open).",
    )
    @click.option(
        "--auth-file",
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        envvar=env.STREAMSCOPE_AUTH_FILE,
        default=None,
        help="YAML of bearer tokens → tenants; turns authentication on (see docs/operations.md).",
    )
    @click.option(
        "--spool-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        help="Where accepted batches wait for the store [default: beside an embedded store].",
    )
    @click.option(
        "--spool-max-mib",
        default=2048,
        show_default=True,
        type=click.IntRange(1),
        help="Spool size past which requests are answered 503.",
    )
    @click.option(
        "--spool-fsync",
        type=click.Choice(["always", "never"]),
        default="always",
        show_default=True,
        help="always: survives a machine crash; never: a process crash.",
    )
    @click.option(
        "--store-wait-s",
        type=click.FloatRange(min=0),
        default=0.0,
        show_default=True,
        help="After a request is in the spool, also wait up to this long for the store before answering, for "
        "senders that read their own writes from the store directly (0: answer once spooled).",
    )
    @click.option(
        "--tenant-rate-mib",
        type=click.FloatRange(min=0, min_open=True),
        default=None,
        help="MiB per second each tenant may send, sustained (default: no limit).",
    )
    @_fail_plainly
    def collector(
        storage_dsn: str | None,
        host: str,
        http_port: int,
        grpc_port: int,
        no_grpc: bool,
        query_storage_dsn: str | None,
        no_migrate: bool,
        max_request_mib: int,
        cors_origins: tuple[str, ...],
        browser_token: str | None,
        auth_file: Path | None,
        spool_dir: Path | None,
        spool_max_mib: int,
        spool_fsync: str,
        store_wait_s: float,
        tenant_rate_mib: float | None,
    ) -> None:
        """Receive OTLP traces and store stream spans in ClickHouse.

        \b
        Example:
          streamscope collector --storage clickhouse://default:@localhost:8123/streamscope --host 0.0.0.0
        """
        import logging

        from streamscope_collector.auth import load_tokens
        from streamscope_collector.config import CollectorConfig
        from streamscope_collector.service import Collector

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        tokens, browser_tokens = load_tokens(auth_file) if auth_file else ({}, {})
        config = CollectorConfig(
            storage_dsn=storage_dsn or env.default_storage_dsn(),
            query_storage_dsn=query_storage_dsn,
            migrate=not no_migrate,
            host=host,
            http_port=http_port,
            grpc_port=None if no_grpc else grpc_port,
            max_request_bytes=max_request_mib * 1024 * 1024,
            cors_origins=tuple(o.strip() for value in cors_origins for o in value.split(",") if o.strip()),
            browser_token=browser_token,
            tokens=tokens,
            browser_tokens=browser_tokens,
            spool_dir=spool_dir,
            spool_max_bytes=spool_max_mib * 1024 * 1024,
            spool_fsync=spool_fsync,
            store_wait_s=store_wait_s,
            tenant_bytes_per_s=tenant_rate_mib * 1024 * 1024 if tenant_rate_mib else None,
        )
        Collector(config).serve_forever()

    @cli.command()
    @storage_option
    @_fail_plainly
    def migrate(storage_dsn: str | None) -> None:
        """Create or update the tables (the collector also does this when it starts).

        \b
        Example:
          streamscope migrate --storage chdb:///var/lib/streamscope
        """
        from streamscope_ingest import store
        from streamscope_ingest.store import migrations

        target = store.parse_dsn(storage_dsn or env.default_storage_dsn())
        client = store.connect(target)
        try:
            applied = migrations.migrate(client)
        finally:
            client.close()
        if applied:
            for migration in applied:
                click.echo(f"applied {migration.path.name}")
        else:
            click.echo("schema is up to date")

    @cli.command()
    @click.argument("query")
    @storage_option
    @collector_url_option
    @click.option("--format", "output", type=click.Choice(["table", "json", "tsv"]), default="table", show_default=True)
    @_fail_plainly
    def sql(query: str, storage_dsn: str | None, collector_url: str | None, output: str) -> None:
        """Run a read-only SQL query on the store.

        While a collector owns the embedded store, the query goes through its HTTP API.

        \b
        Example:
          streamscope sql "SELECT service, quantileExact(0.99)(gap_p99_us) FROM streams GROUP BY service"
        """
        from streamscope_cli.query import opened_store, print_result

        with opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as run:
            print_result(run(query), output)

    @cli.command()
    @storage_option
    @click.option("--scenario", default="mixed", show_default=True, help="A shipped scenario name or a YAML file.")
    @click.option("--streams", type=click.IntRange(1, 100_000), default=None, help="Override the scenario's count.")
    @click.option(
        "--encoding",
        type=click.Choice(["packed", "events"]),
        default="packed",
        show_default=True,
        help="How the chunk timeline travels on the span.",
    )
    @click.option("--chat", is_flag=True, help="Then serve the demo chat page until Ctrl-C (browser spans too).")
    @click.option("--chat-port", default=8080, show_default=True, type=click.IntRange(1, 65535))
    @_fail_plainly
    def demo(
        storage_dsn: str | None, scenario: str, streams: int | None, encoding: str, chat: bool, chat_port: int
    ) -> None:
        """Run a scenario against an embedded collector and print the stream-timing distributions.

        \b
        Example:
          streamscope demo --scenario kv-pressure
          streamscope demo --chat     # then open http://127.0.0.1:8080/
        """
        from streamscope_cli.demo.runner import DemoConfig, run_demo

        run_demo(
            DemoConfig(
                scenario=scenario,
                streams=streams,
                storage_dsn=storage_dsn or env.default_storage_dsn(),
                encoding=encoding,  # type: ignore[arg-type]
                chat_port=chat_port if chat else None,
            )
        )

    @cli.command()
    @collector_option("Collector that receives the engine's server spans.")
    @click.option(
        "--page-collector",
        "page_collector_url",
        default=None,
        metavar="URL",
        help="The collector as browsers reach it, for the page's spans [default: --collector].",
    )
    @click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
    @click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535))
    @click.option(
        "--browser-token", envvar=env.STREAMSCOPE_BROWSER_TOKEN, default=None, help="The collector's public token."
    )
    @_fail_plainly
    def chat(
        collector_url: str, page_collector_url: str | None, host: str, port: int, browser_token: str | None
    ) -> None:
        """Serve the demo chat page: a simulated engine's answers, timed to the screen by the browser snippet.

        The collector must let the page's origin in (streamscope collector --cors-origin http://127.0.0.1:8080).
        Add ?render_ms=700&render_every=25 to the page's URL to make it a slow renderer.

        \b
        Example:
          streamscope chat --collector http://127.0.0.1:4318 --port 8080
        """
        from streamscope_cli.demo.chat import serve_chat, start_chat

        chat = start_chat(
            collector_url, page_collector_url=page_collector_url, browser_token=browser_token, host=host, port=port
        )
        serve_chat(chat, announce=click.echo)

    @cli.command()
    @click.argument("scenario")
    @collector_option("OTLP/HTTP base URL of the collector that receives spans and ground truth.")
    @click.option("--loop", is_flag=True, help="Run the scenario again and again (for a long-lived demo stack).")
    @_fail_plainly
    def load(scenario: str, collector_url: str, loop: bool) -> None:
        """Drive SCENARIO (a shipped name or a YAML file) with instrumented clients.

        Starts the scenario's engine nodes and proxy, sends its streams, and exports client spans, server
        spans and ground truth to the collector. Shipped scenarios: steady, prefill-storm, kv-pressure,
        spec-collapse, gateway-buffering, flaky-network, chunking-regression, mixed.

        \b
        Example:
          streamscope load kv-pressure --collector http://127.0.0.1:4318
        """
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from streamscope_cli.workload.load import describe, run_load
        from streamscope_cli.workload.scenario import load_scenario, plan

        spec = load_scenario(scenario)
        while True:
            with Progress(TextColumn(spec.name), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn()) as progress:
                task = progress.add_task("streams", total=len(plan(spec)))
                report = run_load(
                    spec,
                    collector_url,
                    on_start=lambda workload, progress=progress: progress.console.print(describe(workload)),
                    on_stream_done=lambda outcome, progress=progress, task=task: progress.advance(task),
                )
            click.echo(", ".join(f"{n} {outcome}" for outcome, n in sorted(report.outcomes.items())))
            if not loop:
                break

    @cli.command()
    @click.option("--scenario", default=None, help="Take the nodes from this scenario (else --nodes default nodes).")
    @click.option("--nodes", default=1, show_default=True, type=click.IntRange(1, 16), help="Default nodes to start.")
    @click.option("--host", default="127.0.0.1", show_default=True)
    @click.option(
        "--port",
        default=8000,
        show_default=True,
        type=click.IntRange(1, 65535),
        help="Port of the first node; the next ones count up from it.",
    )
    @click.option("--flavor", type=click.Choice(["vllm", "sglang"]), default=None, help="Metric names on /metrics.")
    @click.option("--tokens-per-chunk", type=click.IntRange(1, 64), default=None)
    @click.option("--burst-at-head", type=click.IntRange(0, 10_000), default=None)
    @click.option("--ignore-disconnect", is_flag=True, help="Keep generating when clients go away.")
    @collector_option("Export server spans and ground truth to this collector (OTLP/HTTP base URL).", default=None)
    @_fail_plainly
    def engine(
        scenario: str | None,
        nodes: int,
        host: str,
        port: int,
        flavor: str | None,
        tokens_per_chunk: int | None,
        burst_at_head: int | None,
        ignore_disconnect: bool,
        collector_url: str | None,
    ) -> None:
        """Serve simulated engine nodes with an OpenAI-compatible API and vLLM-style /metrics.

        \b
        Example:
          streamscope engine --nodes 2 --port 8000 --tokens-per-chunk 4
        """
        from streamscope_cli.engine.serve import NodeOverrides, serve_engines

        serve_engines(
            scenario=scenario,
            nodes=nodes,
            host=host,
            port=port,
            overrides=NodeOverrides(flavor, tokens_per_chunk, burst_at_head, ignore_disconnect),
            collector_url=collector_url,
            announce=click.echo,
        )

    @cli.command()
    @click.option("--upstream", required=True, metavar="URL", help="The engine's base URL.")
    @click.option("--scenario", default=None, help="Take the impairments from this scenario's proxy section.")
    @click.option("--host", default="127.0.0.1", show_default=True)
    @click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
    @collector_option("Export ground truth to this collector (OTLP/HTTP base URL).", default=None)
    @_fail_plainly
    def proxy(upstream: str, scenario: str | None, host: str, port: int, collector_url: str | None) -> None:
        """An HTTP proxy in front of an engine that can buffer, stall, re-chunk or drop event streams.

        \b
        Example:
          streamscope proxy --upstream http://127.0.0.1:8001 --scenario gateway-buffering --port 8080
        """
        from streamscope.errors import ConfigError
        from streamscope_cli.proxy import ProxyConfig, run_proxy
        from streamscope_cli.workload.scenario import load_scenario
        from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger

        section: dict = {}
        name = ""
        if scenario:
            spec = load_scenario(scenario)
            section, name = spec.proxy or {}, spec.name
            seed = spec.seed
        else:
            seed = None
        try:
            config = ProxyConfig.from_dict(
                {
                    "upstream": upstream,
                    "node": section.get("node", "proxy"),
                    "seed": seed,
                    "impairments": section.get("impairments", []),
                }
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        logs = ground_truth_logger("sim-proxy", collector_url) if collector_url else None
        try:
            click.echo(f"proxy on http://{host}:{port} -> {upstream} ({len(config.impairments)} impairment rules)")
            run_proxy(config, host, port, sink=OtlpGroundTruthSink(logs, scenario=name) if logs else None)
        finally:
            if logs is not None:
                logs.shutdown()

    @cli.command("eval")
    @click.argument("scenario")
    @storage_option
    @click.option("--streams", type=click.IntRange(1, 100_000), default=None, help="Override the scenario's count.")
    @_fail_plainly
    def eval_command(scenario: str, storage_dsn: str | None, streams: int | None) -> None:
        """Run SCENARIO, attribute its stalls, and score them against the injected ground truth.

        Prints per-cause precision, recall and F1, and the confusion matrix.

        \b
        Example:
          streamscope eval mixed
        """
        from streamscope_cli.workload.evaluate import evaluate_named, render

        click.echo(render(scenario, evaluate_named(scenario, storage_dsn, streams)))

    @cli.command()
    @storage_option
    @collector_url_option
    @click.option("--since", default="1h", show_default=True, help="How far back: 30s, 15m, 2h, 7d.")
    @click.option("--from", "start", type=click.DateTime(), default=None, help="Range start (UTC); overrides --since.")
    @click.option("--to", "end", type=click.DateTime(), default=None, help="Range end (UTC); default now.")
    @click.option(
        "--html",
        "html_path",
        type=click.Path(dir_okay=False, writable=True, path_type=Path),
        default=Path("streamscope-report.html"),
        show_default=True,
        help="Where to write the HTML report with the charts.",
    )
    @click.option("--tenant", multiple=True, help="Only these tenants (repeatable), as the dashboards' variables.")
    @click.option("--service", multiple=True, help="Only these services (repeatable).")
    @click.option("--provider", multiple=True, help="Only these providers (repeatable).")
    @click.option("--model", multiple=True, help="Only these models (repeatable).")
    @click.option("--route", multiple=True, help="Only streams their server served on these routes (repeatable).")
    @click.option(
        "--side",
        type=click.Choice(SIDES),
        default=SIDES[0],
        show_default=True,
        help="Whose view of the streams: what the client received, what the server sent, what the browser drew.",
    )
    @_fail_plainly
    def report(
        storage_dsn: str | None,
        collector_url: str | None,
        since: str,
        start: datetime | None,
        end: datetime | None,
        html_path: Path,
        side: str,
        **variables: tuple[str, ...],
    ) -> None:
        """Print stream health for a time range and write an HTML report with charts.

        The same panels as the Grafana dashboards: ITL heatmap, per-stream p99 histogram, stalls by cause,
        tokens per chunk, attribution, stream shape, model texture, quality indices, chunk economics,
        chunking changes, cancellation tax, and one stalled stream drawn client against server.

        \b
        Example:
          streamscope report --since 15m --model gpt-4o --html /tmp/report.html
        """
        from rich.console import Console

        from streamscope_cli.query import opened_store
        from streamscope_dashboards.report import build_report, parse_duration
        from streamscope_dashboards.report_html import write_html
        from streamscope_dashboards.report_terminal import print_report

        end = end.replace(tzinfo=UTC) if end else datetime.now(UTC)
        if start is None:
            try:
                start = end - parse_duration(since)
            except ValueError as exc:
                raise click.BadParameter(str(exc), param_hint="--since") from None
        start = start.replace(tzinfo=UTC)
        if start >= end:
            raise click.BadParameter("the range must start before it ends", param_hint="--from/--to")
        with opened_store(storage_dsn or env.default_storage_dsn(), collector_url) as run:
            built = build_report(run, start, end, env.stall_threshold_us(), {**variables, "side": (side,)})
        print_report(built, Console())
        write_html(built, html_path)
        click.echo(f"HTML report: {html_path.resolve()}")

    @cli.command("gpu-agent")
    @click.option("--node", required=True, help="This node's name, as the engine's server spans carry it.")
    @click.option("--engine-url", default=None, metavar="URL", help="The engine's metrics endpoint (…/metrics).")
    @collector_option("OTLP/HTTP base URL of the collector the agent sends to.")
    @click.option("--engine-interval-ms", default=250, show_default=True, type=click.IntRange(10, 600_000))
    @click.option("--gpu-interval-ms", default=1000, show_default=True, type=click.IntRange(10, 600_000))
    @click.option("--no-gpu", is_flag=True, help="Do not read NVML (engine telemetry only).")
    @click.option("--once", is_flag=True, help="Scrape once, print the normalized samples, and exit.")
    @click.option("--json", "as_json", is_flag=True, help="With --once: print JSON.")
    @_fail_plainly
    def gpu_agent(
        node: str,
        engine_url: str | None,
        collector_url: str,
        engine_interval_ms: int,
        gpu_interval_ms: int,
        no_gpu: bool,
        once: bool,
        as_json: bool,
    ) -> None:
        """Sample the serving engine and the GPUs of this node and send them to the collector.

        \b
        Examples:
          streamscope gpu-agent --node gpu-7 --engine-url http://127.0.0.1:8000/metrics
          streamscope gpu-agent --node gpu-7 --engine-url http://127.0.0.1:8000/metrics --once --json
        """
        from streamscope_cli.gpu_agent_run import print_samples, run_agent
        from streamscope_gpu_agent.agent import AgentConfig, GpuAgent

        config = AgentConfig(
            node=node,
            engine_url=engine_url,
            collector_url=None if once else collector_url,
            engine_interval_s=engine_interval_ms / 1000,
            gpu_interval_s=gpu_interval_ms / 1000,
            gpu=not no_gpu,
        )
        agent = GpuAgent(config)
        if once:
            samples, _ = agent.collect_once()
            print_samples(samples, as_json)
        else:
            run_agent(agent, announce=click.echo)

    @cli.group()
    def dashboards() -> None:
        """Grafana dashboards and alert rules."""

    @dashboards.command("push")
    @click.option("--grafana-url", envvar=env.GRAFANA_URL, show_envvar=True, required=True, metavar="URL")
    @click.option(
        "--token",
        envvar=env.GRAFANA_TOKEN,
        show_envvar=True,
        default=None,
        metavar="TOKEN",
        help="A service account token with the Admin role (or put user:password in the URL).",
    )
    @click.option(
        "--clickhouse-url",
        default=None,
        metavar="URL",
        help="How Grafana reaches ClickHouse: http://host:8123 or https://host:8443. Unset connection options "
        "keep the provisioning file's values.",
    )
    @click.option("--clickhouse-user", default=None, metavar="USER", help="The read-only user Grafana queries as.")
    @click.option(
        "--clickhouse-password",
        envvar=env.GRAFANA_CLICKHOUSE_PASSWORD,
        show_envvar=True,
        required=True,
        metavar="PASSWORD",
    )
    @click.option("--clickhouse-database", default=None, metavar="NAME")
    @click.option(
        "--folder",
        default=None,
        metavar="TITLE",
        help="Put the dashboards and alert rules in this folder [default: the folders the provisioning files name].",
    )
    @click.option(
        "--provisioning",
        "provisioning_dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=None,
        help="Read datasources/, dashboards/ and alerting/ from this directory [default: the shipped files].",
    )
    @_fail_plainly
    def dashboards_push(
        grafana_url: str,
        token: str | None,
        clickhouse_url: str | None,
        clickhouse_user: str | None,
        clickhouse_password: str,
        clickhouse_database: str | None,
        folder: str | None,
        provisioning_dir: Path | None,
    ) -> None:
        """Provision the ClickHouse data source, a folder, the dashboards and the alert rules, contact points and
        notification policy into a running Grafana.

        Reads the same provisioning files the compose stack mounts. Running it again updates everything in
        place. The notification policy tree is replaced whole, as file provisioning does.

        \b
        Example:
          GRAFANA_TOKEN=glsa_... GRAFANA_CLICKHOUSE_PASSWORD=... streamscope dashboards push \\
            --grafana-url https://grafana.example.com --clickhouse-url http://clickhouse.internal:8123
        """
        try:
            from streamscope_dashboards.push import PROVISIONING_DIR, ClickHouseTarget, PushConfig, push
        except ImportError:
            hint = "dashboards push needs the grafana extra: pip install 'streamscope[grafana]'"
            raise click.ClickException(hint) from None

        clickhouse = ClickHouseTarget(clickhouse_password, clickhouse_url, clickhouse_user, clickhouse_database)
        config = PushConfig(grafana_url, token, clickhouse, folder, provisioning_dir or PROVISIONING_DIR)
        push(config, announce=click.echo)

    return cli


if __name__ == "__main__":
    main()
