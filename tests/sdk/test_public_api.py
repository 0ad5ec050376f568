"""Nothing is exported by accident (after httpx's test_exported_members)."""

from __future__ import annotations

import subprocess
import sys
import types

import streamscope


def test_all_lists_exactly_the_public_names():
    public = {
        name
        for name in dir(streamscope)
        if not name.startswith("_") and not isinstance(getattr(streamscope, name), types.ModuleType)
    }
    public |= {"ServerChunk", "ServerStream"}  # loaded on first use: they need Starlette
    assert sorted(streamscope.__all__) == sorted(public - {"annotations"})
    for name in streamscope.__all__:
        assert getattr(streamscope, name) is not None


def test_the_server_helper_without_starlette_names_what_to_install():
    """An SDK-only install has no Starlette: asking for the server helper says so in the project's own error, and
    ``hasattr`` answers False instead of raising."""
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "import streamscope\n"
        "from streamscope.errors import MissingDependency\n"
        "assert not hasattr(streamscope, 'ServerStream')\n"
        "try:\n"
        "    streamscope.ServerStream\n"
        "except MissingDependency as exc:\n"
        "    print(exc)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "needs Starlette" in run.stdout and "pip install starlette" in run.stdout
