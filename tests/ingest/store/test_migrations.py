from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from streamscope.errors import SchemaMismatch
from streamscope_ingest.blocks import columns
from streamscope_ingest.store import migrations
from streamscope_ingest.store.writer import ClickHouseWriter, table_columns

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def storage_dsn(empty_storage_dsn: str) -> str:
    """A database no migration ran on: these tests run them."""
    return empty_storage_dsn


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
    from streamscope_ingest import store

    client = store.connect(store.parse_dsn(storage_dsn))
    try:
        with pytest.raises(SchemaMismatch, match="streamscope migrate"):
            ClickHouseWriter(client)
    finally:
        client.close()


def test_installed_wheel_finds_its_schema_files(tmp_path):
    """`pip install ./ingest` (not -e): the wheel carries schema/ and the code finds it there."""
    subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"),
            *("-w", str(tmp_path), str(ROOT / "ingest")),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("streamscope_ingest-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for migration in migrations.available():
        assert f"streamscope_ingest/_schema/migrations/{migration.path.name}" in names
    assert "streamscope_ingest/_schema/conventions/streaming.yaml" in names
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
    )
    probe = (
        "import streamscope_ingest.store.schema_files as f, streamscope_ingest.store.migrations as m;"
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
    assert schema_dir == str(target / "streamscope_ingest" / "_schema")
    assert int(count) == len(migrations.available())


REBUILD = 17
"""0017 rebuilds chunks with the ids as bytes."""
FROM_REBUILD = [m.version for m in migrations.available() if m.version >= REBUILD]
"""What a store before the rebuild is migrated by: the rebuild and every later migration."""
OLD_CHUNKS = [
    (f"{trace:032x}", f"{span:016x}", seq, gap)
    for trace, span in ((0xA1, 0xB1), (0xA1, 0xB2), (0xFF << 120, 0xC3))
    for seq, gap in enumerate((300_000, 20_000, 25_000))
]


def store_before(version: int, storage_dsn: str, tmp_path: Path):
    """A client on a store migrated up to, not including, ``version``."""
    earlier = tmp_path / f"before_{version}"
    earlier.mkdir()
    for migration in migrations.available():
        if migration.version < version:
            shutil.copy(migration.path, earlier / migration.path.name)
    from streamscope_ingest import store

    client = store.connect(store.parse_dsn(storage_dsn))
    migrations.migrate(client, earlier)
    return client


def statements_of(version: int) -> list[str]:
    (migration,) = [m for m in migrations.available() if m.version == version]
    return migration.statements()


@pytest.fixture
def before_rebuild(storage_dsn, tmp_path):
    """A store at the migration before the rebuild, holding chunks with hex ids; the later files apart."""
    client = store_before(REBUILD, storage_dsn, tmp_path)
    client.command(
        "INSERT INTO chunks (tenant, start_time, trace_id, span_id, service, side, provider, model, seq, kind, gap_us, "
        "tokens, content_bytes, wire_bytes) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', '{trace}', '{span}', 'app', 'client', 'openai', 'm', {seq}, "
            f"{'first' if seq == 0 else 'content'!r}, {gap}, 1, 4, 60)"
            for trace, span, seq, gap in OLD_CHUNKS
        )
    )
    yield client
    client.close()


def assert_old_chunks_timeline(client) -> None:
    """chunk_timeline gives OLD_CHUNKS' offsets, each stream's gaps summed in seq order."""
    timeline = client.query(
        "SELECT span_id, groupArray(offset_us) FROM (SELECT * FROM chunk_timeline ORDER BY seq) "
        "GROUP BY span_id ORDER BY span_id"
    ).result_rows
    assert timeline == [(f"{s:016x}", [300_000, 320_000, 345_000]) for s in (0xB1, 0xB2, 0xC3)]


def stored_chunks(client) -> list[tuple]:
    return client.query("SELECT trace_id, span_id, seq, gap_us FROM chunks ORDER BY trace_id, span_id, seq").result_rows


@pytest.mark.parametrize("done", range(len(statements_of(REBUILD))))
def test_rebuilding_chunks_keeps_every_row_even_when_run_again_after_a_crash(before_rebuild, done):
    """The rebuild is cut short after ``done`` of its statements (a crash), then migrate runs it whole."""
    for statement in statements_of(REBUILD)[:done]:
        before_rebuild.command(statement)
    assert [m.version for m in migrations.migrate(before_rebuild)] == FROM_REBUILD
    assert stored_chunks(before_rebuild) == sorted(OLD_CHUNKS)
    (types,) = before_rebuild.query(
        "SELECT groupArray((name, type)) FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'chunks' AND name LIKE '%\\_id%'"
    ).result_rows[0]
    assert dict(types) == {
        "trace_id_bytes": "FixedString(16)",
        "span_id_bytes": "FixedString(8)",
        "trace_id": "String",
        "span_id": "String",
    }
    assert_old_chunks_timeline(before_rebuild)


