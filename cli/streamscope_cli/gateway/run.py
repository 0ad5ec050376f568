"""Serve the gateway until SIGINT or SIGTERM: uvicorn on one socket, the spans exported over OTLP as the SDK's
``setup`` exports them (to ``collector_url``, else where the OTEL_EXPORTER_OTLP_* variables say)."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable
from dataclasses import dataclass

import httpx
import uvicorn
from opentelemetry.trace import TracerProvider

import streamscope
from streamscope.asgi import ASGIApp
from streamscope.errors import ConfigError
from streamscope_cli.gateway.app import Gateway
from streamscope_collector.serving import bound_socket

GRACE_S = 5
"""On the way out, streams still being relayed get this long to finish."""
BACKLOG = 2048
"""Connections waiting to be taken (uvicorn's default)."""


@dataclass(frozen=True)
class GatewayConfig:
    upstream: str
    host: str = "127.0.0.1"
    port: int = 8080
    """0 picks a free one."""
    collector_url: str | None = None
    service_name: str = "streamscope-gateway"
    node_name: str | None = None
    """The serving node behind ``upstream`` (its GPU agent's name), carried by every span: a gateway in front of an
    engine with no recorder of its own is the engine's side of its streams."""
    max_body_bytes: int = 64 << 20
    """The largest JSON request body the gateway reads whole."""

    def __post_init__(self) -> None:
        try:
            url = httpx.URL(self.upstream)
        except httpx.InvalidURL as exc:
            raise ConfigError(f"--upstream {self.upstream!r}: {exc}") from None
        if url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"--upstream {self.upstream!r} is not an http:// or https:// URL")


def create_app(
    upstream: str,
    tracer_provider: TracerProvider | None = None,
    node_name: str | None = None,
    max_body_bytes: int = GatewayConfig.max_body_bytes,
) -> streamscope.StreamMiddleware:
    """The gateway as an ASGI app: forwarding, with every stream it relays recorded as its ``gateway`` side."""
    return streamscope.StreamMiddleware(
        Gateway(upstream, max_body_bytes), side="gateway", node_name=node_name, tracer_provider=tracer_provider
    )


def run_gateway(config: GatewayConfig, on_ready: Callable[[int], None] = lambda port: None) -> None:
    """Serve until a signal; ``on_ready`` gets the bound port. Spans still queued are exported on the way out."""
    sock = listening_socket(config.host, config.port)
    provider = streamscope.setup(config.service_name, endpoint=config.collector_url, set_global=False)
    try:
        on_ready(sock.getsockname()[1])
        serve(create_app(config.upstream, provider, config.node_name, config.max_body_bytes), sock)
    finally:
        sock.close()
        provider.shutdown()


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``: from the moment its port is announced, connections wait in its backlog
    for the server to take them."""
    sock = bound_socket(host, port, "the gateway")
    sock.listen(BACKLOG)
    return sock


def serve(app: ASGIApp, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` as the gateway is served, from the main thread, until SIGINT or SIGTERM.

    Once stopped, uvicorn raises the signal that stopped it again; SIGTERM then interrupts as Ctrl-C does, so the
    caller's cleanup (the last export) runs instead of the process dying."""
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        server_header=False,  # the upstream's Server and Date headers pass through instead
        date_header=False,
        timeout_graceful_shutdown=GRACE_S,
    )
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
