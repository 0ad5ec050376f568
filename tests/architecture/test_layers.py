"""The layers of docs/architecture.md, enforced on every import of every module, lazy ones included.

Each package may import only the packages below it. A forbidden edge fails with the module, the line and the
rule it breaks, so the fix is to move the code, not to hide the import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PACKAGE_DIRS = {
    "streamscope": ROOT / "streamscope",
    "streamscope_ingest": ROOT / "ingest" / "streamscope_ingest",
    "streamscope_collector": ROOT / "collector" / "streamscope_collector",
    "streamscope_gpu_agent": ROOT / "gpu_agent" / "streamscope_gpu_agent",
    "streamscope_dashboards": ROOT / "dashboards" / "streamscope_dashboards",
    "streamscope_cli": ROOT / "cli" / "streamscope_cli",
}
OURS = tuple(PACKAGE_DIRS)

ALLOWED: dict[str, tuple[str, ...]] = {
    # importer (a package or one of its subpackages) -> the first-party modules it may import (prefixes)
    "streamscope": ("streamscope",),
    "streamscope_ingest.blocks": ("streamscope", "streamscope_ingest.blocks"),
    "streamscope_ingest.decode": ("streamscope", "streamscope_ingest.blocks", "streamscope_ingest.decode"),
    "streamscope_ingest.rollups": ("streamscope", "streamscope_ingest.blocks", "streamscope_ingest.rollups"),
    "streamscope_ingest.durability": (
        "streamscope",
        "streamscope_ingest.blocks",
        "streamscope_ingest.decode",
        "streamscope_ingest.durability",
    ),
    "streamscope_ingest.store": (
        "streamscope",
        "streamscope_ingest.blocks",
        "streamscope_ingest.rollups",
        "streamscope_ingest.store",
    ),
    "streamscope_ingest.analysis": (
        "streamscope",
        "streamscope_ingest.blocks",
        "streamscope_ingest.rollups",
        "streamscope_ingest.store",
        "streamscope_ingest.analysis",
    ),
    "streamscope_ingest": ("streamscope", "streamscope_ingest"),
    "streamscope_collector": ("streamscope", "streamscope_ingest", "streamscope_collector"),
    "streamscope_gpu_agent": ("streamscope", "streamscope_gpu_agent"),
    "streamscope_dashboards": (
        "streamscope",
        "streamscope_ingest.blocks",
        "streamscope_ingest.store",
        "streamscope_dashboards",
    ),
    "streamscope_cli": OURS,
}
"""The most specific key that prefixes a module's name holds its rule."""

SDK_PRIVATE = "streamscope._internal"


@dataclass(frozen=True)
class Edge:
    importer: str
    imported: str
    path: Path
    line: int

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.importer} imports {self.imported}"


def module_name(package: str, path: Path) -> str:
    parts = [package, *path.relative_to(PACKAGE_DIRS[package]).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, importer: str) -> list[tuple[str, int]]:
    """Every first-party module ``path`` imports, wherever the statement stands (functions, TYPE_CHECKING)."""
    found = []
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            names = [f"{module}.{alias.name}" for alias in node.names]
            submodules = [name for name in names if is_module(name)]
            found += [(name, node.lineno) for name in submodules] if len(submodules) == len(names) else []
            found += [(module, node.lineno)] if len(submodules) < len(names) else []
    return [(name, line) for name, line in found if name.split(".")[0] in OURS]


def is_module(name: str) -> bool:
    """Whether ``name`` is one of our modules or packages (``from a import b`` may import either b or a's b)."""
    top, _, rest = name.partition(".")
    if top not in PACKAGE_DIRS:
        return False
    path = PACKAGE_DIRS[top].joinpath(*rest.split(".")) if rest else PACKAGE_DIRS[top]
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


@cache
def all_edges() -> tuple[Edge, ...]:
    """Every first-party import of every module, read once for all the tests below."""
    edges: list[Edge] = []
    for package, directory in PACKAGE_DIRS.items():
        for path in sorted(directory.rglob("*.py")):
            importer = module_name(package, path)
            edges += [Edge(importer, imported, path, line) for imported, line in imports_of(path, importer)]
    return tuple(edges)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def rule_key(importer: str) -> str:
    """The key of ``ALLOWED`` whose rule governs ``importer``: the most specific one."""
    return max((k for k in ALLOWED if within(importer, k)), key=len)


def rule_for(importer: str) -> tuple[str, ...]:
    return ALLOWED[rule_key(importer)]


def test_the_walk_sees_every_package_and_its_imports():
    edges = all_edges()
    importers = {e.importer.split(".")[0] for e in edges}
    assert importers == set(OURS)
    assert any(
        e.importer.startswith("streamscope_cli") and e.imported.startswith("streamscope_collector") for e in edges
    )


@pytest.mark.parametrize("importer", sorted(ALLOWED))
def test_each_layer_imports_only_what_is_below_it(importer: str):
    broken = [
        str(e)
        for e in all_edges()
        if rule_key(e.importer) == importer and not any(within(e.imported, allowed) for allowed in ALLOWED[importer])
    ]
    assert not broken, "imports against docs/architecture.md:\n" + "\n".join(broken)


def test_nothing_imports_the_command_line_package():
    broken = [
        str(e)
        for e in all_edges()
        if within(e.imported, "streamscope_cli") and not within(e.importer, "streamscope_cli")
    ]
    assert not broken, "\n".join(broken)


def test_server_packages_use_only_the_sdks_public_modules():
    broken = [str(e) for e in all_edges() if within(e.imported, SDK_PRIVATE) and not within(e.importer, "streamscope")]
    assert not broken, "\n".join(broken)


def test_the_rules_catch_a_forbidden_edge(tmp_path: Path):
    """The walk must see a lazy import inside a function, or the test above would pass on anything."""
    module = tmp_path / "probe.py"
    module.write_text("def late():\n    from streamscope_collector.service import Collector\n    return Collector\n")
    (imported, _), *_ = imports_of(module, "streamscope_ingest.decode.probe")
    assert imported == "streamscope_collector.service"
    assert not any(within(imported, allowed) for allowed in rule_for("streamscope_ingest.decode.probe"))


HEAVY = (
    "numpy",
    "pyarrow",
    "clickhouse_connect",
    "chdb",
    "fastapi",
    "starlette",
    "grpc",
    "yaml",
    "click",
    "rich",
    "ctypes",
)


def test_importing_the_sdk_stays_light():
    """An application that imports streamscope pays for OpenTelemetry and httpx, not for the server side."""
    probe = "import sys, streamscope; print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    loaded = set(
        subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
    )
    assert "streamscope" in loaded and "opentelemetry" in loaded
    assert not loaded & set(HEAVY), f"import streamscope loads {sorted(loaded & set(HEAVY))}"
    assert not loaded & (set(OURS) - {"streamscope"})