ARRAYS = 20
"""0020 copies the rows of chunks into chunk_arrays, one row a stream; 0021 makes chunks a view of it."""


@pytest.fixture
def before_arrays(storage_dsn, tmp_path):
    """A store at the migration before chunk_arrays, holding chunk rows (ids as bytes)."""
    client = store_before(ARRAYS, storage_dsn, tmp_path)
    client.command(
        "INSERT INTO chunks (tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model, seq, "
        "kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', unhex('{trace}'), unhex('{span}'), 'app', 'client', 'openai', 'm', "
            f"{seq}, {'first' if seq == 0 else 'content'!r}, {gap}, {seq + 1}, 4, 60, {seq}, {2 * seq})"
            for trace, span, seq, gap in reversed(OLD_CHUNKS)  # out of order: the copy orders by seq
        )
    )
    yield client
    client.close()


ARRAYS_STATEMENTS = [s for version in (ARRAYS, ARRAYS + 1) for s in statements_of(version)]


@pytest.mark.parametrize("done", range(len(ARRAYS_STATEMENTS)))
def test_chunk_rows_become_arrays_and_read_the_same_even_when_run_again_after_a_crash(before_arrays, done):
    """The two migrations are cut short after ``done`` of their statements, 0020 recorded as applied once all of
    its statements ran, then migrate runs what is left."""
    for statement in ARRAYS_STATEMENTS[:done]:
        before_arrays.command(statement)
    if done >= len(statements_of(ARRAYS)):
        (migration,) = [m for m in migrations.available() if m.version == ARRAYS]
        before_arrays.insert(
            migrations.MIGRATIONS_TABLE,
            [[migration.version, migration.name, migration.checksum]],
            column_names=["version", "name", "checksum"],
        )
    migrations.migrate(before_arrays)
    rows = before_arrays.query(
        "SELECT trace_id, span_id, seq, kind, gap_us, tokens, paint_delay_us, render_us FROM chunks "
        "ORDER BY trace_id, span_id, seq"
    ).result_rows
    assert rows == [
        (trace, span, seq, "first" if seq == 0 else "content", gap, seq + 1, seq, 2 * seq)
        for trace, span, seq, gap in sorted(OLD_CHUNKS)
    ]
    assert before_arrays.query("SELECT count() FROM chunk_arrays").result_rows[0][0] == 3  # one row a stream
    (settings,) = before_arrays.query(
        "SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = 'chunk_arrays'"
    ).result_rows[0]
    assert "non_replicated_deduplication_window = 10000" in settings
    assert_old_chunks_timeline(before_arrays)


COUNTS = 19
"""0019 rebuilds streams with each stream's content chunks counted by token count, from its chunks."""
STREAMS_BEFORE_COUNTS = {  # span id -> the tokens of its chunks, in order, and their kinds
    0xB1: [(0, "lead"), (2, "first"), (2, "content"), (5, "content"), (0, "aside")],
    0xB2: [(1, "first"), (1, "content"), (1, "content")],
    0xC300: [(0, "lead"), (0, "aside")],  # no content; an id whose last byte is zero
    0xD400: [(7, "first"), (3, "content"), (7, "content")],
}


@pytest.fixture
def before_counts(storage_dsn, tmp_path):
    """A store at the migration before the counts, holding streams and their chunks."""
    client = store_before(COUNTS, storage_dsn, tmp_path)
    client.command(
        "INSERT INTO streams (tenant, start_time, trace_id, span_id, service, side, tokens, content_chunks) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', '{0xA1:032x}', '{span:016x}', 'app', 'client', "
            f"{sum(t for t, _ in chunks)}, {sum(k in ('first', 'content') for _, k in chunks)})"
            for span, chunks in STREAMS_BEFORE_COUNTS.items()
        )
    )
    client.command(
        "INSERT INTO chunks (tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model, seq, "
        "kind, gap_us, tokens, content_bytes, wire_bytes) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', unhex('{0xA1:032x}'), unhex('{span:016x}'), 'app', 'client', "
            f"'openai', 'm', {seq}, '{kind}', 1000, {tokens}, {int(kind in ('first', 'content'))}, 60)"
            for span, chunks in STREAMS_BEFORE_COUNTS.items()
            for seq, (tokens, kind) in enumerate(chunks)
        )
    )
    yield client
    client.close()


