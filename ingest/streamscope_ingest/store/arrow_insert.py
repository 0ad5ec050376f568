"""Arrow inserts: through clickhouse-connect to a server, through an in-memory file to the embedded engine.

clickhouse-connect hands an insert to chDB as a temporary file that it creates, writes and deletes each time: a
new inode on the file system of the temporary directory and a copy through its page cache, for every insert. On a
file system that many parts are written to and merged away, finding a free inode alone becomes a large part of an
insert (docs/benchmarks.md). Here each inserting thread keeps one anonymous in-memory file (``memfd``) and
writes each insert into it; the engine reads it through ``/proc/self/fd``. The statement is the one clickhouse-connect
sends (``INSERT … FROM INFILE``), through the same client, so the engine's answers and errors are the same; the
file is an Arrow stream rather than an Arrow file, which the engine reads for less.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping

import pyarrow as pa
from clickhouse_connect.driver.binding import quote_identifier
from clickhouse_connect.driver.client import Client

from streamscope_ingest.blocks import ipc_streams
from streamscope_ingest.store.sql import string_literal

_PROC_FDS = "/proc/self/fd"
_IN_MEMORY_FILES = hasattr(os, "memfd_create") and os.path.isdir(_PROC_FDS)
"""Whether this system has in-memory files the engine can open by path (Linux)."""


def insert_arrow(client: Client, table: str, block: pa.Table, settings: Mapping[str, str] | None = None) -> None:
    """Insert ``block`` into ``table`` with ``settings`` (names and values of ClickHouse settings)."""
    if not _embedded(client):
        client.insert_arrow(table, block, settings=dict(settings or {}))
        return
    file = _thread_file()
    file.rewrite(block)
    columns = ", ".join(quote_identifier(name) for name in block.schema.names)
    clause = ", ".join(f"{name} = {string_literal(str(value))}" for name, value in (settings or {}).items())
    client.command(
        f"INSERT INTO {quote_identifier(table)} ({columns}) FROM INFILE {string_literal(file.path)}"
        + (f" SETTINGS {clause}" if clause else "")
        + " FORMAT ArrowStream"
    )


def _embedded(client: Client) -> bool:
    """Whether ``client`` runs the engine in this process (chDB), where a file of ours is a file of its."""
    return _IN_MEMORY_FILES and str(getattr(client, "uri", "")).startswith("chdb:")


class _InsertFile:
    """One thread's in-memory file, emptied and written again for each insert."""

    def __init__(self) -> None:
        self.fd = os.memfd_create("streamscope-insert", os.MFD_CLOEXEC)
        self.path = f"{_PROC_FDS}/{self.fd}"
        weakref.finalize(self, os.close, self.fd)

    def rewrite(self, block: pa.Table) -> None:
        """The file holds ``block`` as an Arrow stream, and nothing else. Arrow writes the stream to the file itself,
        off the interpreter's lock (``ipc_streams``): writing it piece by piece through a Python file would take the
        lock for every piece."""
        os.ftruncate(self.fd, 0)
        with pa.OSFile(self.path, "a") as file:  # opened anew, at the end of the file, so at its start
            ipc_streams.write_stream(file, block)


_threads = threading.local()


def _thread_file() -> _InsertFile:
    file: _InsertFile | None = getattr(_threads, "file", None)
    if file is None:
        file = _threads.file = _InsertFile()
    return file
