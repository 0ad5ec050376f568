"""Generate ``streamscope/semconv.py`` from ``schema/conventions/streaming.yaml``.

Run ``python -m streamscope_cli.dev.semconv_codegen`` after editing the registry; the test suite renders
the module again and fails if the committed file differs, so code and YAML cannot drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import yaml

import streamscope
from streamscope_ingest.store.schema_files import conventions_file

TARGET = Path(streamscope.__file__).resolve().parent / "semconv.py"
LINE_LENGTH = 120  # pyproject.toml [tool.ruff]
ORIGINS = {"semconv": "OTel GenAI semconv", "vllm": "vLLM's tracing", "streamscope": "streamscope extension"}


def _constant(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", name).upper()


def _doc(attr: dict[str, Any]) -> str:
    parts = [attr["brief"].rstrip(".") + "."]
    facts = [f"type {attr['type']}"]
    if attr.get("unit"):
        facts.append(f"unit {attr['unit']}")
    level = attr["requirement"].replace("_", " ")
    if attr.get("condition"):
        level += f" ({attr['condition']})"
    facts.append(level)
    facts.append("sides: " + ", ".join(attr["sides"]))
    facts.append(ORIGINS[attr["origin"]])
    parts.append("; ".join(facts) + ".")
    return " ".join(parts)


def _tuple(name: str, attributes: list[str]) -> list[str]:
    """A tuple of constants, one per line, as ruff format lays it out."""
    return [f"{name}: Final = (", *(f"    {_constant(a)}," for a in attributes), ")"]


def _strings(name: str, values: list[str]) -> list[str]:
    """A tuple of string literals on one line, or one per line when that is too long (as ruff format does)."""
    one_line = f"{name}: Final = ({', '.join(f'{chr(34)}{v}{chr(34)}' for v in values)})"
    if len(one_line) <= LINE_LENGTH:
        return [one_line]
    return [f"{name}: Final = (", *(f'    "{v}",' for v in values), ")"]


def _values_class(name: str, values: list[str]) -> list[str]:
    """A namespace of one constant per value, so code names a value rather than spelling it."""
    title = "".join(part.capitalize() for part in _constant(name).split("_"))
    return [
        "",
        "",
        f"class {title}Values:",
        f'    """The values of ``{name}``."""',
        "",
        *(f'    {_constant(v)}: Final = "{v}"' for v in values),
        "",
    ]


def render(registry: dict[str, Any]) -> str:
    """The Python source of the constants module for ``registry`` (the parsed YAML)."""
    lines = [
        '"""Names of the streamscope streaming span conventions.',
        "",
        "GENERATED from schema/conventions/streaming.yaml by streamscope_cli.dev.semconv_codegen;",
        "do not edit by hand.",
        '"""',
        "",
        "from typing import Final",
        "",
        f"REGISTRY_VERSION: Final = {registry['registry_version']}",
        f'SEMCONV_VERSION: Final = "{registry["semconv_version"]}"',
        "",
    ]
    for attr in registry["attributes"] + registry.get("signal_attributes", []):
        const = _constant(attr["name"])
        lines.append(f'{const}: Final = "{attr["name"]}"')
        lines.append(f'"""{_doc(attr)}"""')
        if "enum" in attr:
            lines.extend(_strings(f"{const}_VALUES", attr["enum"]))
            lines.extend(_values_class(attr["name"], attr["enum"]))
        lines.append("")
    lines.append(f'METRIC_PREFIX: Final = "{registry["metric_prefix"]}"')
    lines.extend(_strings("METRIC_SOURCES", registry["metric_sources"]))
    lines.append("")
    (event,) = registry["events"]
    lines.append(f'CHUNK_EVENT: Final = "{event["name"]}"')
    lines.append(f'"""{event["brief"]}"""')
    lines.append("")
    lines.extend(_tuple("PACKED_ARRAYS", registry["encodings"]["packed"]["arrays"]))
    lines.append('"""The packed encoding\'s parallel arrays, in their canonical order."""')
    lines.extend(_tuple("CHUNK_EVENT_ATTRIBUTES", event["attributes"]))
    lines.append('"""The chunk event\'s attributes, in the same order as PACKED_ARRAYS after the offset."""')
    json_progress = [a["name"] for a in registry["attributes"] if a["name"].startswith("streamscope.json.")]
    lines.extend(_tuple("JSON_PROGRESS", json_progress))
    lines.append('"""The attributes of a JSON document followed as it streamed (``streamscope.json.*``)."""')
    for log_event in registry.get("log_events", []):
        lines.append("")
        lines.append(f'{_constant(log_event["name"])}_EVENT: Final = "{log_event["name"]}"')
        lines.append(f'"""{" ".join(log_event["brief"].split())}"""')
    lines.append("")
    return "\n".join(lines)


def load_registry(path: Path | None = None) -> dict[str, Any]:
    return yaml.safe_load((path or conventions_file()).read_text())


def main() -> int:
    TARGET.write_text(render(load_registry()))
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
