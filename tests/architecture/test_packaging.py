"""What each distribution installs: the SDK wheel brings exactly one import package, and each server wheel its own."""

from __future__ import annotations

import shlex
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

import streamscope
from streamscope import _main
from streamscope.install import command_for, install_command

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = {
    ".": "streamscope",
    "ingest": "streamscope_ingest",
    "collector": "streamscope_collector",
    "gpu_agent": "streamscope_gpu_agent",
    "dashboards": "streamscope_dashboards",
    "cli": "streamscope_cli",
}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    """Every distribution built as `pip install` builds it (offline: hatchling is installed)."""
    out = tmp_path_factory.mktemp("wheels")
    built = {}
    for folder, package in DISTRIBUTIONS.items():
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-w", str(out), ROOT / folder],
            check=True,
            capture_output=True,
        )
        (wheel,) = out.glob(f"{package}-*.whl")
        built[package] = zipfile.ZipFile(wheel)
    return built


def top_level(wheel: zipfile.ZipFile) -> set[str]:
    return {name.split("/")[0] for name in wheel.namelist() if not name.split("/")[0].endswith(".dist-info")}


@pytest.mark.parametrize("package", sorted(DISTRIBUTIONS.values()))
def test_each_wheel_installs_one_import_package_with_its_types(wheels: dict[str, zipfile.ZipFile], package: str):
    assert top_level(wheels[package]) == {package}
    assert f"{package}/py.typed" in wheels[package].namelist()


def test_the_sdk_wheel_carries_no_server_code(wheels: dict[str, zipfile.ZipFile]):
    names = wheels["streamscope"].namelist()
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        line for line in wheels["streamscope"].read(metadata).decode().splitlines() if line.startswith("Requires")
    ]
    base = [line for line in requires if "extra ==" not in line and line.startswith("Requires-Dist")]
    assert {line.split()[1].split(">")[0].split("<")[0] for line in base} == {
        "opentelemetry-api",
        "opentelemetry-sdk",
        "opentelemetry-exporter-otlp-proto-http",
        "httpx",
    }
    assert not [n for n in names if n.endswith(".py") and not n.startswith("streamscope/")]


def test_every_distribution_reads_the_one_version():
    for folder in DISTRIBUTIONS:
        project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())
        assert project["project"]["dynamic"] == ["version"]
        version_file = (ROOT / folder / project["tool"]["hatch"]["version"]["path"]).resolve()
        assert version_file == ROOT / "streamscope" / "__init__.py"


def test_built_wheels_carry_that_version(wheels: dict[str, zipfile.ZipFile]):
    for package, wheel in wheels.items():
        assert Path(wheel.filename).name.startswith(f"{package}-{streamscope.__version__}-")


def test_the_command_hands_over_to_the_cli_distribution():
    """The console script the SDK installs runs the full command when streamscope-cli is installed."""
    result = subprocess.run(["streamscope", "--version"], capture_output=True, text=True, check=True)
    assert streamscope.__version__ in result.stdout


def test_without_the_cli_distribution_the_command_says_what_to_install(monkeypatch, capsys):
    """DOUBLE: the installed entry points, emptied as an SDK-only install has them (this environment has all six)."""
    monkeypatch.setattr(_main, "entry_points", lambda group: [])
    with pytest.raises(SystemExit) as exit_info:
        _main.main()
    assert exit_info.value.code == 1
    assert install_command("server") in capsys.readouterr().err


def test_the_install_hint_is_a_command_that_works_where_it_runs():
    """No release is on the public index: the hint names the clone (or wheel, or git URL) this streamscope came from,
    and pip accepts it here (resolved, not installed)."""
    hint = install_command("server")
    assert hint.startswith("pip install ") and "[server]" in hint
    dry_run = subprocess.run(
        [sys.executable, "-m", *shlex.split(hint), "--dry-run", "--no-deps", "--ignore-installed", "--quiet"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert dry_run.returncode == 0, dry_run.stderr[-2000:]


@pytest.mark.parametrize(
    ("origin", "expected"),
    [
        ({"url": "file:///src/stream%20scope", "dir_info": {"editable": True}},
         "pip install -e '/src/stream scope[grpc]'"),
        ({"url": "file:///src/streamscope", "dir_info": {}}, "pip install '/src/streamscope[grpc]'"),
        ({"url": "file:///w/streamscope-0.1.0-py3-none-any.whl", "archive_info": {}},
         "pip install '/w/streamscope-0.1.0-py3-none-any.whl[grpc]'"),
        ({"url": "https://github.com/o/streamscope", "vcs_info": {"vcs": "git", "requested_revision": "v0.1"}},
         "pip install 'streamscope[grpc] @ git+https://github.com/o/streamscope@v0.1'"),
        (None, "pip install '.[grpc]' in a clone of streamscope (no release is on the public index yet)"),
    ],
)  # fmt: skip
def test_the_install_hint_names_the_source_pip_recorded(origin, expected):
    assert command_for("grpc", origin) == expected
