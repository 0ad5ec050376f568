"""`streamscope engine`: simulated engine nodes to point real clients or the proxy at."""

from __future__ import annotations

import click

from streamscope_cli.options import collector_option, fail_plainly


@click.command()
@click.option("--scenario", default=None, help="Take the nodes from this scenario (else --nodes default nodes).")
@click.option("--nodes", default=1, show_default=True, type=click.IntRange(1, 16), help="Default nodes to start.")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port of the first node; the next ones count up from it (0: each node on a free port, announced).",
)
@click.option(
    "--grpc-port",
    default=None,
    type=click.IntRange(0, 65535),
    help="Also serve the gRPC streaming service (streamscope.engine.v1.Engine/Generate) from this port, counting up.",
)
@click.option("--flavor", type=click.Choice(["vllm", "sglang"]), default=None, help="Metric names on /metrics.")
@click.option("--tokens-per-chunk", type=click.IntRange(1, 64), default=None)
@click.option("--burst-at-head", type=click.IntRange(0, 10_000), default=None)
@click.option("--ignore-disconnect", is_flag=True, help="Keep generating when clients go away.")
@collector_option("Export server spans and ground truth to this collector (OTLP/HTTP base URL).", default=None)
@fail_plainly
def engine(
    scenario: str | None,
    nodes: int,
    host: str,
    port: int,
    grpc_port: int | None,
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
        grpc_port=grpc_port,
    )
