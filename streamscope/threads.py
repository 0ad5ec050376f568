"""Threads whose names the operating system sees too.

Python names a thread for itself only: ``top -H``, ``ps -L``, ``perf`` and ``/proc/<pid>/task/*/comm`` show
every thread of the process under the process's name. Named here, the collector's decode workers, spool,
writer and attribution job each show as themselves, beside the engine's threads, which name themselves.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

_PREFIX = "streamscope-"
_OS_NAME_BYTES = 15  # the kernel keeps 16 bytes, the last a NUL
_PR_SET_NAME = 15


@cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up when a thread is first named: ``ctypes`` would add to every application's
    ``import streamscope``."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_named = threading.local()


def os_name(name: str) -> str:
    """``name`` as the kernel keeps it: without the project's prefix, and cut to 15 bytes."""
    return name.removeprefix(_PREFIX).encode()[:_OS_NAME_BYTES].decode(errors="ignore")


def name_this_thread(name: str) -> None:
    """Give the calling thread ``name`` in the operating system (``os_name``); a no-op where there is no
    ``prctl``, and after the first call with the same name on this thread."""
    if getattr(_named, "name", None) == name:
        return
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_NAME, os_name(name).encode(), 0, 0, 0)
    _named.name = name


def named_thread(target: Callable[..., Any], name: str, **kwargs: Any) -> threading.Thread:
    """A daemon thread (not started) that runs ``target(**kwargs)`` under ``name``, in Python and in the
    operating system."""

    def run() -> None:
        name_this_thread(name)
        target(**kwargs)

    return threading.Thread(target=run, name=name, daemon=True)
