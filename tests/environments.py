"""The virtual environments of other projects' test apps, whose pins clash with the test extra's: one per app,
built once per set of pins and Python version in the user's cache (``streamscope/test-environments``), whole or not
at all (``ensure_entry``), and kept there.

The tests build them on first use. ``.ci/run`` builds them all first (``python -m tests.environments``), so their
minutes of pip are not spent while the suite's timing-sensitive tests run beside them.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from streamscope_cli.llama.cache import ensure_entry, user_cache

TESTS = Path(__file__).resolve().parent
VLLM_RELEASE = "vllm==0.33.0"
"""Installed with --no-deps after tests/vllm/requirements.txt (its wheel pins a CUDA torch)."""
ENVIRONMENTS: dict[str, tuple[Path, tuple[list[str], ...]]] = {
    # name: (its requirements, further `pip install` arguments after them)
    "openlit": (TESTS / "openlit" / "requirements.txt", ()),
    "util-genai": (TESTS / "util_genai" / "requirements.txt", ()),
    "litellm": (TESTS / "litellm" / "requirements.txt", ()),
    "langchain": (TESTS / "langchain" / "requirements.txt", ()),
    "vllm": (TESTS / "vllm" / "requirements.txt", (["--no-deps", VLLM_RELEASE],)),
}


def interpreter(name: str) -> Path:
    """The interpreter of the environment ``name`` (built if it is not there yet)."""
    requirements, after = ENVIRONMENTS[name]
    pins = requirements.read_bytes() + repr(after).encode() + sys.version.encode()
    home = user_cache() / "test-environments" / f"{name}-{hashlib.sha256(pins).hexdigest()[:12]}"
    ensure_entry(home, lambda staging: _build(staging, name))
    return home / "bin" / "python"


def _build(home: Path, name: str) -> None:
    """A fresh environment in ``home`` with the app's pins (renamed after: nothing in it may name its path but its
    scripts, which no test runs)."""
    requirements, after = ENVIRONMENTS[name]
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True, timeout=120)
    for arguments in (["-r", str(requirements)], *after):
        install = subprocess.run(
            [str(home / "bin" / "python"), "-m", "pip", "install", "--quiet", *arguments],
            capture_output=True,
            text=True,
            timeout=1500,
        )
        if install.returncode:
            raise RuntimeError(f"pip install {' '.join(arguments)} for {name}: {install.stderr[-3000:]}")


if __name__ == "__main__":
    with ThreadPoolExecutor(2) as pool:  # two at a time: pip is half network, half one core
        for python in pool.map(interpreter, ENVIRONMENTS):
            print(python)
