"""Run the collector: serve OTLP over HTTP and gRPC into the spool, and open and migrate the store, now or once it
answers (``streamscope_collector.store_link``).

``Collector.start()`` serves from background threads and returns, so the demo and the tests can run one
in-process; ``streamscope collector`` calls ``serve_forever()``. It inserts through the storage DSN's account
and reads (repeated-span lookups, the attribution job, SQL) through the query DSN's, when one is given, so a
server can give each account only the grants it needs. While it runs with the embedded engine it
leaves ``collector.json`` in the data directory, readable by its owner only, telling other commands to query
through its HTTP API and giving them the operator's token for it.

The store's directory and the spool are made for the collector's user alone; ``serve_forever`` also sets the
process's umask to ``PRIVATE_UMASK``, so the files the embedded engine makes in them are private too (a collector
started in-process leaves its host's umask alone). A directory given that others may read is logged, not changed.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import secrets
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from clickhouse_connect.driver.client import Client

from streamscope import env
from streamscope.errors import ConfigError
from streamscope_collector.admission import Admission
from streamscope_collector.config import CollectorConfig
from streamscope_collector.grpc_server import start_grpc_server
from streamscope_collector.http.app import KEEP_ALIVE_S, OperatorSql, create_app
from streamscope_collector.memory import AttributionInRoom, resident_bytes
from streamscope_collector.metrics import SelfMetrics
from streamscope_collector.pipeline import ExportPipeline
from streamscope_collector.readiness import readiness
from streamscope_collector.serving import (
    BackgroundServer,
    check_free,
    connectable_host,
    stop_on_signals,
    wait_until_set,
)
from streamscope_collector.store_link import StoreClients, StoreLink
from streamscope_ingest import store
from streamscope_ingest.analysis.attribution import StallRules
from streamscope_ingest.analysis.attribution_job import JOB, PeriodicAttribution
from streamscope_ingest.durability.group_commit import GroupCommitConfig, GroupCommitWriter
from streamscope_ingest.durability.spool import Spool
from streamscope_ingest.store import migrations, sql
from streamscope_ingest.store.lease import Lease
from streamscope_ingest.store.writer import ClickHouseWriter

log = logging.getLogger(__name__)
DISCOVERY_FILE = "collector.json"
HTTP_THREAD = "otlp-http"
PRIVATE_UMASK = 0o077
"""What the process creates, the embedded engine's files among it, is its user's alone: it holds what tenants sent."""


class Collector:
    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        self.target = store.parse_dsn(config.storage_dsn)
        self.read_target = self._read_target()
        self.http_port: int | None = None
        self.grpc_port: int | None = None
        self._writer: GroupCommitWriter | None = None
        self._http: BackgroundServer | None = None
        self._grpc = None
        self._clients: list = []
        self._link: StoreLink | None = None
        self.pipeline: ExportPipeline | None = None
        self.admission: Admission | None = None
        self._attribution: PeriodicAttribution | None = None
        self.operator_token = secrets.token_urlsafe(32)
        """The bearer token of the SQL API (``streamscope_collector.http.sql``)."""

    @property
    def query_client(self) -> Client:
        """The read-only connection to the store, once open: lookups, attribution, operator queries. Raises
        RetryableWriteError while the store cannot be opened."""
        if self._link is None:
            raise RuntimeError("the collector has not started")
        return self._link.clients().query

    @property
    def http_url(self) -> str:
        return f"http://{connectable_host(self.config.host)}:{self.http_port}"

    @property
    def spool_dir(self) -> Path:
        if self.config.spool_dir is not None:
            return self.config.spool_dir
        if self.target.embedded and self.target.path is not None:
            return self.target.path / "spool" / self.target.database
        return env.default_data_dir() / "spool" / f"{self.target.host}-{self.target.port}-{self.target.database}"

    @property
    def grpc_endpoint(self) -> str:
        return f"{connectable_host(self.config.host)}:{self.grpc_port}"

    def _read_target(self) -> store.StoreTarget:
        if not self.config.query_storage_dsn:
            return self.target
        read = store.parse_dsn(self.config.query_storage_dsn)
        if replace(read, username=self.target.username, password=self.target.password) != self.target:
            raise ConfigError(
                f"the query DSN must name the same store and database as the storage DSN, with another account: "
                f"{self.config.query_storage_dsn!r}"
            )
        return read

    def _connect(self, target: store.StoreTarget, create_database: bool = False) -> Client:
        """A client of its own (the embedded engine wants one per thread), closed at stop."""
        client = store.connect(target, create_database=create_database)
        self._clients.append(client)
        return client

    def _open_store(self) -> StoreClients:
        """Connect, migrate (if the collector is to) and check the schema; the clients are closed if any step fails."""
        opened = len(self._clients)
        try:
            write_client = self._connect(self.target, create_database=self.config.migrate)
            if self.config.migrate:
                for migration in migrations.migrate(write_client):
                    log.info("applied migration %s", migration.path.name)
            query_client = self._connect(self.read_target)
            return StoreClients(ClickHouseWriter(write_client, lookups=self._connect(self.read_target)), query_client)
        except BaseException:
            for client in self._clients[opened:]:
                client.close()
            del self._clients[opened:]
            raise

    def _store_opened(self, clients: StoreClients) -> None:
        if self.config.attribution_interval_s:
            reads, writes = self._connect(self.read_target), self._connect(self.target)
            assert self.admission is not None, "admission is set up before the store opens"
            memory = self.admission.budget.memory
            lease = Lease(reads, writes, JOB)
            rules = StallRules(stall=self.config.stall)
            job = AttributionInRoom(
                memory,
                self.metrics.chunks_per_stream,
                reads,
                rules,
                insert_client=writes,
                lease=lease,
                settle_s=self.config.attribution_settle_s,
            )
            self._attribution = PeriodicAttribution(job, self.config.attribution_interval_s).start()

    def start(self) -> Collector:
        holder = running_collector(self.target)
        if holder is not None and holder.pid != os.getpid():
            raise ConfigError(
                f"another collector (pid {holder.pid}, {holder.http_url}) holds the embedded store at "
                f"{self.target.path}: give each collector its own --storage, or send to that one"
            )
        check_free(self.config.host, self.config.http_port, "OTLP/HTTP")
        if self.config.grpc_port is not None:
            check_free(self.config.host, self.config.grpc_port, "OTLP/gRPC")
        self._link = link = StoreLink(self._open_store)
        if not link.open_now():
            if link.error is not None and store.schema_missing(link.error) and not self.config.migrate:
                raise link.error  # not migrated, and not to migrate it: a setting to fix, not a store to wait for
            log.warning("starting without the store: requests are spooled, and /readyz says not ready until it opens")
        self.admission = admission = Admission.from_config(self.config)  # its memory ceiling: the store open
        spool = Spool(self.spool_dir, max_bytes=self.config.spool_max_bytes, fsync=self.config.spool_fsync)
        for directory in (self._data_dir(), self.spool_dir):
            _warn_if_shared(directory)
        if replay := len(spool.pending()):
            log.info("writing %d spool segment(s) left from the last run", replay)
        self.metrics = metrics = SelfMetrics()
        pacing = GroupCommitConfig(insert_interval_s=self.config.insert_interval_s)
        self._writer = writer = GroupCommitWriter(spool, link, pacing, observer=metrics)
        self.pipeline = ExportPipeline(
            writer,
            stall=self.config.stall,
            write_timeout_s=self.config.write_timeout_s,
            store_wait_s=self.config.store_wait_s,
            metrics=metrics,
            limits=self.config.limits,
        )
        metrics.watch("spool_bytes", "Bytes in the spool waiting for the store.", lambda: spool.bytes)
        metrics.watch("spool_segments", "Spool segments waiting for the store.", writer.backlog)
        metrics.watch(
            "inflight_bytes", "Bytes of requests and their rows on the way to the spool.", lambda: admission.budget.used
        )
        metrics.watch(
            "parsing_bytes",
            "Memory counted for the requests being parsed and decoded (streamscope_collector.admission).",
            lambda: admission.expansion.used,
        )
        metrics.watch("resident_bytes", "The collector's resident memory (RSS).", lambda: resident_bytes() or 0)
        metrics.watch(
            "memory_ceiling_bytes",
            "Resident memory past which requests are refused (streamscope_collector.memory); 0: none.",
            lambda: admission.budget.memory.max_bytes or 0,
        )
        metrics.watch(
            "store_up",
            "1 while the store is open and takes writes, 0 while it does not.",
            lambda: link.opened and writer.store_healthy,
        )
        metrics.watch(
            "writer_up",
            "1 while the writer runs and makes progress, 0 while it is stuck (its fault is in /readyz).",
            lambda: writer.alive and not writer.fault,
        )
        metrics.watch(
            "spool_up", "1 while the spool's disk takes writes, 0 after it refused one.", lambda: not writer.spool_error
        )

        app = create_app(
            self.pipeline,
            self.config,
            admission=admission,
            metrics=metrics,
            readiness=readiness(writer, spool, link, self.config.max_request_bytes),
            # a server answers SQL itself, to accounts it confines; the route serves the embedded engine's operator
            sql=OperatorSql(self._sql_runner(), self.operator_token) if self.target.embedded else None,
        )
        self._http = BackgroundServer(
            app, self.config.host, self.config.http_port, name=HTTP_THREAD, keep_alive_s=KEEP_ALIVE_S
        ).start()
        self.http_port = self._http.port
        if self.config.grpc_port is not None:
            self._grpc, self.grpc_port = start_grpc_server(
                self.pipeline,
                admission,
                metrics,
                host=self.config.host,
                port=self.config.grpc_port,
                max_request_bytes=self.config.max_request_bytes,
            )
        link.keep_trying(self._store_opened)
        self._write_discovery()
        return self

    def _sql_runner(self) -> Callable[[str], bytes]:
        """The operator's queries, on the read-only session, reading every row acknowledged before them."""

        def run(query: str) -> bytes:
            self.flush(self.config.read_wait_s)
            return sql.query_json(self.query_client, query)

        return run

    def flush(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` until every row acknowledged so far is in the store; False if it is not. While
        the store fails, returns False at once: the spool keeps the rows until the store is back."""
        assert self._writer is not None, "the collector is not started"
        return self._writer.store_healthy and self._writer.flush(timeout_s)

    def stop(self) -> None:
        """Stop accepting, answer what is in flight, write what is queued, release the store."""
        if self._link is not None:
            self._link.stop()
        if self._attribution is not None:
            self._attribution.stop()
        if self._grpc is not None:
            self._grpc.stop(grace=5).wait()
        if self._http is not None:
            self._http.stop()
        if self.admission is not None:
            self.admission.expansion.close()
        if self._writer is not None:
            self._writer.shutdown()
        for client in self._clients:
            client.close()
        self._remove_discovery()

    def serve_forever(self) -> None:
        """Start, then block until SIGINT or SIGTERM."""
        os.umask(PRIVATE_UMASK)
        with stop_on_signals(threading.Event()) as stop:
            self.start()
            gc.freeze()  # what start-up made lives as long as the process: full collections need not walk it
            log.info("collector listening: OTLP/HTTP %s, OTLP/gRPC %s", self.http_url, self.grpc_port or "off")
            try:
                wait_until_set(stop)
            finally:
                self.stop()

    def _data_dir(self) -> Path | None:
        """The embedded store's directory, if the store is embedded."""
        return self.target.path if self.target.embedded else None

    def _discovery_path(self) -> Path | None:
        data = self._data_dir()
        return data / DISCOVERY_FILE if data else None

    def _write_discovery(self) -> None:
        path = self._discovery_path()
        if path:
            found = {"pid": os.getpid(), "http_url": self.http_url, "operator_token": self.operator_token}
            path.unlink(missing_ok=True)  # a file left by another owner keeps its mode: start afresh
            with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as file:
                json.dump(found, file)

    def _remove_discovery(self) -> None:
        path = self._discovery_path()
        if path:
            path.unlink(missing_ok=True)


def _warn_if_shared(directory: Path | None) -> None:
    """Log a directory of the collector's data that other local users may read or enter: it was made so before
    the collector ran (it makes its own for its user alone), and is left as it is."""
    try:
        mode = directory.stat().st_mode if directory else 0
    except OSError:
        return
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning(
            "%s is open to other local users (%s); `chmod -R go-rwx %s` keeps the data in it to this user",
            directory,
            stat.filemode(mode),
            directory,
        )


@dataclass(frozen=True)
class RunningCollector:
    """A live collector that owns an embedded store, as its discovery file tells."""

    http_url: str
    operator_token: str
    pid: int = 0

    @property
    def operator_headers(self) -> dict[str, str]:
        """The headers of a request to its SQL API, as the operator."""
        return {"authorization": f"Bearer {self.operator_token}"}


def running_collector(target: store.StoreTarget) -> RunningCollector | None:
    """The live collector that owns ``target``'s embedded directory, if there is one."""
    if not target.embedded or target.path is None:
        return None
    path = target.path / DISCOVERY_FILE
    try:
        info = json.loads(path.read_text())
        os.kill(int(info["pid"]), 0)
        return RunningCollector(str(info["http_url"]), str(info["operator_token"]), int(info["pid"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None
