"""Shared fixtures: one embedded ClickHouse directory per test session (chDB allows one per process), a fresh
database per test, and collectors started in-process on ephemeral loopback ports."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from clickhouse_connect.driver.client import Client
from hypothesis import settings

from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest import store
from streamscope_ingest.store import migrations
from tests.migrated_schema import MigratedSchema

# No deadline for any example: a timed assertion fails on a busy machine, not on a slow decoder (benchmarks/ measures).
settings.register_profile("streamscope", deadline=None)
settings.load_profile("streamscope")


@pytest.fixture(scope="session")
def chdb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("chdb")


@pytest.fixture(scope="session", autouse=True)
def chdb_admin(chdb_dir: Path) -> Iterator[Client]:
    """A client on the session's engine that makes and drops the tests' databases, open all session: the engine
    stays up between tests (started again, it reloads every database), and each process's tests find it on the
    same directory whatever ran before (a process opens one; other stores are for subprocesses)."""
    client = store.connect(store.parse_dsn(f"chdb://{chdb_dir}?database=default"), create_database=False)
    yield client
    client.close()


@pytest.fixture
def empty_storage_dsn(chdb_dir: Path, chdb_admin: Client) -> Iterator[str]:
    """A database no migration ran on (it is made on first connection). Dropped after the test: each connection to
    the engine takes longer the more databases it holds (30 ms more per database)."""
    database = f"t_{uuid.uuid4().hex[:12]}"
    yield f"chdb://{chdb_dir}?database={database}"
    chdb_admin.command(f"DROP DATABASE IF EXISTS {database} SYNC")


@pytest.fixture(scope="session")
def migrated_schema(chdb_dir: Path) -> MigratedSchema:
    """Every migration, run once for the session; each test's database gets a copy of what they made."""
    dsn = f"chdb://{chdb_dir}?database=migrated_{uuid.uuid4().hex[:12]}"
    client = store.connect(store.parse_dsn(dsn))
    try:
        migrations.migrate(client)
        return MigratedSchema.of(client)
    finally:
        client.close()


@pytest.fixture
def storage_dsn(empty_storage_dsn: str, migrated_schema: MigratedSchema, chdb_admin: Client) -> str:
    """A database with every migration applied: a copy of the session's migrated one (running the migrations for
    every test would cost seconds each on a busy host). tests/ingest/store/test_migrations.py runs them itself."""
    migrated_schema.copy_to(chdb_admin, store.parse_dsn(empty_storage_dsn).database)
    return empty_storage_dsn


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
