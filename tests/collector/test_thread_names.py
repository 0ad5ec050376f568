"""A running collector's threads show as what they do to the operating system's tools, beside the engine's."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from tests.support import good_body, post

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")


def os_thread_names() -> set[str]:
    return {task.joinpath("comm").read_text().strip() for task in Path("/proc/self/task").iterdir()}


def test_the_collectors_threads_are_named_for_the_operating_system(collector):
    assert post(collector, good_body()).status_code == 200
    names = os_thread_names()
    for expected in ("otlp-http", "otlp-decode", "spool", "writer", "attribution"):
        assert expected in names, f"no thread named {expected} in {sorted(names)}"
    python_names = {t.name for t in threading.enumerate()}
    assert "streamscope-writer" in python_names  # the Python name stays whole
