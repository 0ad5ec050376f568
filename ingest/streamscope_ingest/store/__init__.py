"""Open the store named by a DSN through clickhouse-connect, and translate driver errors.

``chdb:///abs/path[?database=name]`` runs the embedded engine in this process (one process per directory);
``clickhouse://user:pass@host:8123/db`` (``clickhouses://`` for TLS) talks to a server. Both are the same
ClickHouse engine behind the same client API, so nothing above this module knows which one it has.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, DataError, OperationalError, StreamCompleteException

from streamscope.errors import ConfigError, RetryableWriteError, SchemaMismatch, WriteError

DEFAULT_DATABASE = "streamscope"
_DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Driver exceptions that mean "the store is not reachable right now": the same call may succeed later.
# OperationalError covers connection failures, timeouts and broken streams (StreamFailureError).
RETRYABLE_DRIVER_ERRORS: tuple[type[Exception], ...] = (OperationalError,)
# Every other driver exception means the store refused the request as given...
PERMANENT_DRIVER_ERRORS: tuple[type[Exception], ...] = (ClickHouseError, StreamCompleteException)
# ...except these ClickHouse error codes, which say the server is overloaded, briefly unable, or failing on its own
# disks, not that the request is wrong: the same call succeeds once merges, memory, replicas or disks recover.
RETRYABLE_SERVER_CODES = {
    74: "CANNOT_READ_FROM_FILE_DESCRIPTOR",
    75: "CANNOT_WRITE_TO_FILE_DESCRIPTOR",
    76: "CANNOT_OPEN_FILE",
    159: "TIMEOUT_EXCEEDED",
    202: "TOO_MANY_SIMULTANEOUS_QUERIES",
    209: "SOCKET_TIMEOUT",
    210: "NETWORK_ERROR",
    241: "MEMORY_LIMIT_EXCEEDED",
    242: "TABLE_IS_READ_ONLY",
    243: "NOT_ENOUGH_SPACE",
    252: "TOO_MANY_PARTS",
    319: "UNKNOWN_STATUS_OF_INSERT",
    425: "SYSTEM_ERROR",
    999: "KEEPER_EXCEPTION",
    1000: "POCO_EXCEPTION",
    1001: "STD_EXCEPTION",  # std::filesystem errors: a read-only or failing disk
}
# The writer's inserts (and the lookups they need) go further: a failure is the store's unless it says the data
# is wrong. A table or grant missing, a disk full or read-only: all heal without the rows changing, and the rows the
# collector acknowledged wait in its spool meanwhile (the writer still quarantines a batch that fails alone while
# the store takes other data). These codes name the data:
BATCH_FAULT_CODES = {
    6: "CANNOT_PARSE_TEXT",
    26: "CANNOT_PARSE_QUOTED_STRING",
    27: "CANNOT_PARSE_INPUT_ASSERTION_FAILED",
    32: "ATTEMPT_TO_READ_AFTER_EOF",
    33: "CANNOT_READ_ALL_DATA",
    38: "CANNOT_PARSE_DATE",
    41: "CANNOT_PARSE_DATETIME",
    53: "TYPE_MISMATCH",
    69: "ARGUMENT_OUT_OF_BOUND",
    70: "CANNOT_CONVERT_TYPE",
    72: "CANNOT_PARSE_NUMBER",
    117: "INCORRECT_DATA",
    128: "TOO_LARGE_ARRAY_SIZE",
    131: "TOO_LARGE_STRING_SIZE",
    190: "SIZES_OF_ARRAYS_DONT_MATCH",
    271: "CANNOT_DECOMPRESS",
    349: "CANNOT_INSERT_NULL_IN_ORDINARY_COLUMN",
    469: "VIOLATED_CONSTRAINT",
    691: "UNKNOWN_ELEMENT_OF_ENUM",
}
# Driver errors without a server code that are the data's: the client could not convert the rows.
BATCH_FAULT_DRIVER_ERRORS: tuple[type[Exception], ...] = (DataError,)
# Server codes that say the schema is not there: a store not migrated, which waiting alone does not heal.
_UNKNOWN_DATABASE = 81
SCHEMA_MISSING_CODES = {60: "UNKNOWN_TABLE", _UNKNOWN_DATABASE: "UNKNOWN_DATABASE"}
_SERVER_CODE = re.compile(r"\bCode: (\d+)\.")


@dataclass(frozen=True)
class StoreTarget:
    """A parsed DSN."""

    engine: str  # "chdb" or "server"
    database: str
    path: Path | None = None
    host: str = ""
    port: int = 8123
    username: str = "default"
    password: str = ""
    secure: bool = False

    @property
    def embedded(self) -> bool:
        return self.engine == "chdb"


def parse_dsn(dsn: str) -> StoreTarget:
    """Parse a storage DSN, raising ConfigError with the accepted forms on anything else."""
    parts = urlsplit(dsn)
    if parts.scheme == "chdb":
        raw_path = unquote(parts.netloc + parts.path)
        if not raw_path.startswith("/"):
            raise ConfigError(f"embedded DSN needs an absolute path, like chdb:///var/lib/streamscope: {dsn!r}")
        database = parse_qs(parts.query).get("database", [DEFAULT_DATABASE])[0]
        return StoreTarget(engine="chdb", database=_checked_database(database, dsn), path=Path(raw_path))
    if parts.scheme in ("clickhouse", "clickhouses"):
        if not parts.hostname:
            raise ConfigError(f"server DSN needs a host, like clickhouse://user:pass@host:8123/db: {dsn!r}")
        database = parts.path.strip("/") or DEFAULT_DATABASE
        secure = parts.scheme == "clickhouses"
        try:
            port = parts.port or (8443 if secure else 8123)
        except ValueError as exc:
            raise ConfigError(f"bad port in DSN {dsn!r}: {exc}") from None
        return StoreTarget(
            engine="server",
            database=_checked_database(database, dsn),
            host=parts.hostname,
            port=port,
            username=unquote(parts.username or "default"),
            password=unquote(parts.password or ""),
            secure=secure,
        )
    raise ConfigError(
        f"unknown storage DSN {dsn!r}: use chdb:///abs/path (embedded) or clickhouse://user:pass@host:8123/db"
    )


def _checked_database(name: str, dsn: str) -> str:
    if not _DATABASE_NAME.fullmatch(name):
        raise ConfigError(f"database name {name!r} in DSN {dsn!r} must be letters, digits and underscores")
    return name


def _without_dataframes() -> None:
    """Tell clickhouse-connect, before its first insert, that pandas is not here unless it is already imported.
    Each insert asks whether its data is a DataFrame, which imports pandas (installed with chDB): a second of CPU
    and ~50 MiB in every process that writes, for data that is only ever rows and Arrow tables here. A process
    that imported pandas itself keeps clickhouse-connect's DataFrame support."""
    from clickhouse_connect.driver import options

    if "pandas" not in sys.modules and "pd" not in vars(options):
        options.pd = None
        options.pd_time_test = None


