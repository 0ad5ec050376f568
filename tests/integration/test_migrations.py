from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ingest import columns, migrations
from ingest.writer import ClickHouseWriter, table_columns
from streamscope.errors import SchemaMismatch

ROOT = Path(__file__).resolve().parents[2]


def test_migrations_apply_in_order_once(store_client):
    assert migrations.migrate(store_client) == []  # the fixture already applied them all
    versions = [m.version for m in migrations.available()]
    assert versions == sorted(versions) and versions[0] == 1
    recorded = store_client.query("SELECT version FROM schema_migrations FINAL ORDER BY version").result_rows
    assert [v for (v,) in recorded] == versions


def test_tables_match_the_blocks_ingest_builds(store_client):
    for table, schema in columns.TABLES.items():
        assert table_columns(store_client, table) == schema.names
    ClickHouseWriter(store_client)  # checks the same at start and would raise


def test_an_edited_migration_is_refused(store_client, tmp_path):
    for migration in migrations.available():
        shutil.copy(migration.path, tmp_path / migration.path.name)
    first = sorted(tmp_path.iterdir())[0]
    first.write_text(first.read_text() + "\n-- edited\n")
    with pytest.raises(SchemaMismatch, match="changed after it was applied"):
        migrations.migrate(store_client, tmp_path)


def test_misnamed_migration_is_refused(tmp_path):
    (tmp_path / "3_add.sql").write_text("SELECT 1")
    with pytest.raises(SchemaMismatch, match="NNNN_snake_case"):
        migrations.available(tmp_path)


def test_writer_refuses_an_unmigrated_store(storage_dsn):
    from ingest import store

    client = store.connect(store.parse_dsn(storage_dsn))
    try:
        with pytest.raises(SchemaMismatch, match="streamscope migrate"):
            ClickHouseWriter(client)
    finally:
        client.close()


def test_installed_wheel_finds_its_schema_files(tmp_path):
    """`pip install .` (not -e): the wheel carries schema/ and the code finds it there."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("streamscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for migration in migrations.available():
        assert f"streamscope/_schema/migrations/{migration.path.name}" in names
    assert "streamscope/_schema/conventions/streaming.yaml" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import streamscope._internal.schema_files as f, ingest.migrations as m;"
        "print(f.schema_dir()); print(len(m.available()))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    schema_dir, count = result.stdout.split()
    assert schema_dir == str(target / "streamscope" / "_schema")
    assert int(count) == len(migrations.available())
