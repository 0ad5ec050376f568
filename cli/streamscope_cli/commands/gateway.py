"""`streamscope gateway`: a transparent reverse proxy in front of an engine that records the streams it relays."""

from __future__ import annotations

import click

from streamscope_cli.options import collector_option, fail_plainly, max_request_mib_option


@click.command()
@click.option("--upstream", required=True, metavar="URL", help="The engine's base URL.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535), help="0 picks a free one.")
@collector_option(
    "Export stream spans to this collector (OTLP base URL; unset: the OTEL_EXPORTER_OTLP_* variables).", default=None
)
@click.option("--service-name", envvar="OTEL_SERVICE_NAME", default="streamscope-gateway", show_default=True)
@click.option(
    "--node",
    "node_name",
    default=None,
    metavar="NAME",
    help="The upstream's serving node, as its GPU agent names it: stalls are then judged with its engine events.",
)
@max_request_mib_option(
    "Largest JSON request body, which the gateway reads whole (413 above it); other bodies stream through."
)
@fail_plainly
def gateway(
    upstream: str,
    host: str,
    port: int,
    collector_url: str | None,
    service_name: str,
    node_name: str | None,
    max_request_mib: int,
) -> None:
    """Forward every request to the engine and every answer back byte for byte, as it arrives; record the gateway
    side of each event stream (chunk times and sizes, usage, how it ended) in the caller's trace.

    \b
    Example:
      streamscope gateway --upstream http://127.0.0.1:8000 --port 8080 --collector http://127.0.0.1:4318 \\
        --node gpu-node-1
    """
    from streamscope_cli.gateway.run import GatewayConfig, run_gateway
    from streamscope_collector.serving import connectable_host

    config = GatewayConfig(upstream, host, port, collector_url, service_name, node_name, max_request_mib << 20)
    run_gateway(
        config,
        on_ready=lambda bound: click.echo(f"gateway on http://{connectable_host(host)}:{bound} -> {upstream}"),
    )
