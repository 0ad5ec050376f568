"""Arrow inserts into the embedded engine go through each thread's in-memory file, and store what they are given."""

from __future__ import annotations

import tempfile
import threading

import pyarrow as pa
import pytest
from clickhouse_connect.driver.exceptions import DatabaseError

from streamscope_ingest import store
from streamscope_ingest.store.arrow_insert import insert_arrow

SCHEMA = pa.schema([("id", pa.uint32()), ("label", pa.string())])


@pytest.fixture
def client(empty_storage_dsn):
    client = store.connect(store.parse_dsn(empty_storage_dsn))
    client.command(
        "CREATE TABLE items (id UInt32, label String) ENGINE = MergeTree ORDER BY id "
        "SETTINGS non_replicated_deduplication_window = 100"
    )
    yield client
    client.close()


def _block(ids: range, label: str) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.uint32()), "label": [label] * len(ids)}, schema=SCHEMA)


def _rows(client) -> list[tuple[str, int, int]]:
    return client.query("SELECT label, count(), sum(id) FROM items GROUP BY label ORDER BY label").result_rows


def test_a_smaller_insert_after_a_larger_stores_only_its_own_rows(client):
    insert_arrow(client, "items", _block(range(50_000), "large"))
    insert_arrow(client, "items", _block(range(3), "small"))
    assert _rows(client) == [("large", 50_000, sum(range(50_000))), ("small", 3, 3)]


def test_no_temporary_file_is_made(client, monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a temporary file was made")

    monkeypatch.setattr(tempfile, "NamedTemporaryFile", refuse)
    insert_arrow(client, "items", _block(range(10), "x"))
    assert _rows(client) == [("x", 10, 45)]


def test_settings_reach_the_engine_quoted(client):
    token = "segment-7's items"  # a quote in a value must not end the string
    for _ in range(2):
        insert_arrow(client, "items", _block(range(5), "x"), {"insert_deduplication_token": token})
    insert_arrow(client, "items", _block(range(5), "x"), {"insert_deduplication_token": token + " again"})
    assert _rows(client) == [("x", 10, 20)]


def test_each_thread_inserts_through_a_file_of_its_own(client):
    errors: list[BaseException] = []

    def insert(label: str) -> None:
        try:
            for size in (20_000, 7, 3_000):
                insert_arrow(client, "items", _block(range(size), label))
        except BaseException as exc:  # reported below: a thread's exception would be lost
            errors.append(exc)

    threads = [threading.Thread(target=insert, args=(label,)) for label in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    expected = sum(range(20_000)) + sum(range(7)) + sum(range(3_000))
    assert _rows(client) == [(label, 23_007, expected) for label in ("a", "b", "c")]


def test_the_engines_refusal_is_raised(client):
    wrong = pa.table({"id": pa.array([1], pa.uint32()), "missing": ["x"]})
    with pytest.raises(DatabaseError, match="missing"):
        insert_arrow(client, "items", wrong)
    assert _rows(client) == []
