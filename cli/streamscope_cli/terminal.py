"""Where the CLI prints: a terminal wraps tables to its width; a pipe or a file gets every value whole."""

from __future__ import annotations

import sys

from rich.console import Console

UNCUT_WIDTH = 100_000
"""The width output is laid out in when not on a terminal: wider than any row, so no value is cut or wrapped."""


def stdout_console() -> Console:
    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else UNCUT_WIDTH)
