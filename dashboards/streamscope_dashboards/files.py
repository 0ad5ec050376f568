"""Where the generated Grafana files are: ``dashboards/grafana/`` in a checkout, ``_grafana`` in the wheel.

The compose stack mounts them from the checkout, and ``streamscope dashboards push`` reads them from either.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent


def grafana_dir() -> Path:
    """The directory holding ``dashboards/`` and ``provisioning/``."""
    installed = _PACKAGE_DIR / "_grafana"
    return installed if installed.is_dir() else _PACKAGE_DIR.parent / "grafana"
