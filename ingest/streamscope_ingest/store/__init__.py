"""Open the store named by a DSN through clickhouse-connect, and translate driver errors.

``chdb:///abs/path[?database=name]`` runs the embedded engine in this process (one process per directory);
``clickhouse://user:pass@host:8123/db`` (``clickhouses://`` for TLS) talks to a server. Both are the same
ClickHouse engine behind the same client API, so nothing above this module knows which one it has.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs, unquote, urlsplit

import clickhouse_connect
from clickhouse_connect.driver.client import Client
from clickhouse_connect.driver.exceptions import ClickHouseError, OperationalError, StreamCompleteException

from streamscope.errors import ConfigError, RetryableWriteError, WriteError

DEFAULT_DATABASE = "streamscope"
_DATABASE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

# Driver exceptions that mean "the store is not reachable right now": the same call may succeed later.
# OperationalError covers connection failures, timeouts and broken streams (StreamFailureError).
RETRYABLE_DRIVER_ERRORS: tuple[type[Exception], ...] = (OperationalError,)
# Every other driver exception means the store refused the request as given...
PERMANENT_DRIVER_ERRORS: tuple[type[Exception], ...] = (ClickHouseError, StreamCompleteException)
# ...except these ClickHouse error codes, which say the server is overloaded or briefly unable, not that the
# request is wrong: the same insert succeeds once merges, memory or replicas catch up.
RETRYABLE_SERVER_CODES = {
    159: "TIMEOUT_EXCEEDED",
    202: "TOO_MANY_SIMULTANEOUS_QUERIES",
    209: "SOCKET_TIMEOUT",
    210: "NETWORK_ERROR",
    241: "MEMORY_LIMIT_EXCEEDED",
    242: "TABLE_IS_READ_ONLY",
    252: "TOO_MANY_PARTS",
    319: "UNKNOWN_STATUS_OF_INSERT",
    999: "KEEPER_EXCEPTION",
}
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


def connect(target: StoreTarget, create_database: bool = True) -> Client:
    """A client on ``target``'s database, creating the database first if asked and it does not exist yet.

    ``create_database=False`` for accounts that may not create one (the collector's writer and reader):
    ClickHouse checks the grant even when the database exists.
    """
    with translated_errors():
        if target.embedded:
            assert target.path is not None
            target.path.mkdir(parents=True, exist_ok=True)
            if create_database:
                bootstrap = clickhouse_connect.get_client(interface="chdb", path=str(target.path))
                bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {target.database}")
            return clickhouse_connect.get_client(interface="chdb", path=str(target.path), database=target.database)
        if create_database:
            bootstrap = _server_client(target, database="default")
            bootstrap.command(f"CREATE DATABASE IF NOT EXISTS {target.database}")
            bootstrap.close()
        return _server_client(target, database=target.database)


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
def translated_errors() -> Iterator[None]:
    """Re-raise driver exceptions as WriteError / RetryableWriteError; the only place that does so."""
    try:
        yield
    except RETRYABLE_DRIVER_ERRORS as exc:
        raise RetryableWriteError(f"store unavailable: {exc}") from exc
    except PERMANENT_DRIVER_ERRORS as exc:
        code = _SERVER_CODE.search(str(exc))
        if code and int(code.group(1)) in RETRYABLE_SERVER_CODES:
            raise RetryableWriteError(f"store busy: {_first_line(exc)}") from exc
        raise WriteError(f"store refused the request: {_first_line(exc)}") from exc


def call(fn: Callable[[], T]) -> T:
    """Run ``fn`` with driver errors translated."""
    with translated_errors():
        return fn()


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
