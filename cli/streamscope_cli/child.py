"""A part of a run in a process of its own (an engine node, the proxy, a ``streamscope`` command), as it would be
on another machine in a deployment: up once it prints its first line, told what to do on its standard input,
stopped with SIGTERM, and free to print a last line on its way out.
"""

from __future__ import annotations

import subprocess
import sys
import threading

from streamscope.errors import StreamscopeError

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class ChildProcess:
    """``python -m MODULE ARGS`` with pipes to its standard input and output."""

    def __init__(self, module: str, *arguments: str, name: str) -> None:
        """``name``: what the child is, for messages (``the proxy``, ``engine node-0``)."""
        self._command = [sys.executable, "-m", module, *arguments]
        self.name = name
        self._child: subprocess.Popen[bytes] | None = None

    def start(self) -> ChildProcess:
        """Start the child and return at once (``ready`` waits for its first line): several start side by side."""
        self._child = subprocess.Popen(self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self

    def send(self, line: str) -> None:
        """One line to the child's standard input."""
        child = self._running()
        assert child.stdin is not None
        child.stdin.write(line.encode() + b"\n")
        child.stdin.flush()

    def ready(self, timeout_s: float = START_TIMEOUT_S) -> str:
        """The child's first line (where it listens), once it printed it; it is stopped if it prints none."""
        announced = self.line(timeout_s)
        if not announced:
            self.stop()
            raise StreamscopeError(f"{self.name} did not start (its process printed nothing)")
        return announced

    def port(self) -> int:
        """The port the child bound, from its first line (a number alone)."""
        announced = self.ready()
        if not announced.isdigit():
            self.stop()
            raise StreamscopeError(f"{self.name} did not start (it printed {announced!r})")
        return int(announced)

    def line(self, timeout_s: float) -> str:
        """The child's next line, stripped; empty if it printed none within ``timeout_s``."""
        child = self._running()
        assert child.stdout is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(child.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(timeout_s)
        return line[0].decode(errors="replace").strip() if line else ""

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> str:
        """SIGTERM, then wait for the child (killed after ``timeout_s``); returns what it printed meanwhile."""
        child, self._child = self._child, None
        if child is None:
            return ""
        child.terminate()
        try:
            rest, _ = child.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            rest, _ = child.communicate()
        return rest.decode(errors="replace")

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is None:
            raise StreamscopeError(f"{self.name} is not running")
        return self._child
