"""The demo chat page: a web chat in front of a simulated engine node, timed to the screen by the browser snippet.

``GET /`` is the page; the node's OpenAI API is mounted under ``/engine`` on the same origin, as an app's own
backend would be. The page loads the snippet from the collector and sends its browser spans there; the node
sends its server spans there too, continuing the page's trace (``traceparent``), so the two sides of every
answer join in ClickHouse. The page's ``?render_ms=N&render_every=K`` makes it a slow renderer (N ms of
main-thread work on every K-th chunk), to see ``client_render`` stalls; ``?block_ms=N&block_at=K`` makes it a
busy page (a timer runs N ms of other main-thread work after the K-th chunk: a long task the snippet reports).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

from fastapi import FastAPI
from fastapi.responses import HTMLResponse
from opentelemetry.sdk.trace import TracerProvider

from streamscope import setup
from streamscope_cli.engine.app import EngineNode, NodeConfig
from streamscope_collector.serving import BackgroundServer, connectable_host, stop_on_signals, wait_until_set

CHAT_SERVICE = "demo-chat-engine"


def create_chat_app(node: EngineNode, *, collector_url: str, browser_token: str | None = None) -> FastAPI:
    """The page (pointing its snippet at ``collector_url``, as the browser reaches it) and the node under /engine."""
    config = {
        "collector": collector_url.rstrip("/"),
        "token": browser_token,
        "model": node.config.model,
    }
    # "</" cannot end the inline script: the config is JSON with "<" escaped
    page = _page().replace("__CONFIG__", json.dumps(config).replace("<", "\\u003c"))
    app = FastAPI(title="streamscope demo chat", docs_url=None, redoc_url=None, openapi_url=None)

    @app.get("/", response_class=HTMLResponse)
    async def chat_page() -> str:
        return page

    app.mount("/engine", node.app)
    return app


def _page() -> str:
    return resources.files("streamscope_cli.demo").joinpath("chat.html").read_text()


@dataclass
class ChatServer:
    """The chat page and its engine node, served from a background thread."""

    server: BackgroundServer
    url: str
    traces: TracerProvider

    def stop(self) -> None:
        self.server.stop()
        self.traces.shutdown()


def start_chat(
    collector_url: str,
    *,
    page_collector_url: str | None = None,
    browser_token: str | None = None,
    host: str = "127.0.0.1",
    port: int = 0,
) -> ChatServer:
    """Serve the chat page; the node's spans go to ``collector_url``, the page's to ``page_collector_url``
    (the collector's address as browsers reach it; the same by default)."""
    traces = setup(CHAT_SERVICE, endpoint=collector_url, set_global=False)
    engine = EngineNode(NodeConfig(node="chat-node"), tracer_provider=traces)
    app = create_chat_app(engine, collector_url=page_collector_url or collector_url, browser_token=browser_token)
    server = BackgroundServer(app, host, port, name="demo-chat").start()
    return ChatServer(server, f"http://{connectable_host(host)}:{server.port}/", traces)


def serve_chat(chat: ChatServer, *, announce: Callable[[str], None], stop: threading.Event | None = None) -> None:
    """``streamscope chat``: keep ``chat`` serving until a signal (or ``stop``), then stop it."""
    try:
        announce(f"demo chat: {chat.url} (Ctrl-C to stop)")
        with stop_on_signals(stop or threading.Event()) as stopping:
            wait_until_set(stopping)
    finally:
        chat.stop()
