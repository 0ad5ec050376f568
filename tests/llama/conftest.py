"""One llama-server binary and one set of models per session: built or written once, then taken from the cache.

A test that asks for the binary gets a timeout long enough for a build from source (CI builds it in a step of its
own first, so there the fixture returns at once)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from streamscope_cli.llama.build import ensure_server
from streamscope_cli.llama.models import DRAFT, LARGER, TINY, ensure_model
from streamscope_cli.llama.server import LlamaServer, ServerOptions

BUILD_TIMEOUT_S = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "llama_server_binary" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.timeout(BUILD_TIMEOUT_S))


@pytest.fixture(scope="session")
def llama_server_binary() -> Path:
    return ensure_server()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    return ensure_model(TINY)


@pytest.fixture
def tiny_server(llama_server_binary: Path, tiny_model: Path) -> Iterator[LlamaServer]:
    with LlamaServer(llama_server_binary, ServerOptions(tiny_model, parallel=2, context=2048)) as server:
        yield server


@pytest.fixture
def drafting_server(llama_server_binary: Path) -> Iterator[LlamaServer]:
    """The larger model with its draft: speculative decoding on."""
    options = ServerOptions(ensure_model(LARGER), draft=ensure_model(DRAFT), context=1024)
    with LlamaServer(llama_server_binary, options) as server:
        yield server
