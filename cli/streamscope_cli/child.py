"""A part of a run in a process of its own (an engine node, the proxy, a ``streamscope`` command), as it would be
on another machine in a deployment: up once it prints its first line, told what to do on its standard input,
stopped with SIGTERM, and free to print a last line on its way out.
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
from collections.abc import Mapping

from streamscope.errors import StreamscopeError
from streamscope.threads import named_thread

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
_CLOSED = b""
"""Queued when the child's output closes (a line read from it is never empty: it ends in a newline or EOF)."""


class ChildProcess:
    """``python -m MODULE ARGS`` with pipes to its standard input and output."""

    def __init__(self, module: str, *arguments: str, name: str, environment: Mapping[str, str] | None = None) -> None:
        """``name``: what the child is, for messages (``the proxy``, ``engine node-0``); ``environment``: set in
        the child's environment on top of this process's."""
        self._command = [sys.executable, "-m", module, *arguments]
        self.name = name
        self._environment = {**os.environ, **environment} if environment else None
        self._child: subprocess.Popen[bytes] | None = None
        self._lines: queue.Queue[bytes] = queue.Queue()
        """The child's output, line by line, as one reader thread (for the child's life) takes it."""

    def start(self) -> ChildProcess:
        """Start the child and return at once (``ready`` waits for its first line): several start side by side."""
        self._child = subprocess.Popen(
            self._command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._environment
        )
        named_thread(self._read, f"{self.name} output").start()
        return self

    def _read(self) -> None:
        """Queue each line the child prints until its output closes; a line not waited for is kept, not lost."""
        child = self._running()
        assert child.stdout is not None
        for line in child.stdout:
            self._lines.put(line)
        self._lines.put(_CLOSED)

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
        self._running()
        try:
            line = self._lines.get(timeout=timeout_s)
        except queue.Empty:
            return ""
        if line == _CLOSED:
            self._lines.put(_CLOSED)  # for whoever asks next, ``stop`` included
        return line.decode(errors="replace").strip()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> str:
        """SIGTERM, then wait for the child (killed after ``timeout_s``); returns what it printed meanwhile."""
        child, self._child = self._child, None
        if child is None:
            return ""
        child.terminate()
        try:
            child.wait(timeout_s)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
        assert child.stdin is not None
        child.stdin.close()
        return self._rest(timeout_s)

    def _rest(self, timeout_s: float) -> str:
        """Every line queued and not yet taken, once the reader has seen the output close."""
        rest: list[bytes] = []
        while True:
            try:
                line = self._lines.get(timeout=timeout_s)
            except queue.Empty:
                break
            if line == _CLOSED:
                break
            rest.append(line)
        return b"".join(rest).decode(errors="replace")

    def _running(self) -> subprocess.Popen[bytes]:
        if self._child is None:
            raise StreamscopeError(f"{self.name} is not running")
        return self._child


class CommandProcess:
    """A ``streamscope`` command in a process of its own, up once it prints its first line (where it listens)."""

    def __init__(self, *arguments: str, environment: Mapping[str, str] | None = None) -> None:
        """``environment``: set in the command's environment on top of this process's."""
        self._child = ChildProcess(
            "streamscope_cli.main", *arguments, name=f"streamscope {arguments[0]}", environment=environment
        )
        self.announced = ""

    def __enter__(self) -> CommandProcess:
        self.announced = self._child.start().ready()
        return self

    @property
    def listening_url(self) -> str:
        """The first URL the command announced: where it listens (``gateway on URL -> upstream``)."""
        found = re.search(r"https?://\S+", self.announced)
        if found is None:
            raise StreamscopeError(f"{self._child.name} announced no URL: {self.announced!r}")
        return found.group()

    def __exit__(self, *exc: object) -> None:
        self._child.stop()
