"""Apply the numbered SQL files under ``schema/migrations`` in order, once each.

Applied migrations are recorded in ``schema_migrations`` with a checksum; a file edited after it was applied
is an error (SchemaMismatch), not a silent drift. Every statement is written to be idempotent
(``IF NOT EXISTS``), so a migration cut short by a crash is simply run again. Pending migrations are applied
under a lock (``schema_migrations_lock``), so two collectors starting at once against one server take turns:
a migration that rebuilds a table must not copy its rows twice.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from streamscope.errors import SchemaMismatch
from streamscope_ingest import store
from streamscope_ingest.store.schema_files import migrations_dir

MIGRATIONS_TABLE = "schema_migrations"
LOCK_TABLE = "schema_migrations_lock"
LOCK_WAIT_S = 600.0
"""How long a migrator waits for another to finish; a rebuild of a large table may take minutes."""
_TABLE_ALREADY_EXISTS = "Code: 57."
_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_STATEMENT_END = re.compile(r";\s*(?:\n|$)")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.path.read_bytes()).hexdigest()

    def statements(self) -> list[str]:
        """The file's statements, comment lines dropped."""
        body = "\n".join(line for line in self.sql.splitlines() if not line.lstrip().startswith("--"))
        return [s.strip() for s in _STATEMENT_END.split(body) if s.strip()]


def available(directory: Path | None = None) -> list[Migration]:
    """All migration files, ordered by version; a misnamed or duplicated file is an error."""
    found: dict[int, Migration] = {}
    for path in sorted((directory or migrations_dir()).iterdir()):
        if path.suffix != ".sql":
            continue
        match = _FILE_NAME.match(path.name)
        if not match:
            raise SchemaMismatch(f"migration file {path.name!r} is not named NNNN_snake_case.sql")
        version = int(match.group(1))
        if version in found:
            raise SchemaMismatch(f"two migrations share version {version}: {found[version].path.name}, {path.name}")
        found[version] = Migration(version, match.group(2), path)
    return [found[v] for v in sorted(found)]


def _ensure_table(client: Client) -> None:
    client.command(
        f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE} "
        "(version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) "
        "ENGINE = ReplacingMergeTree ORDER BY version"
    )


def applied(client: Client) -> dict[int, str]:
    """Version -> checksum of every migration recorded as applied."""
    _ensure_table(client)
    rows = client.query(f"SELECT version, any(checksum) FROM {MIGRATIONS_TABLE} GROUP BY version").result_rows
    return {int(version): checksum for version, checksum in rows}


def migrate(client: Client, directory: Path | None = None, *, lock_wait_s: float = LOCK_WAIT_S) -> list[Migration]:
    """Apply every pending migration in order; return the ones applied now (empty when up to date)."""
    with store.translated_errors():
        if not _pending(client, directory):
            return []
        with _migration_lock(client, lock_wait_s):
            newly = _pending(client, directory)  # read again: another migrator may have applied some meanwhile
            for migration in newly:
                for statement in migration.statements():
                    client.command(statement)
                client.insert(
                    MIGRATIONS_TABLE,
                    [[migration.version, migration.name, migration.checksum]],
                    column_names=["version", "name", "checksum"],
                )
            return newly


def _pending(client: Client, directory: Path | None) -> list[Migration]:
    """The migrations not yet applied, in order; an applied one whose file changed since is an error."""
    done = applied(client)
    pending = []
    for migration in available(directory):
        if migration.version not in done:
            pending.append(migration)
        elif done[migration.version] != migration.checksum:
            raise SchemaMismatch(
                f"migration {migration.path.name} changed after it was applied; add a new migration instead"
            )
    return pending


@contextmanager
def _migration_lock(client: Client, wait_s: float, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the lock: a table only one of several concurrent CREATEs can make. Its comment names the holder."""
    holder = f"{socket.gethostname()} pid {os.getpid()} since {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    deadline = time.monotonic() + wait_s
    while True:
        try:
            client.command(
                f"CREATE TABLE {LOCK_TABLE} (holder String) ENGINE = Memory COMMENT %(holder)s",
                parameters={"holder": holder},
            )
            break
        except DatabaseError as exc:
            if _TABLE_ALREADY_EXISTS not in str(exc):
                raise
        if time.monotonic() >= deadline:
            raise SchemaMismatch(
                f"waited {wait_s:g} s for {LOCK_TABLE}, held by another migration ({_lock_holder(client)}); "
                f"if no collector or `streamscope migrate` is running, drop it: DROP TABLE {LOCK_TABLE}"
            )
        time.sleep(poll_s)
    try:
        yield
    finally:
        client.command(f"DROP TABLE IF EXISTS {LOCK_TABLE}")


def _lock_holder(client: Client) -> str:
    rows = client.query(
        "SELECT comment FROM system.tables WHERE database = currentDatabase() AND name = {name:String}",
        parameters={"name": LOCK_TABLE},
    ).result_rows
    return rows[0][0] if rows else "released just now"
