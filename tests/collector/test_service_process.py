"""A collector run as the process's service (``serve_forever``, what ``streamscope collector`` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SERVE_AND_REPORT = """
import gc, os, signal, sys, threading, time
from pathlib import Path
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector

def report():
    deadline = time.monotonic() + 120
    while not gc.get_freeze_count() and time.monotonic() < deadline:
        time.sleep(0.05)
    print("frozen", gc.get_freeze_count(), flush=True)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=report, daemon=True).start()
config = CollectorConfig(storage_dsn="chdb://" + sys.argv[1], http_port=0, grpc_port=None, spool_dir=Path(sys.argv[2]))
Collector(config).serve_forever()
"""


def test_a_collector_serving_leaves_what_its_start_made_out_of_full_garbage_collections(tmp_path: Path):
    """Start-up objects (modules, the engine's bindings, the app) live as long as the process: frozen, a full
    collection walks only what the traffic made."""
    done = subprocess.run(
        [sys.executable, "-c", SERVE_AND_REPORT, str(tmp_path / "store"), str(tmp_path / "spool")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (frozen,) = [line for line in done.stdout.splitlines() if line.startswith("frozen")]
    assert int(frozen.split()[1]) > 10_000, frozen
