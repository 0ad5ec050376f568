"""The collector's connections to the store, opened when the store first answers: at start, or any time later.

A collector may start while its store is down (a server not up yet, an embedded directory another process holds,
a schema not migrated yet): it accepts requests into the spool and says it is not ready, while a thread tries to
open the store again with backoff. Once it opens (and has migrated, when the collector migrates), the writer drains
the spool. Until then a write fails as an outage does, and the writer retries it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from clickhouse_connect.driver.client import Client

from streamscope.errors import RetryableWriteError
from streamscope.threads import named_thread
from streamscope_ingest.blocks.batch import DecodedBatch
from streamscope_ingest.store.writer import ClickHouseWriter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoreClients:
    """An opened store: the writer (inserts, and its lookups) and the client for everything else the collector reads."""

    writer: ClickHouseWriter
    query: Client


class StoreLink:
    """Implements ``streamscope_ingest.durability.group_commit.SegmentSink`` over a store that may not be open yet."""

    def __init__(self, open_store: Callable[[], StoreClients], retry_max_s: float = 5.0) -> None:
        """``open_store`` connects (and migrates), raising anything while the store cannot be opened."""
        self._open_store = open_store
        self._retry_max_s = retry_max_s
        self._clients: StoreClients | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error = ""
        """Why the store could not be opened, the last time it was tried."""
        self.error: Exception | None = None

    @property
    def opened(self) -> bool:
        return self._clients is not None

    def open_now(self) -> bool:
        """Try once to open the store; True once it is open."""
        with self._lock:
            if self._clients is None:
                try:
                    self._clients = self._open_store()
                except Exception as exc:
                    if str(exc) != self.last_error:
                        log.warning("the store cannot be opened (%s); the spool keeps what is accepted", exc)
                    self.last_error = str(exc) or type(exc).__name__
                    self.error = exc
                    return False
                self.last_error, self.error = "", None
            return True

    def keep_trying(self, on_open: Callable[[StoreClients], None]) -> None:
        """Call ``on_open`` once the store is open: now if it is, else from a thread that tries until it is."""
        if self._clients is not None:
            on_open(self._clients)
            return

        def retry() -> None:
            backoff = 0.1
            while not self._stop.wait(backoff):
                if self.open_now():
                    assert self._clients is not None
                    log.info("the store is open; writing the spool to it")
                    on_open(self._clients)
                    return
                backoff = min(backoff * 2, self._retry_max_s)

        self._thread = named_thread(retry, "streamscope-store-open")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def clients(self) -> StoreClients:
        """The opened store; raises RetryableWriteError while it cannot be opened."""
        if self._clients is None:
            raise RetryableWriteError(f"the store is not available yet: {self.last_error or 'not opened'}")
        return self._clients

    def write(
        self,
        batches: list[DecodedBatch],
        token: str,
        *,
        skip: frozenset[str] = frozenset(),
        written: set[str] | None = None,
    ) -> int:
        return self.clients().writer.write(batches, token, skip=skip, written=written)
