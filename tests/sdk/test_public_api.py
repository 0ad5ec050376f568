"""Nothing is exported by accident (after httpx's test_exported_members)."""

from __future__ import annotations

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
