"""``llama-server`` as a subprocess: started on a free port with a model, ready once it answers, stopped cleanly.

The flags are llama.cpp's own (tools/server/README.md of the built version): ``-np`` slots, ``--metrics`` for the
``llamacpp:`` Prometheus names on ``/metrics``, ``--slots`` for ``/slots``, ``-md`` with ``--spec-type draft-simple``
for speculative decoding (a draft model alone is loaded but not used), ``--spec-draft-n-max`` for the draft length.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from streamscope.errors import StreamscopeError

LISTENING = re.compile(r"listening on (http://\S+:\d+)")


@dataclass(frozen=True)
class ServerOptions:
    """What one ``llama-server`` serves, and how; port 0 lets the server pick a free one."""

    model: Path
    draft: Path | None = None
    draft_max: int = 4
    parallel: int = 1
    context: int = 4096
    batch: int | None = None
    """Tokens in one step (``-b`` and ``-ub``; llama.cpp's default 2048): a prompt up to this long is prefilled in
    one step, holding up every stream decoding beside it, as an engine without chunked prefill does."""
    unified_kv: bool = False
    """One KV buffer for all slots (``-kvu``): a request may use the whole context, not its slot's share of it."""
    metrics: bool = True
    slots: bool = True
    threads: int = field(default_factory=lambda: max(1, (os.cpu_count() or 2) - 1))
    """A core is left to the clients: on a shared core, llama.cpp's threads wait on each other for whole slices."""
    host: str = "127.0.0.1"
    port: int = 0

    def arguments(self) -> list[str]:
        arguments = ["-m", str(self.model), "--host", self.host, "--port", str(self.port)]
        arguments += ["-c", str(self.context), "-np", str(self.parallel)]
        arguments += ["-kvu"] if self.unified_kv else []
        arguments += ["-b", str(self.batch), "-ub", str(self.batch)] if self.batch else []
        arguments += ["--metrics"] if self.metrics else []
        arguments += ["--slots"] if self.slots else ["--no-slots"]
        arguments += ["-t", str(self.threads)]
        if self.draft is not None:
            arguments += ["-md", str(self.draft), "--spec-type", "draft-simple"]
            arguments += ["--spec-draft-n-max", str(self.draft_max)]
        return arguments


class LlamaServer:
    """A running ``llama-server``; use as a context manager. Its output goes to ``log`` (a temporary file if None)."""

    def __init__(self, binary: Path, options: ServerOptions, log: Path | None = None, ready_s: float = 120.0):
        self.binary, self.options, self.ready_s = binary, options, ready_s
        self._scratch: tempfile.TemporaryDirectory[str] | None = None
        if log is None:
            self._scratch = tempfile.TemporaryDirectory(prefix="llama-server-")
            log = Path(self._scratch.name) / "llama-server.log"
        self.log = log
        self.url = ""
        self._process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> LlamaServer:
        """Start the process and wait until it listens and ``/health`` answers 200 (the model is loaded)."""
        with open(self.log, "wb") as out:
            self._process = subprocess.Popen(
                [str(self.binary), *self.options.arguments()], stdout=out, stderr=subprocess.STDOUT
            )
        try:
            self.url = self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM (the server finishes cleanly), then SIGKILL after ``grace_s``."""
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._scratch is not None:
            self._scratch.cleanup()
            self._scratch = None

    def wait(self) -> None:
        """Block while the server runs; its exit, unasked, is an error."""
        assert self._process is not None
        if self._process.wait() != 0:
            raise StreamscopeError(f"llama-server exited with {self._process.returncode}:\n{self._log_tail()}")

    def _wait_ready(self) -> str:
        assert self._process is not None
        deadline = time.monotonic() + self.ready_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise StreamscopeError(f"llama-server exited with {self._process.returncode}:\n{self._log_tail()}")
            listening = LISTENING.search(self.log.read_text(errors="replace"))
            if listening and _healthy(listening.group(1)):
                return listening.group(1)
            time.sleep(0.05)
        raise StreamscopeError(f"llama-server not ready after {self.ready_s:.0f} s:\n{self._log_tail()}")

    def _log_tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False
