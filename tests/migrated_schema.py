"""A migrated database's schema, copied to a new database: the tables as the engine reports them, then the views,
then the rows the migrations wrote (their own bookkeeping), so ``migrate`` finds the copy up to date."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

TABLES_SQL = """
SELECT name, engine LIKE '%View' AS is_view, create_table_query, total_rows > 0
FROM system.tables
WHERE database = {database:String} AND NOT is_temporary
ORDER BY is_view, name
"""


@dataclass(frozen=True)
class MigratedSchema:
    database: str
    tables: list[tuple[str, bool, str, bool]]
    """Name, whether a view, its CREATE statement and whether it holds rows: tables before views."""

    @classmethod
    def of(cls, client: Client) -> MigratedSchema:
        database = str(client.database)
        rows = client.query(TABLES_SQL, parameters={"database": database}).result_rows
        return cls(database, [(name, bool(view), create, bool(filled)) for name, view, create, filled in rows])

    def copy_to(self, client: Client, target: str) -> None:
        """Make database ``target`` (through ``client``, on any database of the same engine) a copy."""
        client.command(f"CREATE DATABASE IF NOT EXISTS {target}")
        qualified = re.compile(rf"\b{re.escape(self.database)}\.")
        views = [create for _, view, create, _ in self.tables if view]
        for name, view, create, has_rows in self.tables:
            if view:
                continue
            client.command(qualified.sub(f"{target}.", create))
            if has_rows:
                client.command(f"INSERT INTO {target}.{name} SELECT * FROM {self.database}.{name}")
        while views:  # a view may read another: make each once what it reads is there
            failed: list[tuple[str, Exception]] = []
            for create in views:
                try:
                    client.command(qualified.sub(f"{target}.", create))
                except Exception as exc:
                    failed.append((create, exc))
            if len(failed) == len(views):
                raise RuntimeError(f"views that cannot be made in {target}: {failed}")
            views = [create for create, _ in failed]