def connect(target: StoreTarget, create_database: bool = True) -> Client:
    """A client on ``target``'s database, creating the database first if asked and it does not exist yet.

    ``create_database=False`` for accounts that may not create one (the collector's writer and reader):
    ClickHouse checks the grant even when the database exists.
    """
    _without_dataframes()
    with translated_errors():
        if target.embedded:
            return _embedded_client(target, create_database)
        if create_database:
            bootstrap = _server_client(target, database="default")
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {target.database}")
            bootstrap.close()
        return _server_client(target, database=target.database)


def _embedded_client(target: StoreTarget, create_database: bool) -> Client:
    """A client on the embedded store's database; a second client creates the database only when it is missing
    (each client asks the engine for its settings when made: the collector makes five)."""
    assert target.path is not None
    target.path.mkdir(parents=True, exist_ok=True, mode=0o700)  # the engine's files: for its user alone
    path = str(target.path)
    try:
        return clickhouse_connect.get_client(interface="chdb", path=path, database=target.database)
    except ClickHouseError as exc:
        if not create_database or _UNKNOWN_DATABASE not in _codes(exc):
            raise
    bootstrap = clickhouse_connect.get_client(interface="chdb", path=path)
    try:
        bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {target.database}")
    finally:
        bootstrap.close()
    return clickhouse_connect.get_client(interface="chdb", path=path, database=target.database)


def _server_client(target: StoreTarget, database: str) -> Client:
    return clickhouse_connect.get_client(
        host=target.host,
        port=target.port,
        username=target.username,
        password=target.password,
        database=database,
        secure=target.secure,
        compress="lz4",
        autogenerate_session_id=False,  # one client serves concurrent requests; sessions would lock
    )


T = TypeVar("T")


@contextmanager
def translated_errors(*, writing: bool = False) -> Iterator[None]:
    """Re-raise driver exceptions as WriteError (the request is wrong) or RetryableWriteError (the store cannot take
    it now); the only place that does so. ``writing``: for the writer's inserts, where only the data's own faults
    are final (``BATCH_FAULT_CODES``)."""
    try:
        yield
    except RETRYABLE_DRIVER_ERRORS as exc:
        raise RetryableWriteError(f"store unavailable: {exc}") from exc
    except PERMANENT_DRIVER_ERRORS as exc:
        codes = _codes(exc)
        if writing:
            final = any(c in BATCH_FAULT_CODES for c in codes) or (not codes and isinstance(exc, DataError))
        else:
            final = not any(c in RETRYABLE_SERVER_CODES for c in codes)
        if final:
            raise WriteError(f"store refused the request: {_first_line(exc)}") from exc
        raise RetryableWriteError(f"store cannot take it now: {_first_line(exc)}") from exc


def schema_missing(error: BaseException) -> bool:
    """Whether ``error`` says the store has not been migrated: its tables differ, or it lacks the database or one."""
    if isinstance(error, SchemaMismatch):
        return True
    return any(code in SCHEMA_MISSING_CODES for code in _codes(error))


def _codes(error: BaseException) -> list[int]:
    """The server error codes ``error``'s message names."""
    return [int(code) for code in _SERVER_CODE.findall(str(error))]


def call(fn: Callable[[], T]) -> T:
    """Run ``fn`` with driver errors translated."""
    with translated_errors():
        return fn()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
