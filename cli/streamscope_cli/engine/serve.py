"""`streamscope engine`: serve simulated engine nodes until SIGINT or SIGTERM."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace

from streamscope import setup
from streamscope_cli.engine.app import EngineNode, NodeConfig
from streamscope_cli.engine.process import ENGINE_SERVICE
from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger
from streamscope_collector.serving import BackgroundServer, stop_on_signals, wait_until_set


@dataclass(frozen=True)
class NodeOverrides:
    flavor: str | None = None
    tokens_per_chunk: int | None = None
    burst_at_head: int | None = None
    ignore_disconnect: bool = False

    def apply(self, config: NodeConfig) -> NodeConfig:
        output = config.output
        if self.tokens_per_chunk is not None:
            output = replace(output, tokens_per_chunk=self.tokens_per_chunk)
        if self.burst_at_head is not None:
            output = replace(output, burst_at_head=self.burst_at_head)
        return replace(
            config,
            flavor=self.flavor or config.flavor,
            output=output,
            ignore_disconnect=self.ignore_disconnect or config.ignore_disconnect,
        )


def node_configs(scenario: str | None, nodes: int, overrides: NodeOverrides) -> list[NodeConfig]:
    if scenario:
        from streamscope_cli.workload.scenario import load_scenario

        configs = list(load_scenario(scenario).nodes)
    else:
        configs = [NodeConfig(node=f"node-{i}", seed=i) for i in range(nodes)]
    return [overrides.apply(config) for config in configs]


def serve_engines(
    *,
    scenario: str | None,
    nodes: int,
    host: str,
    port: int,
    overrides: NodeOverrides,
    collector_url: str | None,
    announce: Callable[[str], None],
    stop: threading.Event | None = None,
    grpc_port: int | None = None,
) -> None:
    """Start every node on consecutive ports (each on a free one if ``port`` is 0) and block until a signal; with
    ``grpc_port``, each node's gRPC service too, on ports counted the same way."""
    stop = stop or threading.Event()
    traces = setup(ENGINE_SERVICE, endpoint=collector_url, set_global=False) if collector_url else None
    logs = ground_truth_logger(ENGINE_SERVICE, collector_url) if collector_url else None
    sink = OtlpGroundTruthSink(logs, scenario=scenario or "") if logs else None
    servers: list[BackgroundServer] = []
    try:
        for i, config in enumerate(node_configs(scenario, nodes, overrides)):
            grpc = None if grpc_port is None else (host, grpc_port + i if grpc_port else 0)
            node = EngineNode(config, sink=sink, tracer_provider=traces, grpc_address=grpc)
            http_port = port + i if port else 0
            server = BackgroundServer(node.app, host, http_port, name=f"engine-{config.node}", lifespan=bool(grpc))
            servers.append(server.start())
            served = f", gRPC {host}:{node.grpc_port}" if grpc else ""
            announce(f"{config.node}: http://{host}:{server.port} ({config.flavor} metrics at /metrics{served})")
        with stop_on_signals(stop):
            wait_until_set(stop)
    finally:
        for server in servers:
            server.stop()
        for provider in (traces, logs):
            if provider is not None:
                provider.shutdown()
