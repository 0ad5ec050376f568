"""A child process's lines reach whoever asks for them, in order, even after a wait for one timed out."""

from __future__ import annotations

import pytest

from streamscope.errors import StreamscopeError
from streamscope_cli.child import ChildProcess

SLOW_PRINTER = "tests.cli.slow_printer"


def test_a_line_after_a_timed_out_wait_is_kept() -> None:
    child = ChildProcess(SLOW_PRINTER, name="the printer").start()
    assert child.ready() == "ready"
    assert child.line(0.05) == ""  # it prints its next line only when told
    child.send("late")
    assert child.line(30) == "late"  # not taken by the reader of the wait that timed out
    child.send("last words")
    assert child.stop().splitlines() == ["bye"]


def test_a_child_that_prints_nothing_is_stopped_and_named() -> None:
    child = ChildProcess(SLOW_PRINTER, "--silent", name="the printer").start()
    with pytest.raises(StreamscopeError, match="the printer did not start"):
        child.ready(timeout_s=0.5)
    with pytest.raises(StreamscopeError, match="not running"):
        child.send("x")
