"""Threads named in the operating system: what ``top -H``, ``ps -L`` and profilers show of them."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from streamscope.threads import name_this_thread, named_thread, os_name

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="thread names are read from /proc")


def os_name_of(thread: threading.Thread) -> str:
    return Path(f"/proc/self/task/{thread.native_id}/comm").read_text().strip()


def run_and_read(name: str) -> str:
    seen: list[str] = []
    thread = named_thread(lambda: seen.append(os_name_of(threading.current_thread())), name)
    thread.start()
    thread.join(10)
    return seen[0]


def test_a_named_thread_carries_its_name_into_the_operating_system():
    assert run_and_read("attribution") == "attribution"


def test_the_projects_prefix_is_dropped_and_a_long_name_cut_to_what_the_kernel_keeps():
    assert run_and_read("streamscope-writer") == "writer"
    assert run_and_read("gpu-agent-engine-scrape") == "gpu-agent-engin"
    assert os_name("gpu-agent-engine-scrape") == "gpu-agent-engin"


def test_a_thread_named_while_it_runs_keeps_its_python_name():
    seen: list[tuple[str, str]] = []

    def work() -> None:
        name_this_thread("otlp-decode")
        seen.append((threading.current_thread().name, os_name_of(threading.current_thread())))

    thread = threading.Thread(target=work, name="worker-7")
    thread.start()
    thread.join(10)
    assert seen == [("worker-7", "otlp-decode")]


def test_a_named_thread_passes_its_keyword_arguments():
    got: list[int] = []
    thread = named_thread(lambda value: got.append(value), "kwargs", value=3)
    thread.start()
    thread.join(10)
    assert got == [3] and thread.daemon
