"""`streamscope spool replay` on a real embedded store: quarantined batches go back in once the store takes them,
each under its own token, and a batch refused again stays with the reason."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
from click.testing import CliRunner

from streamscope_cli.commands.spool import spool
from streamscope_ingest.durability.spool import Spool, quarantined
from tests.ingest.durability.test_spool_faults import no_room_for_inserts
from tests.support import batch


def replay(storage_dsn: str, spool_dir: Path):
    return CliRunner().invoke(spool, ["replay", "--storage", storage_dsn, "--spool-dir", str(spool_dir)])


def counts(client) -> tuple[int, int]:
    (streams,), *_ = client.query("SELECT count() FROM streams").result_rows
    (requests,), *_ = client.query("SELECT count() FROM ingest_requests").result_rows
    return streams, requests


def test_quarantined_batches_are_stored_once_the_store_takes_them_and_only_once(tmp_path, storage_dsn, store_client):
    spool_dir = tmp_path / "spool"
    kept = Spool(spool_dir, max_bytes=10**8)
    for i in (1, 2):
        kept.quarantine(batch(i, "a"), f"spool-{i}-{i}.{i}.0", "the store refused it alone: NOT_ENOUGH_SPACE")
    kept.close()

    with no_room_for_inserts(store_client):
        refused = replay(storage_dsn, spool_dir)
    assert refused.exit_code == 1 and "2 of 2 quarantined batch(es) refused again" in refused.output
    assert "NOT_ENOUGH_SPACE" in refused.output and len(quarantined(spool_dir)) == 2

    stored = replay(storage_dsn, spool_dir)
    assert stored.exit_code == 0, stored.output
    assert "2 quarantined batch(es) stored" in stored.output
    assert counts(store_client) == (2, 2) and not quarantined(spool_dir)
    assert not list((spool_dir / "quarantine").iterdir())

    again = Spool(spool_dir, max_bytes=10**8)  # the same batch quarantined again, as after a crash mid-replay
    again.quarantine(batch(1, "a"), "spool-1-1.1.0", "kept again")
    again.close()
    assert replay(storage_dsn, spool_dir).exit_code == 0
    assert counts(store_client) == (2, 2)


def test_every_quarantined_batch_is_tried_whatever_the_ones_before_it_raise(tmp_path, storage_dsn, store_client):
    """A damaged file, and a batch the writer cannot even turn into rows, are reported and kept; the good batch
    after them is stored, and the command fails plainly at the end."""
    spool_dir = tmp_path / "spool"
    kept = Spool(spool_dir, max_bytes=10**8)
    damaged = kept.quarantine(batch(1, "a"), "spool-1-1.1.0", "the store refused it alone")
    damaged.write_bytes(damaged.read_bytes()[:-100])
    too_late = batch(2, "a")
    streams = too_late.blocks["streams"]
    at = streams.column_names.index("ttft_us")
    too_late.blocks["streams"] = streams.set_column(at, "ttft_us", pa.array([2**62] * streams.num_rows, pa.uint64()))
    unwritable = kept.quarantine(too_late, "spool-2-2.2.0", "the store refused it alone")
    good = kept.quarantine(batch(3, "a"), "spool-3-3.3.0", "the store refused it alone")
    kept.close()
    for order, path in enumerate((damaged, unwritable, good)):  # oldest first, as replay tries them
        os.utime(path, ns=(order, order))

    result = replay(storage_dsn, spool_dir)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
    assert "Traceback" not in result.output
    lines = result.output.splitlines()
    assert any(line.startswith("spool-1-1.1.0: refused again: cannot be read") for line in lines), result.output
    assert any(line.startswith("spool-2-2.2.0: refused again: ArrowInvalid") for line in lines), result.output
    assert any(line.startswith("spool-3-3.3.0: stored") for line in lines), result.output
    assert "2 of 3 quarantined batch(es) refused again" in result.output
    assert counts(store_client) == (1, 1) and quarantined(spool_dir) == [damaged, unwritable]
