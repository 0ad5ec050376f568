from __future__ import annotations

import inspect
from pathlib import Path

import clickhouse_connect.driver.exceptions as driver_exceptions
import pytest

from streamscope.errors import ConfigError, RetryableWriteError, WriteError
from streamscope_ingest import store


def test_embedded_dsn():
    target = store.parse_dsn("chdb:///var/lib/ss?database=tenant_a")
    assert (target.engine, target.path, target.database) == ("chdb", Path("/var/lib/ss"), "tenant_a")
    assert store.parse_dsn("chdb:///x").database == store.DEFAULT_DATABASE


def test_server_dsn():
    target = store.parse_dsn("clickhouses://writer:p%40ss@ch.internal/metrics")
    assert (target.host, target.port, target.username, target.password, target.database, target.secure) == (
        "ch.internal",
        8443,
        "writer",
        "p@ss",
        "metrics",
        True,
    )
    assert store.parse_dsn("clickhouse://ch:9000").port == 9000


@pytest.mark.parametrize(
    ("dsn", "message"),
    [
        ("postgres://x", "unknown storage DSN"),
        ("chdb://relative/path", "absolute path"),
        ("clickhouse:///db", "needs a host"),
        ("clickhouse://h/drop table", "letters, digits and underscores"),
        ("chdb:///x?database=a;b", "letters, digits and underscores"),
        ("clickhouse://h:99999/db", "bad port"),
    ],
)
def test_bad_dsns_say_what_is_wrong(dsn, message):
    with pytest.raises(ConfigError, match=message):
        store.parse_dsn(dsn)


def test_every_driver_exception_is_mapped():
    """Like httpx's test for httpcore: a new driver exception must be placed in our tree on purpose."""
    mapped = store.RETRYABLE_DRIVER_ERRORS + store.PERMANENT_DRIVER_ERRORS
    for name, cls in inspect.getmembers(driver_exceptions, inspect.isclass):
        if issubclass(cls, Exception) and cls.__module__ == driver_exceptions.__name__:
            if issubclass(cls, Warning) and not issubclass(cls, driver_exceptions.Error):
                continue  # warnings are not raised as errors
            assert issubclass(cls, mapped), f"{name} is not mapped in streamscope_ingest.store"


def test_translation_keeps_retryable_apart():
    with pytest.raises(RetryableWriteError), store.translated_errors():
        raise driver_exceptions.OperationalError("connection refused")
    with pytest.raises(WriteError) as refused, store.translated_errors():
        raise driver_exceptions.DatabaseError("Code: 60. Unknown table\nstack")
    assert not isinstance(refused.value, RetryableWriteError)
    assert "Unknown table" in str(refused.value) and "stack" not in str(refused.value)
    for failing_disk in ("Code: 243. (NOT_ENOUGH_SPACE)", "Code: 1001. filesystem error (STD_EXCEPTION)"):
        with pytest.raises(RetryableWriteError, match="cannot take it now"), store.translated_errors():
            raise driver_exceptions.DatabaseError(failing_disk)


def test_for_the_writer_only_the_datas_own_faults_are_final():
    """An insert is retried through whatever the store can heal from: a table dropped, a grant missing, a closed
    client; only a code that names the rows is final."""
    with pytest.raises(WriteError) as refused, store.translated_errors(writing=True):
        raise driver_exceptions.DatabaseError("Code: 27. Cannot parse input\nstack")
    assert not isinstance(refused.value, RetryableWriteError)
    for store_side in (
        "Code: 60. Unknown table",
        "Code: 243. DB::Exception: Could not perform insert. (NOT_ENOUGH_SPACE)",
        "Code: 497. DB::Exception: streamscope_writer: Not enough privileges. (ACCESS_DENIED)",
    ):
        with pytest.raises(RetryableWriteError, match="cannot take it now"), store.translated_errors(writing=True):
            raise driver_exceptions.DatabaseError(store_side)
    with pytest.raises(RetryableWriteError), store.translated_errors(writing=True):
        raise driver_exceptions.ProgrammingError("The client has been closed")
