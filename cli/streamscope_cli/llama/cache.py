"""Where the built engine and the written models are kept, and how an entry gets there whole.

An entry is a directory made under a temporary name beside its final one and renamed into place, so a killed build
or write never leaves a half entry that a later call would take for a finished one. A lock per entry makes a second
caller wait for the first instead of doing the same work again.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def user_cache() -> Path:
    """``$XDG_CACHE_HOME/streamscope`` (``~/.cache`` when the variable is unset): what is built once per version."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "streamscope"


def cache_dir() -> Path:
    """``user_cache()/llama.cpp``: the engine's builds and the models written for it."""
    return user_cache() / "llama.cpp"


def ensure_entry(final: Path, make: Callable[[Path], None]) -> Path:
    """Return ``final``, first calling ``make(directory)`` to fill a fresh directory that is then renamed to it.

    Leftover temporary directories of earlier killed runs are removed under the lock, where no run can be using them.
    """
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        for stale in final.parent.glob(f".{final.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            make(staging)
            staging.chmod(0o755)  # mkdtemp made it private
            staging.rename(final)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final
