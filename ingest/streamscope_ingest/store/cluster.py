"""The migrations as a ClickHouse cluster runs them: replicated tables behind distributed ones, every statement
``ON CLUSTER``.

One source of truth: each statement of ``schema/migrations`` is rewritten here, never written twice. A table ``T``
becomes, on every node:

- ``T_local``: a ``Replicated*MergeTree`` whose Keeper path is named by the table's UUID (``ON CLUSTER`` gives every
  replica the same one), so a rebuild's ``EXCHANGE TABLES`` keeps each path with its data, and a rebuild's
  temporary table never meets an old path;
- ``T``: a ``Distributed`` table over ``T_local`` that collectors insert into and dashboards read from, sharded by
  the trace id where the table has one (``TRACE_KEYS``: a stream's client, server and browser spans, its chunks, its
  stalls and its ground truth on one shard, so per-trace joins stay on the shard, with
  ``distributed_product_mode = 'local'``), else by its sorting key, so a block sent again goes to the shard it went
  to before, where its insert deduplication token is known.

Views are created on every node and read the distributed tables. Settings the single node needs for
deduplication of unreplicated tables become the replicated ones. A statement with no known cluster form is an
error (``ClusterFormMissing``), not a guess: a new kind of migration statement gets its rule here, with a test.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

LOCAL_SUFFIX = "_local"
REPLICA_PATH = "'/clickhouse/tables/{uuid}/{shard}', '{replica}'"
"""Keeper path and replica name of a sharded table: ClickHouse's own default (``default_replica_path``), spelled
out so the migrations do not depend on the server's configuration."""
GLOBAL_PATH = "'/clickhouse/tables/{database}/{table}', '{shard}-{replica}'"
"""Keeper path of a table every node holds whole (the migrations' own bookkeeping): one path for the cluster,
every node a replica of it."""
TRACE_KEYS = {"trace_id_bytes": "cityHash64(trace_id_bytes)", "trace_id": "cityHash64(unhex(trace_id))"}
"""Sharding by the trace: the same hash of the 16 bytes whether a table keeps them raw or as hex."""
INSERT_SETTINGS: dict[str, Any] = {"distributed_foreground_insert": 1, "distributed_product_mode": "local"}
"""How a migration's ``INSERT … SELECT`` runs: acknowledged once every shard has its rows, with joins per shard."""

_NAME = r"`?(\w+)`?"
_CREATE_TABLE = re.compile(
    rf"^CREATE TABLE (IF NOT EXISTS )?{_NAME}\s*\((.*)\)\s*ENGINE\s*=\s*(\w*MergeTree)\b(.*)$", re.S
)
_CREATE_TABLE_AS = re.compile(rf"^CREATE TABLE (IF NOT EXISTS )?{_NAME}\s+AS\s+{_NAME}\s*$", re.S)
_CREATE_VIEW = re.compile(rf"^CREATE (OR REPLACE )?VIEW (IF NOT EXISTS )?{_NAME}\s+(AS\s.*)$", re.S)
_ALTER = re.compile(rf"^ALTER TABLE {_NAME}\s+(.*)$", re.S)
_ADDED_TO_ORDER = re.compile(r",\s*MODIFY ORDER BY\s+(.*)$", re.S | re.I)
"""``ADD COLUMN …, MODIFY ORDER BY (…)``: the new sorting key, which may end in only the columns added with it."""
_DEDUPLICATION = re.compile(r"\bnon_replicated_deduplication_window\b")
_TRUNCATE = re.compile(rf"^TRUNCATE TABLE (IF EXISTS )?{_NAME}\s*$")
_EXCHANGE = re.compile(rf"^EXCHANGE TABLES {_NAME} AND {_NAME}\s*$")
_DROP = re.compile(rf"^DROP TABLE (IF EXISTS )?{_NAME}\s*$")
_ORDER_BY = re.compile(r"\bORDER BY\s+(\(.*?\)|[\w.]+)(?=\s+(?:PRIMARY KEY|SAMPLE BY|TTL|SETTINGS)\b|\s*$)", re.S)
_ENGINE_ARGS = re.compile(r"^\s*\((.*?)\)", re.S)


class ClusterFormMissing(ValueError):
    """A migration statement this module does not know how to run on a cluster."""