@pytest.mark.parametrize("done", range(len(statements_of(COUNTS))))
def test_streams_stored_before_the_counts_get_them_from_their_chunks_even_after_a_crash(before_counts, done):
    """The rebuild of streams is cut short after ``done`` of its statements, then migrate runs it whole."""
    ingested = before_counts.query("SELECT span_id, ingested_at FROM streams ORDER BY span_id").result_rows
    for statement in statements_of(COUNTS)[:done]:
        before_counts.command(statement)
    assert [m.version for m in migrations.migrate(before_counts)] == [
        m.version for m in migrations.available() if m.version >= COUNTS
    ]
    rows = before_counts.query(
        "SELECT span_id, tokens, content_chunks_by_tokens FROM stream_metrics ORDER BY span_id"
    ).result_rows
    assert rows == [
        (
            f"{span:016x}",
            sum(t for t, _ in chunks),
            dict(sorted(Counter(t for t, k in chunks if k in ("first", "content")).items())),
        )
        for span, chunks in sorted(STREAMS_BEFORE_COUNTS.items())
    ]
    assert before_counts.query("SELECT span_id, ingested_at FROM streams ORDER BY span_id").result_rows == ingested
    (settings,) = before_counts.query(
        "SELECT create_table_query FROM system.tables WHERE database = currentDatabase() AND name = 'streams'"
    ).result_rows[0]
    assert "non_replicated_deduplication_window = 10000" in settings
    assert table_columns(before_counts, "streams") == columns.STREAMS.names


def test_two_migrators_at_once_rebuild_chunks_once(before_rebuild, storage_dsn):
    from streamscope_ingest import store

    clients = [before_rebuild, store.connect(store.parse_dsn(storage_dsn))]
    results: list[object] = [None, None]

    def run(index: int) -> None:
        try:
            results[index] = [m.version for m in migrations.migrate(clients[index])]
        except Exception as exc:  # reported below
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results, key=len) == [[], FROM_REBUILD]  # one applied them, the other found them applied
    assert stored_chunks(before_rebuild) == sorted(OLD_CHUNKS)
    clients[1].close()


@pytest.fixture
def later(tmp_path) -> Path:
    """Every migration, and one more (9000) that the store has not had yet."""
    directory = tmp_path / "later"
    directory.mkdir()
    for migration in migrations.available():
        shutil.copy(migration.path, directory / migration.path.name)
    (directory / "9000_probe.sql").write_text("CREATE TABLE IF NOT EXISTS probe (x UInt8) ENGINE = Memory;\n")
    return directory


def test_a_migrator_waits_for_the_lock_then_applies_what_is_left(store_client, later):
    store_client.command(f"CREATE TABLE {migrations.LOCK_TABLE} (holder String) ENGINE = Memory")
    applied: list[list[int]] = []
    waiting = threading.Thread(
        target=lambda: applied.append([m.version for m in migrations.migrate(store_client, later, lock_wait_s=30)])
    )
    waiting.start()
    waiting.join(timeout=1.0)
    assert waiting.is_alive() and not applied  # held off by the lock
    store_client.command(f"DROP TABLE {migrations.LOCK_TABLE}")
    waiting.join(timeout=30)
    assert applied == [[9000]]
    assert not store_client.query(f"EXISTS TABLE {migrations.LOCK_TABLE}").result_rows[0][0]


def test_a_lock_left_behind_is_reported_with_its_holder_and_the_way_out(store_client, later):
    store_client.command(
        f"CREATE TABLE {migrations.LOCK_TABLE} (holder String) ENGINE = Memory COMMENT 'node-7 pid 41 since noon'"
    )
    with pytest.raises(SchemaMismatch, match=r"held by another migration \(node-7 pid 41 since noon\).*DROP TABLE"):
        migrations.migrate(store_client, later, lock_wait_s=0.3)
    assert not store_client.query("EXISTS TABLE probe").result_rows[0][0]


HOST_DELAY = 22
"""0022 adds chunk_arrays.host_delay_us (zeros by default, one a chunk), streams.host_watch, and the views again."""


