"""A cache entry is there whole or not at all: a failed or killed fill leaves nothing a later call would take."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamscope_cli.llama.cache import ensure_entry


def test_a_failed_fill_leaves_no_entry_and_the_next_call_fills_it(tmp_path: Path) -> None:
    final = tmp_path / "1.0"

    def fail(staging: Path) -> None:
        (staging / "half").write_text("half")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        ensure_entry(final, fail)
    assert not final.exists()
    assert not list(tmp_path.glob(".1.0.tmp-*"))

    ensure_entry(final, lambda staging: (staging / "whole").write_text("whole"))
    assert [p.name for p in final.iterdir()] == ["whole"]


def test_a_leftover_of_a_killed_fill_is_removed_and_never_taken(tmp_path: Path) -> None:
    leftover = tmp_path / ".1.0.tmp-killed"
    leftover.mkdir()
    (leftover / "half").write_text("half")

    entry = ensure_entry(tmp_path / "1.0", lambda staging: (staging / "whole").write_text("whole"))

    assert [p.name for p in entry.iterdir()] == ["whole"]
    assert not leftover.exists()


def test_a_filled_entry_is_returned_without_filling_again(tmp_path: Path) -> None:
    ensure_entry(tmp_path / "1.0", lambda staging: (staging / "whole").write_text("whole"))

    def never(staging: Path) -> None:
        raise AssertionError("filled twice")

    assert ensure_entry(tmp_path / "1.0", never) == tmp_path / "1.0"
