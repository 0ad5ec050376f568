"""The pip command that adds an extra to streamscope where it runs.

No release is on the public index yet, so ``pip install 'streamscope[server]'`` finds nothing there. streamscope is
installed from a clone, a built wheel or a git URL, and pip records which in the distribution's
``direct_url.json`` (PEP 610): the hint names that source, so the command it gives works on the machine that prints it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, distribution
from typing import Any
from urllib.parse import unquote, urlsplit


def install_command(extra: str) -> str:
    """``pip install`` with ``extra`` from where this streamscope was installed."""
    return command_for(extra, _installed_origin())


def command_for(extra: str, origin: Mapping[str, Any] | None) -> str:
    """``pip install`` with ``extra`` from the source a PEP 610 record (``origin``) names, or from a clone."""
    url = origin.get("url") if origin else None
    if origin and isinstance(url, str) and url.startswith("file://"):
        path = unquote(urlsplit(url).path)
        editable = bool(origin.get("dir_info", {}).get("editable"))
        return f"pip install {'-e ' if editable else ''}{shlex.quote(f'{path}[{extra}]')}"
    if origin and isinstance(url, str) and isinstance(origin.get("vcs_info"), Mapping):
        vcs = origin["vcs_info"]
        ref = f"@{vcs['requested_revision']}" if vcs.get("requested_revision") else ""
        requirement = f"streamscope[{extra}] @ {vcs.get('vcs', 'git')}+{url}{ref}"
        return f"pip install {shlex.quote(requirement)}"
    return f"pip install '.[{extra}]' in a clone of streamscope (no release is on the public index yet)"


def _installed_origin() -> dict[str, Any] | None:
    try:
        recorded = distribution("streamscope").read_text("direct_url.json")
    except PackageNotFoundError:
        return None
    try:
        found = json.loads(recorded) if recorded else None
    except ValueError:
        return None
    return found if isinstance(found, dict) else None
