"""The virtual environments of other projects' test apps, whose pins clash with the test extra's: one per app,
built once per set of pins in the temporary directory and kept there.

The tests build them on first use. ``.ci/run`` builds them all first (``python -m tests.environments``), so their
minutes of pip are not spent while the suite's timing-sensitive tests run beside them.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

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
    pins = requirements.read_bytes() + repr(after).encode()
    home = Path(tempfile.gettempdir()) / f"streamscope-{name}-{hashlib.sha256(pins).hexdigest()[:12]}"
    python = home / "bin" / "python"
    if not (home / "ready").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(home)], check=True, timeout=120)
        for arguments in (["-r", str(requirements)], *after):
            install = subprocess.run(
                [str(python), "-m", "pip", "install", "--quiet", *arguments],
                capture_output=True,
                text=True,
                timeout=1500,
            )
            if install.returncode:
                raise RuntimeError(f"pip install {' '.join(arguments)} for {name}: {install.stderr[-3000:]}")
        (home / "ready").touch()
    return python


if __name__ == "__main__":
    with ThreadPoolExecutor(2) as pool:  # two at a time: pip is half network, half one core
        for python in pool.map(interpreter, ENVIRONMENTS):
            print(python)