@dataclass(frozen=True)
class Statement:
    sql: str
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass
class _Table:
    engine: str
    """``Replicated…MergeTree(path, replica[, args]) PARTITION BY … ORDER BY …``, without its settings."""
    shard_key: str
    settings: dict[str, str] = field(default_factory=dict)

    def engine_clause(self) -> str:
        settings = ", ".join(f"{name} = {value}" for name, value in self.settings.items())
        return f"{self.engine} SETTINGS {settings}" if settings else self.engine


@dataclass
class ClusterSchema:
    """Rewrites migration statements, in order, for ``cluster``; remembers the tables they made."""

    cluster: str
    tables: dict[str, _Table] = field(default_factory=dict)

    def rewrite_all(self, statements: Iterable[str]) -> Iterator[Statement]:
        for statement in statements:
            yield from self.rewrite(statement)

    def rewrite(self, statement: str) -> list[Statement]:
        sql = statement.strip().rstrip(";").strip()
        head = " ".join(sql.split()[:3]).upper()
        if head.startswith("CREATE TABLE"):
            return self._create_table(sql)
        if head.startswith(("CREATE VIEW", "CREATE OR REPLACE")):
            return self._create_view(sql)
        if head.startswith("ALTER TABLE"):
            return self._alter(sql)
        if head.startswith("INSERT INTO"):
            return [Statement(sql, dict(INSERT_SETTINGS))]
        if head.startswith("TRUNCATE TABLE"):
            return self._truncate(sql)
        if head.startswith("EXCHANGE TABLES"):
            return self._exchange(sql)
        if head.startswith("DROP TABLE"):
            return self._drop(sql)
        raise ClusterFormMissing(f"no cluster form for: {sql[:80]}")

    def _on(self) -> str:
        return f"ON CLUSTER {self.cluster}"

    def _distributed(self, name: str, *, replace: bool = False) -> Statement:
        create = "CREATE OR REPLACE TABLE" if replace else "CREATE TABLE IF NOT EXISTS"
        local = name + LOCAL_SUFFIX
        engine = f"Distributed({self.cluster}, currentDatabase(), {local}, {self.tables[name].shard_key})"
        return Statement(f"{create} {name} {self._on()} AS {local} ENGINE = {engine}")

    def _create_table(self, sql: str) -> list[Statement]:
        if match := _CREATE_TABLE_AS.match(sql):
            if_not_exists, name, source = match.groups()
            like = self._known(source)
            self.tables[name] = _Table(like.engine, like.shard_key, dict(like.settings))
            local = f"CREATE TABLE {if_not_exists or ''}{name}{LOCAL_SUFFIX} {self._on()} AS {source}{LOCAL_SUFFIX}"
            return [Statement(f"{local} ENGINE = {self.tables[name].engine_clause()}"), self._distributed(name)]
        match = _CREATE_TABLE.match(sql)
        if match is None:
            raise ClusterFormMissing(f"no cluster form for: {sql[:80]}")
        if_not_exists, name, columns, engine, rest = match.groups()
        args = _ENGINE_ARGS.match(rest)
        own_args = f", {args.group(1)}" if args and args.group(1).strip() else ""
        clause, settings = _settings(rest[args.end() :] if args else rest)
        table = _Table(f"Replicated{engine}({REPLICA_PATH}{own_args}){clause}", _shard_key(columns, clause), settings)
        self.tables[name] = table
        local = f"CREATE TABLE {if_not_exists or ''}{name}{LOCAL_SUFFIX} {self._on()} ({columns}) ENGINE = "
        return [Statement(local + table.engine_clause()), self._distributed(name)]

    def _create_view(self, sql: str) -> list[Statement]:
        match = _CREATE_VIEW.match(sql)
        if match is None:
            raise ClusterFormMissing(f"no cluster form for: {sql[:80]}")
        or_replace, if_not_exists, name, body = match.groups()
        return [Statement(f"CREATE {or_replace or ''}VIEW {if_not_exists or ''}{name} {self._on()} {body}")]

    def _alter(self, sql: str) -> list[Statement]:
        match = _ALTER.match(sql)
        assert match is not None
        name, action = match.groups()
        table = self._known(name)
        local = f"ALTER TABLE {name}{LOCAL_SUFFIX} {self._on()}"
        verb = " ".join(action.split()[:2]).upper()
        if verb == "MODIFY SETTING":
            _, settings = _settings(" SETTINGS " + action.split(None, 2)[2])
            table.settings.update(settings)
            listed = ", ".join(f"{setting} = {value}" for setting, value in settings.items())
            return [Statement(f"{local} MODIFY SETTING {listed}")]
        if verb in ("MODIFY TTL", "REMOVE TTL"):  # rows expire where they are stored
            return [Statement(f"{local} {action}")]
        if verb == "ADD COLUMN" and (order := _ADDED_TO_ORDER.search(action)):
            # a column added to the sorting key: the local table's key, the distributed table's column
            table.engine = _ORDER_BY.sub(lambda _: f"ORDER BY {order.group(1).strip()}", table.engine, count=1)
            added = action[: order.start()]
            return [Statement(f"{local} {action}"), Statement(f"ALTER TABLE {name} {self._on()} {added}")]
        if verb in ("ADD COLUMN", "MODIFY COLUMN", "DROP COLUMN", "RENAME COLUMN", "COMMENT COLUMN"):
            # the distributed table carries the columns too (it reads the local ones by name)
            return [Statement(f"{local} {action}"), Statement(f"ALTER TABLE {name} {self._on()} {action}")]
        raise ClusterFormMissing(f"no cluster form for: {sql[:80]}")

    def _truncate(self, sql: str) -> list[Statement]:
        match = _TRUNCATE.match(sql)
        assert match is not None
        if_exists, name = match.groups()
        self._known(name)
        return [Statement(f"TRUNCATE TABLE {if_exists or ''}{name}{LOCAL_SUFFIX} {self._on()}")]

    def _exchange(self, sql: str) -> list[Statement]:
        """The local tables swap (each keeps its Keeper path); each distributed table is made again over the local
        table of its name, with that table's columns and sharding."""
        match = _EXCHANGE.match(sql)
        if match is None:
            raise ClusterFormMissing(f"no cluster form for: {sql[:80]}")
        a, b = match.groups()
        self.tables[a], self.tables[b] = self._known(b), self._known(a)
        return [
            Statement(f"EXCHANGE TABLES {a}{LOCAL_SUFFIX} AND {b}{LOCAL_SUFFIX} {self._on()}"),
            self._distributed(a, replace=True),
            self._distributed(b, replace=True),
        ]

    def _drop(self, sql: str) -> list[Statement]:
        match = _DROP.match(sql)
        assert match is not None
        _, name = match.groups()
        self.tables.pop(name, None)
        # both, whatever this migration knows of them: a rebuild cut short leaves its local table behind
        return [
            Statement(f"DROP TABLE IF EXISTS {name} {self._on()} SYNC"),
            Statement(f"DROP TABLE IF EXISTS {name}{LOCAL_SUFFIX} {self._on()} SYNC"),
        ]

    def _known(self, name: str) -> _Table:
        if name not in self.tables:
            raise ClusterFormMissing(f"table {name} was not made by an earlier migration")
        return self.tables[name]


def _settings(clause: str) -> tuple[str, dict[str, str]]:
    """An engine clause without its trailing ``SETTINGS``, and those settings (deduplication as replicated)."""
    head, *listed = re.split(r"\s+SETTINGS\s+", clause, maxsplit=1)
    settings = {}
    for item in filter(None, (part.strip() for part in "".join(listed).split(","))):
        name, _, value = (piece.strip() for piece in item.partition("="))
        settings[_DEDUPLICATION.sub("replicated_deduplication_window", name)] = value
    return head, settings


def _shard_key(columns: str, clause: str) -> str:
    for column, key in TRACE_KEYS.items():
        if re.search(rf"^\s*`?{column}`?\s+(?:String|FixedString)", columns, re.M) and not re.search(
            rf"^\s*`?{column}`?\s+\w+(?:\(\d+\))?\s+(?:ALIAS|MATERIALIZED|EPHEMERAL)\b", columns, re.M
        ):
            return key
    order_by = _ORDER_BY.search(clause)
    if order_by is None:
        raise ClusterFormMissing("a table without a trace id or a sorting key to shard it by")
    return f"cityHash64({order_by.group(1).strip()})"
