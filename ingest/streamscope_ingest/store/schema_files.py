"""Find the language-neutral files under ``schema/`` from a source checkout or an installed wheel.

The wheel carries ``schema/`` as ``streamscope_ingest/_schema`` (see ingest/pyproject.toml); a checkout has it
at the repository root. Everything that reads conventions or migrations goes through here.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent
_REPOSITORY_DIR = _PACKAGE_DIR.parent.parent


def schema_dir() -> Path:
    """The directory holding ``conventions/`` and ``migrations/``."""
    for candidate in (_PACKAGE_DIR / "_schema", _REPOSITORY_DIR / "schema"):
        if (candidate / "migrations").is_dir():
            return candidate
    raise FileNotFoundError(f"streamscope schema files not found next to {_PACKAGE_DIR}; reinstall the package")


def conventions_file() -> Path:
    return schema_dir() / "conventions" / "streaming.yaml"


def migrations_dir() -> Path:
    return schema_dir() / "migrations"