@pytest.fixture
def before_host_delay(storage_dsn, tmp_path):
    """A store at the migration before host delays, holding streams and their chunk arrays."""
    client = store_before(HOST_DELAY, storage_dsn, tmp_path)
    client.command(
        "INSERT INTO chunk_arrays (tenant, start_time, trace_id_bytes, span_id_bytes, service, side, provider, model, "
        "kind, gap_us, tokens, content_bytes, wire_bytes, paint_delay_us, render_us) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', unhex('{0xA1:032x}'), unhex('{span:016x}'), 'app', 'client', "
            f"'openai', 'm', {['first'] + ['content'] * (n - 1)}, {[1000] * n}, {[1] * n}, {[4] * n}, {[60] * n}, "
            f"{[0] * n}, {[0] * n})"
            for span, n in ((0xB1, 3), (0xB2, 1))
        )
    )
    client.command(
        "INSERT INTO streams (tenant, start_time, trace_id, span_id, service, side, tokens, content_chunks) VALUES "
        + ", ".join(
            f"('default', '2026-11-01 10:00:00', '{0xA1:032x}', '{span:016x}', 'app', 'client', {n}, {n})"
            for span, n in ((0xB1, 3), (0xB2, 1))
        )
    )
    yield client
    client.close()


@pytest.mark.parametrize("done", range(len(statements_of(HOST_DELAY))))
def test_chunks_stored_before_host_delays_read_zeros_even_after_a_crash(before_host_delay, done):
    """0022 is cut short after ``done`` of its statements, then migrate runs it whole; the rows stored before it
    read as not measured (zeros, one a chunk) through every view, and new rows carry their delays."""
    for statement in statements_of(HOST_DELAY)[:done]:
        before_host_delay.command(statement)
    assert [m.version for m in migrations.migrate(before_host_delay)] == [
        m.version for m in migrations.available() if m.version >= HOST_DELAY
    ]
    rows = before_host_delay.query(
        "SELECT span_id, groupArray(host_delay_us), groupArray(offset_us) "
        "FROM (SELECT * FROM chunk_timeline ORDER BY seq) GROUP BY span_id ORDER BY span_id"
    ).result_rows
    assert rows == [(f"{0xB1:016x}", [0, 0, 0], [1000, 2000, 3000]), (f"{0xB2:016x}", [0], [1000])]
    arrays = before_host_delay.query("SELECT host_delay_us FROM chunk_arrays ORDER BY span_id_bytes").result_rows
    assert arrays == [([],), ([],)]  # nothing stored for them (migration 0036): the views read zeros
    assert before_host_delay.query("SELECT DISTINCT host_watch FROM streams").result_rows == [("",)]
    assert table_columns(before_host_delay, "streams") == columns.STREAMS.names
    assert table_columns(before_host_delay, "chunk_arrays") == columns.CHUNKS.names  # host_delay_us has a default
    (chunk_arrays_columns,) = before_host_delay.query(
        "SELECT groupArray(name) FROM (SELECT name FROM system.columns "
        "WHERE database = currentDatabase() AND table = 'chunk_arrays' ORDER BY position)"
    ).result_rows[0]
    assert chunk_arrays_columns == columns.CHUNKS_DECODED.names
    views = before_host_delay.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'View' ORDER BY name"
    ).result_rows
    assert [name for (name,) in views] == [
        "cancellations",
        "chunk_timeline",
        "chunks",
        "genai_metric_intervals",
        "stream_metrics",
    ]
    for (name,) in views:  # each view still reads what is stored
        before_host_delay.query(f"SELECT count() FROM (SELECT * FROM {name})")


COVERAGE = 23
"""0023 adds streams.source and streams.coverage (defaults from what such rows were) and stream_metrics again."""


@pytest.mark.parametrize("done", range(len(statements_of(COVERAGE))))
def test_streams_stored_before_coverage_read_as_the_sdk_full_or_partial_even_after_a_crash(storage_dsn, tmp_path, done):
    """Rows stored before 0023 came from streamscope's own convention: a truncated timeline reads as partial, the
    rest as full, through the table and stream_metrics; rows written after carry what decode says."""
    client = store_before(COVERAGE, storage_dsn, tmp_path)
    client.command(
        "INSERT INTO streams (tenant, start_time, trace_id, span_id, service, side, timeline_truncated) VALUES "
        f"('default', '2026-11-01 10:00:00', '{0xA1:032x}', '{0xB1:016x}', 'app', 'client', false), "
        f"('default', '2026-11-01 10:00:00', '{0xA1:032x}', '{0xB2:016x}', 'app', 'client', true)"
    )
    for statement in statements_of(COVERAGE)[:done]:
        client.command(statement)
    assert [m.version for m in migrations.migrate(client)] == [
        m.version for m in migrations.available() if m.version >= COVERAGE
    ]
    expected = [(f"{0xB1:016x}", "streamscope", "full"), (f"{0xB2:016x}", "streamscope", "partial")]
    for table in ("streams", "stream_metrics"):
        assert client.query(f"SELECT span_id, source, coverage FROM {table} ORDER BY span_id").result_rows == expected
    assert table_columns(client, "streams") == columns.STREAMS.names  # source and coverage have defaults
    client.close()
