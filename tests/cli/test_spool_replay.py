"""`streamscope spool replay` on a real embedded store: quarantined batches go back in once the store takes them,
each under its own token, and a batch refused again stays with the reason."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from streamscope_cli.commands.spool import spool
from streamscope_ingest.durability.spool import Spool, quarantined
from tests.ingest.test_spool_faults import no_room_for_inserts
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
