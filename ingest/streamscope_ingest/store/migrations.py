"""Apply the numbered SQL files under ``schema/migrations`` in order, once each.

Applied migrations are recorded in ``schema_migrations`` with a checksum; a file edited after it was applied
is an error (SchemaMismatch), not a silent drift. Every statement is written to be idempotent
(``IF NOT EXISTS``), so a migration cut short by a crash is simply run again. Pending migrations are applied
under a lock (``schema_migrations_lock``), so two collectors starting at once against one server take turns:
a migration that rebuilds a table must not copy its rows twice.

On a cluster (``cluster``: its name in the servers' ``remote_servers``) the same files run as ``store.cluster``
rewrites them, from any one node: the bookkeeping table is replicated to every node, and the lock is a key in
ClickHouse Keeper (a ``KeeperMap`` table), which every node sees at once, as are the attribution lease's claims.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import DatabaseError

from streamscope.errors import SchemaMismatch
from streamscope_ingest import store
from streamscope_ingest.store.cluster import GLOBAL_PATH, ClusterSchema, Statement
from streamscope_ingest.store.lease import claims_table_ddl
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


CLUSTER_READS = {"select_sequential_consistency": 1}
CLUSTER_WRITES = {"insert_quorum": "auto"}
"""The bookkeeping on a cluster: a migration is recorded once most replicas have it, and read as they all agree."""


def _ensure_table(client: Client, cluster: str | None = None) -> None:
    columns = "(version UInt32, name String, checksum String, applied_at DateTime64(3, 'UTC') DEFAULT now64(3))"
    if cluster is None:
        engine, on = "ReplacingMergeTree", ""
    else:
        engine, on = f"ReplicatedReplacingMergeTree({GLOBAL_PATH})", f" ON CLUSTER {cluster}"
    client.command(f"CREATE TABLE IF NOT EXISTS {MIGRATIONS_TABLE}{on} {columns} ENGINE = {engine} ORDER BY version")


def applied(client: Client, cluster: str | None = None) -> dict[int, str]:
    """Version -> checksum of every migration recorded as applied."""
    _ensure_table(client, cluster)
    rows = client.query(
        f"SELECT version, any(checksum) FROM {MIGRATIONS_TABLE} GROUP BY version",
        settings=CLUSTER_READS if cluster else None,
    ).result_rows
    return {int(version): checksum for version, checksum in rows}


def planned(
    migrations: list[Migration], pending: list[Migration], cluster: str | None
) -> list[tuple[Migration, list[Statement]]]:
    """What each pending migration runs: its statements, or on a cluster their rewrite (which reads every
    migration from the first, to know the tables the earlier ones made)."""
    if cluster is None:
        return [(m, [Statement(sql) for sql in m.statements()]) for m in pending]
    schema, wanted = ClusterSchema(cluster), {m.version for m in pending}
    rewritten = [(m, [s for sql in m.statements() for s in schema.rewrite(sql)]) for m in migrations]
    return [(m, statements) for m, statements in rewritten if m.version in wanted]


def cluster_schema(cluster: str, directory: Path | None = None) -> ClusterSchema:
    """The rewriter for ``cluster`` after every migration: it knows the tables they made, to rewrite more."""
    schema = ClusterSchema(cluster)
    for migration in available(directory):
        for sql in migration.statements():
            schema.rewrite(sql)
    return schema


def migrate(
    client: Client, directory: Path | None = None, *, cluster: str | None = None, lock_wait_s: float = LOCK_WAIT_S
) -> list[Migration]:
    """Apply every pending migration in order; return the ones applied now (empty when up to date)."""
    with store.translated_errors():
        if cluster is not None:  # the attribution lease's claims: Keeper's, not a migration's (no data to move)
            client.command(claims_table_ddl(str(client.database), cluster))
        if not _pending(client, directory, cluster):
            return []
        lock = _migration_lock(client, lock_wait_s) if cluster is None else _keeper_lock(client, cluster, lock_wait_s)
        with lock:
            newly = _pending(client, directory, cluster)  # read again: another migrator may have applied some
            for migration, statements in planned(available(directory), newly, cluster):
                for statement in statements:
                    client.command(statement.sql, settings=statement.settings or None)
                client.insert(
                    MIGRATIONS_TABLE,
                    [[migration.version, migration.name, migration.checksum]],
                    column_names=["version", "name", "checksum"],
                    settings=CLUSTER_WRITES if cluster else None,
                )
            return newly


def _pending(client: Client, directory: Path | None, cluster: str | None = None) -> list[Migration]:
    """The migrations not yet applied, in order; an applied one whose file changed since is an error."""
    done = applied(client, cluster)
    pending = []
    for migration in available(directory):
        if migration.version not in done:
            pending.append(migration)
        elif done[migration.version] != migration.checksum:
            raise SchemaMismatch(
                f"migration {migration.path.name} changed after it was applied; add a new migration instead"
            )
    return pending


def _migration_lock(client: Client, wait_s: float, poll_s: float = 0.2) -> AbstractContextManager[None]:
    """The lock: a table only one of several concurrent CREATEs can make. Its comment names the holder."""

    def take(holder: str) -> bool:
        try:
            client.command(
                f"CREATE TABLE {LOCK_TABLE} (holder String) ENGINE = Memory COMMENT %(holder)s",
                parameters={"holder": holder},
            )
            return True
        except DatabaseError as exc:
            if _TABLE_ALREADY_EXISTS not in str(exc):
                raise
            return False

    return _held(
        take,
        lambda: _lock_holder(client),
        lambda: client.command(f"DROP TABLE IF EXISTS {LOCK_TABLE}"),
        f"drop it: DROP TABLE {LOCK_TABLE}",
        wait_s,
        poll_s,
    )


def _keeper_lock(client: Client, cluster: str, wait_s: float, poll_s: float = 0.5) -> AbstractContextManager[None]:
    """The cluster's lock: a key in ClickHouse Keeper that only one insert can make (strict mode refuses a key that
    exists), whichever node each migrator is connected to. Its value names the holder."""
    path = f"/streamscope/{client.database}/{LOCK_TABLE}"
    client.command(
        f"CREATE TABLE IF NOT EXISTS {LOCK_TABLE} ON CLUSTER {cluster} (name String, holder String) "
        f"ENGINE = KeeperMap('{path}') PRIMARY KEY name"
    )

    def holders() -> list[str]:
        return [
            row[0] for row in client.query(f"SELECT holder FROM {LOCK_TABLE} WHERE name = 'migrations'").result_rows
        ]

    def take(holder: str) -> bool:
        try:
            client.command(
                f"INSERT INTO {LOCK_TABLE} SETTINGS keeper_map_strict_mode = 1 VALUES ('migrations', %(holder)s)",
                parameters={"holder": holder},
            )
            return True
        except DatabaseError:
            if not holders():
                raise  # not a lock someone holds: a real error
            return False

    return _held(
        take,
        lambda: ", ".join(holders()) or "released just now",
        lambda: client.command(f"DELETE FROM {LOCK_TABLE} WHERE name = 'migrations'"),
        f"release it: DELETE FROM {LOCK_TABLE} WHERE name = 'migrations'",
        wait_s,
        poll_s,
    )


@contextmanager
def _held(
    take: Callable[[str], bool],
    holder: Callable[[], str],
    release: Callable[[], object],
    how_to_release: str,
    wait_s: float,
    poll_s: float,
) -> Iterator[None]:
    """Hold a lock ``take`` tries to take (naming this process as its holder), waiting up to ``wait_s``."""
    me = f"{socket.gethostname()} pid {os.getpid()} since {datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC"
    deadline = time.monotonic() + wait_s
    while not take(me):
        if time.monotonic() >= deadline:
            raise SchemaMismatch(
                f"waited {wait_s:g} s for {LOCK_TABLE}, held by another migration ({holder()}); "
                f"if no collector or `streamscope migrate` is running, {how_to_release}"
            )
        time.sleep(poll_s)
    try:
        yield
    finally:
        release()


def _lock_holder(client: Client) -> str:
    rows = client.query(
        "SELECT comment FROM system.tables WHERE database = currentDatabase() AND name = {name:String}",
        parameters={"name": LOCK_TABLE},
    ).result_rows
    return rows[0][0] if rows else "released just now"
