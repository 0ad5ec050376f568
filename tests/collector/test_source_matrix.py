"""The README's source matrix says which release of each library was tested: it must name the releases the tests
pin, one row per source the collector reads, so that bumping a pin without the matrix (or the reverse) fails."""

from __future__ import annotations

import json
import re
from pathlib import Path

from streamscope_ingest.decode.sources import NAMES
from tests.environments import VLLM_RELEASE

ROOT = Path(__file__).resolve().parents[2]


def pinned(path: str, package: str) -> str:
    """The release of ``package`` that ``path`` (a requirements file or pyproject.toml) pins with ``==``."""
    found = re.search(rf'^\s*"?{re.escape(package)}==([\w.]+)', (ROOT / path).read_text(), re.M)
    assert found, f"{package} is not pinned in {path}"
    return found.group(1)


def npm_pinned(alias: str) -> str:
    """The release the Vercel AI test app pins under ``alias`` (an exact version, or ``npm:ai@version``)."""
    spec = json.loads((ROOT / "tests/vercel_ai/package.json").read_text())["dependencies"][alias]
    return spec.rsplit("@", 1)[-1]


def pins() -> dict[str, list[str]]:
    """Per source (``streams.source``), every release its tests run."""
    return {
        "openllmetry": [pinned("pyproject.toml", "opentelemetry-instrumentation-openai")],
        "openllmetry-langchain": [
            pinned("tests/langchain/requirements.txt", "opentelemetry-instrumentation-langchain")
        ],
        "opentelemetry-genai": [
            pinned("pyproject.toml", "opentelemetry-instrumentation-openai-v2"),
            pinned("pyproject.toml", "opentelemetry-util-genai"),
            pinned("tests/util_genai/requirements.txt", "opentelemetry-util-genai"),
        ],
        "openlit": [pinned("tests/openlit/requirements.txt", "openlit")],
        "litellm": [pinned("tests/litellm/requirements.txt", "litellm")],
        "vercel-ai": [npm_pinned("ai"), npm_pinned("ai-7")],
        "vllm": [VLLM_RELEASE.split("==")[1]],
    }


def matrix() -> dict[str, str]:
    """The README's matrix: each row's source and its "tested with" cell."""
    readme = (ROOT / "README.md").read_text()
    table = readme[readme.index("| `streams.source` | tested with |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([\w-]+)`[^|]* \| ([^|]+) \|", table, re.M)
    return {source: tested for source, tested in rows if source != "streams.source"}


def test_the_source_matrix_names_the_releases_the_tests_pin():
    tested = matrix()
    releases = pins()
    assert set(tested) == set(releases) == set(NAMES), "one row per source the collector reads"
    for source, versions in releases.items():
        for version in versions:
            assert re.search(rf"(?<![\w.]){re.escape(version)}(?![\w])", tested[source]), (source, version)
