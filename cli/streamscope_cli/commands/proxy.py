"""`streamscope proxy`: an impairing gateway in front of an engine, to reproduce buffering and stalls."""

from __future__ import annotations

import click

from streamscope_cli.options import collector_option, fail_plainly


@click.command()
@click.option("--upstream", required=True, metavar="URL", help="The engine's base URL.")
@click.option("--scenario", default=None, help="Take the impairments from this scenario's proxy section.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(1, 65535))
@click.option(
    "--grpc-upstream", default=None, metavar="HOST:PORT", help="Also relay gRPC calls to this engine's gRPC port."
)
@click.option("--grpc-port", default=0, show_default=True, type=click.IntRange(0, 65535), help="0: a free port.")
@collector_option("Export ground truth to this collector (OTLP/HTTP base URL).", default=None)
@fail_plainly
def proxy(
    upstream: str,
    scenario: str | None,
    host: str,
    port: int,
    grpc_upstream: str | None,
    grpc_port: int,
    collector_url: str | None,
) -> None:
    """An HTTP, WebSocket and gRPC proxy in front of an engine that can buffer, stall, re-chunk or drop event
    streams.

    \b
    Example:
      streamscope proxy --upstream http://127.0.0.1:8001 --scenario gateway-buffering --port 8080
      streamscope proxy --upstream http://127.0.0.1:8001 --grpc-upstream 127.0.0.1:8002 --grpc-port 8081
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
        run_proxy(
            config,
            host,
            port,
            sink=OtlpGroundTruthSink(logs, scenario=name) if logs else None,
            grpc=(grpc_upstream, grpc_port) if grpc_upstream else None,
            on_grpc_ready=lambda bound: click.echo(f"gRPC on {host}:{bound} -> {grpc_upstream}"),
        )
    finally:
        if logs is not None:
            logs.shutdown()
