"""The ``streamscope`` command as the SDK installs it: the command itself comes with the server extra.

The SDK knows nothing of the server packages; the command-line distribution registers itself under the
``streamscope.cli`` entry-point group, and this looks it up by that name (as httpx's ``main`` does for its
``cli`` extra).
"""

from __future__ import annotations

import sys
from importlib.metadata import entry_points

from streamscope.install import install_command

ENTRY_POINT_GROUP = "streamscope.cli"


def main() -> None:
    commands = entry_points(group=ENTRY_POINT_GROUP)
    if not commands:
        print(f"the streamscope command needs the server extra: {install_command('server')}", file=sys.stderr)
        sys.exit(1)
    next(iter(commands)).load()()
