"""A collector run as the process's service (``serve_forever``, what ``streamscope collector`` runs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support import STREAMSCOPE

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


SERVE_UNTIL_STDIN_CLOSES = """
import sys
from pathlib import Path
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector

collector = Collector(
    CollectorConfig(storage_dsn="chdb://" + sys.argv[1], http_port=0, grpc_port=None, spool_dir=Path(sys.argv[2]))
).start()
print(collector.http_url, flush=True)
sys.stdin.read()
collector.stop()
"""


def test_a_second_collector_on_one_embedded_store_says_first_who_holds_it(tmp_path: Path):
    """The second says, in one line and before touching the store, which collector holds it and what to do; the
    engine's own lock errors never reach the user."""
    store = tmp_path / "store"
    first = subprocess.Popen(
        [sys.executable, "-c", SERVE_UNTIL_STDIN_CLOSES, str(store), str(tmp_path / "spool-1")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None
        url = first.stdout.readline().strip()
        assert url.startswith("http://"), url
        second = subprocess.run(
            [*STREAMSCOPE, "collector", "--storage", f"chdb://{store}", "--http-port", "0", "--grpc-port", "0",
             "--spool-dir", str(tmp_path / "spool-2")],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    finally:
        first.communicate("", timeout=60)
    assert second.returncode != 0
    said = second.stderr.strip().splitlines()
    assert f"another collector (pid {first.pid}, {url}) holds the embedded store" in said[0], second.stderr
    assert "--storage" in said[0] and "Traceback" not in second.stderr and "Code: 76" not in second.stderr
