"""Serve an ASGI app with uvicorn from a background thread, on a port chosen by the OS if asked (port 0)."""

from __future__ import annotations

import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from streamscope.threads import named_thread


def bound_socket(host: str, port: int, what: str) -> socket.socket:
    """A TCP socket bound to ``host:port``; the error says what could not listen where (a port in use).

    Made with the TCP protocol by number: asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on such sockets'
    connections, and with it on, a small write after another (an event after the response's headers) waits for the
    client's delayed acknowledgement."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"{what} cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def check_free(host: str, port: int, what: str) -> None:
    """Fail now, naming the port, if ``what`` could not listen on ``host:port``: before a service opens or
    migrates anything, rather than once it has."""
    bound_socket(host, port, what).close()


class BackgroundServer:
    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "http",
        keep_alive_s: int = 5,
        *,
        lifespan: bool = False,
    ) -> None:
        """``keep_alive_s``: how long an idle connection stays open for the client's next request; ``lifespan``:
        run the app's startup (before ``start`` returns) and shutdown on the server's loop."""
        self._socket = bound_socket(host, port, name)
        self.port: int = self._socket.getsockname()[1]
        self._server = uvicorn.Server(
            uvicorn.Config(
                app,
                log_level="warning",
                lifespan="on" if lifespan else "off",
                access_log=False,
                timeout_keep_alive=keep_alive_s,
            )
        )
        self._thread = named_thread(self._server.run, name, sockets=[self._socket])

    def start(self) -> BackgroundServer:
        self._thread.start()
        while not self._server.started:
            if not self._thread.is_alive():
                raise OSError(f"server {self._thread.name} failed to start on port {self.port}")
            self._thread.join(0.01)
        return self

    def stop(self) -> None:
        """Stop accepting, let in-flight requests finish, and join the thread."""
        self._server.should_exit = True
        if self._thread.is_alive():
            self._thread.join()
        self._socket.close()


@contextmanager
def stop_on_signals(stop: threading.Event) -> Iterator[threading.Event]:
    """Inside the block, SIGINT and SIGTERM set ``stop``; the previous handlers come back after it.

    Signal handlers can only be installed from the main thread; elsewhere (tests, embedding) ``stop`` alone ends
    the wait.
    """
    previous: dict[signal.Signals, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, lambda *_: stop.set())
    try:
        yield stop
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def wait_until_set(stop: threading.Event, poll_s: float = 0.2) -> None:
    """Block the main thread until ``stop`` is set, waking every ``poll_s``.

    A signal may be delivered to any thread of the process (the embedded engine has many), and Python runs
    its handler only when the main thread next executes bytecode; an untimed wait would never get there, so
    SIGTERM would set nothing.
    """
    while not stop.wait(poll_s):
        pass


def connectable_host(host: str) -> str:
    """The address to reach a server listening on ``host`` (all interfaces: loopback), bracketed for IPv6."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host
