"""`streamscope gateway` as a process of its own in front of an upstream, exporting to a collector; llama-server
from the fixtures tests/llama serves it with (one build per session)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from streamscope_cli.child import CommandProcess
from streamscope_cli.llama.server import LlamaServer, ServerOptions
from tests.llama.conftest import llama_server_binary, tiny_model

__all__ = ["engine", "gateway_process", "llama_server_binary", "tiny_model"]

ENGINE_CONTEXT = 4096
"""One slot of the tiny model's whole context: a stream of thousands of tokens, to be cancelled long before its end."""
EXPORT_DELAY_MS = "50"
"""The gateway's span batches leave this soon (OTEL_BSP_SCHEDULE_DELAY), so a test waits for them briefly."""


@contextmanager
def gateway_process(
    upstream: str,
    collector_url: str,
    export_delay_ms: str = EXPORT_DELAY_MS,
    node: str | None = None,
    options: tuple[str, ...] = (),
) -> Iterator[str]:
    """``streamscope gateway`` in front of ``upstream`` on a free port (``--node``, when given, and ``options``);
    yields its base URL, stops it with SIGTERM."""
    arguments = ["gateway", "--upstream", upstream, "--port", "0", "--collector", collector_url]
    arguments += [*(["--node", node] if node else []), *options]
    with CommandProcess(*arguments, environment={"OTEL_BSP_SCHEDULE_DELAY": export_delay_ms}) as gateway:
        yield gateway.listening_url


@pytest.fixture
def engine(llama_server_binary: Path, tiny_model: Path) -> Iterator[LlamaServer]:
    with LlamaServer(llama_server_binary, ServerOptions(tiny_model, parallel=1, context=ENGINE_CONTEXT)) as server:
        yield server
