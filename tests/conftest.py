"""Shared fixtures: one embedded ClickHouse directory per test session (chDB allows one per process), a fresh
database per test, and collectors started in-process on ephemeral loopback ports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest import store
from streamscope_ingest.store import migrations


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture
def storage_dsn(chdb_dir: Path) -> str:
    return f"chdb://{chdb_dir}?database=t_{uuid.uuid4().hex[:12]}"


@pytest.fixture
def store_client(storage_dsn: str):
    client = store.connect(store.parse_dsn(storage_dsn))
    migrations.migrate(client)
    yield client
    client.close()


@pytest.fixture
def collector(storage_dsn: str) -> Iterator[Collector]:
    running = Collector(
        CollectorConfig(
            storage_dsn=storage_dsn,
            http_port=0,
            grpc_port=0,
            max_request_bytes=1024 * 1024,
            store_wait_s=5.0,  # the test reads what it sent as soon as it is answered
        )
    ).start()
    yield running
    running.stop()
