"""The collector's data is its user's alone: the store's directory, the spool and its quarantine, and every file in
them, are neither readable nor reachable by another local user, whatever the umask it was started with."""

from __future__ import annotations

import logging
import stat
from pathlib import Path

import httpx

from benchmarks.ingest import CollectorProcess
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from streamscope_ingest.durability.spool import Spool
from tests.support import PROTOBUF, batch, good_body

SHARED = stat.S_IRWXG | stat.S_IRWXO
"""The mode bits that let another user read, write or enter."""


def shared(top: Path) -> list[str]:
    """What under ``top`` (itself included) another user may read or enter, with its mode."""
    modes = {path: path.stat().st_mode for path in (top, *top.rglob("*"))}
    return [f"{path.relative_to(top.parent)} {stat.filemode(mode)}" for path, mode in modes.items() if mode & SHARED]


def test_a_collector_started_with_umask_022_keeps_its_store_and_spool_to_its_user(tmp_path):
    data, spool_dir = tmp_path / "store", tmp_path / "spool"
    options = ("--spool-dir", str(spool_dir), "--insert-interval-s", "3600")  # the segment waits in the spool
    collector = CollectorProcess(data, *options, umask=0o022)
    try:
        answer = httpx.post(f"{collector.url}/v1/traces", content=good_body(), headers=PROTOBUF, timeout=30)
        assert answer.status_code == 200, answer.text
        assert list(spool_dir.glob("*.seg")), "the segment was written to the store before it could be looked at"
        spooled = shared(spool_dir)
        assert collector.scalar("SELECT count() FROM streams") == 1  # the store wrote its parts
        stored = shared(data)
    finally:
        collector.stop()
    assert any(data.rglob("*.bin")), "the store wrote no part to look at"
    assert not spooled, spooled
    assert not stored, stored[:20]


def test_the_spool_makes_its_directories_and_files_for_its_user_alone(tmp_path):
    """In-process, under the process's umask (which a library leaves alone): the spool's own modes."""
    directory = tmp_path / "spool"
    spool = Spool(directory, max_bytes=10**8, fsync="never")
    try:
        spool.append([batch(1, "a")])
        spool.quarantine(batch(2, "a"), "spool-2-2.2.0", "the store refused it alone")
    finally:
        spool.close()
    assert list(directory.glob("*.seg")) and list((directory / "quarantine").glob("*.reason"))
    assert not shared(directory), shared(directory)


def test_a_collector_given_a_directory_others_may_read_says_so(tmp_path, storage_dsn, caplog):
    spool_dir = tmp_path / "spool"
    spool_dir.mkdir()
    spool_dir.chmod(0o755)
    config = CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None, spool_dir=spool_dir)
    with caplog.at_level(logging.WARNING, logger="streamscope_collector.service"):
        collector = Collector(config).start()
        collector.stop()
    assert any(str(spool_dir) in r.getMessage() and "chmod" in r.getMessage() for r in caplog.records), caplog.text
