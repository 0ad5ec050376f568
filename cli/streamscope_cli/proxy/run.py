"""Run the proxy as a long-lived process (``streamscope proxy``): serve until SIGINT or SIGTERM."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from streamscope.threads import named_thread
from streamscope_cli.proxy.app import create_app
from streamscope_cli.proxy.config import ProxyConfig
from streamscope_cli.proxy.grpc_relay import serve_in_thread
from streamscope_cli.workload.ground_truth import GroundTruthSink
from streamscope_collector.serving import BackgroundServer, stop_on_signals, wait_until_set

log = logging.getLogger("streamscope_cli.proxy")


class _QuietIntendedCuts(logging.Filter):
    """uvicorn logs an error whenever an app ends a body early; for this app that is a drop, done on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "returned without completing response" not in record.getMessage()


def run_proxy(
    config: ProxyConfig,
    host: str = "127.0.0.1",
    port: int = 8080,
    sink: GroundTruthSink | None = None,
    *,
    stop: threading.Event | None = None,
    on_ready: Callable[[int], None] | None = None,
    grace_s: float = 5.0,
    grpc: tuple[str, int] | None = None,
    on_grpc_ready: Callable[[int], None] | None = None,
) -> None:
    """Serve the proxy on ``host:port`` and block until SIGINT/SIGTERM (main thread) or until ``stop`` is set.

    ``on_ready`` gets the bound port (useful with port 0). In-flight streams get ``grace_s`` to finish on the
    way out; after that the process may exit under them (the server thread is a daemon). ``grpc``: (upstream
    ``host:port``, port) relays gRPC calls too, on that port of ``host`` (0: a free one, which ``on_grpc_ready``
    gets).
    """
    stop = stop or threading.Event()
    app = create_app(config, sink)
    # binding first: a busy port raises OSError before any signal handler is touched
    server = BackgroundServer(app, host=host, port=port, name="streamscope-proxy")
    stop_grpc: Callable[[], None] = lambda: None  # noqa: E731
    if grpc is not None:
        grpc_port, stop_grpc = serve_in_thread(app.state.proxy, grpc[0], host, grpc[1])
        log.info("proxy relaying gRPC on %s:%d → %s", host, grpc_port, grpc[0])
        if on_grpc_ready is not None:
            on_grpc_ready(grpc_port)
    quiet = _QuietIntendedCuts()
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addFilter(quiet)
    try:
        with stop_on_signals(stop):
            server.start()
            log.info(
                "proxy listening on %s:%d → %s (%d impairment rules)",
                host,
                server.port,
                config.upstream,
                len(config.impairments),
            )
            if on_ready is not None:
                on_ready(server.port)
            wait_until_set(stop)
    finally:
        stopper = named_thread(server.stop, "streamscope-proxy-stop")
        stopper.start()
        stop_grpc()
        stopper.join(grace_s)
        uvicorn_log.removeFilter(quiet)
