"""Apply the numbered SQL files under ``schema/migrations`` in order, once each.

Applied migrations are recorded in ``schema_migrations`` with a checksum; a file edited after it was applied
is an error (SchemaMismatch), not a silent drift. Every statement is written to be idempotent
(``IF NOT EXISTS``), so two collectors starting at once against one server both succeed.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from clickhouse_connect.driver.client import Client

from ingest import store
from streamscope._internal.schema_files import migrations_dir
from streamscope.errors import SchemaMismatch

MIGRATIONS_TABLE = "schema_migrations"
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


def migrate(client: Client, directory: Path | None = None) -> list[Migration]:
    """Apply every pending migration in order; return the ones applied now (empty when up to date)."""
    with store.translated_errors():
        done = applied(client)
        newly: list[Migration] = []
        for migration in available(directory):
            if migration.version in done:
                if done[migration.version] != migration.checksum:
                    raise SchemaMismatch(
                        f"migration {migration.path.name} changed after it was applied; add a new migration instead"
                    )
                continue
            for statement in migration.statements():
                client.command(statement)
            client.insert(
                MIGRATIONS_TABLE,
                [[migration.version, migration.name, migration.checksum]],
                column_names=["version", "name", "checksum"],
            )
            newly.append(migration)
        return newly
