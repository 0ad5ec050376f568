from __future__ import annotations

import yaml

from streamscope import semconv
from streamscope_cli.dev import semconv_codegen
from streamscope_ingest.store.schema_files import conventions_file

LEVELS = {"required", "conditionally_required", "recommended", "opt_in"}
TYPES = {"string", "int", "double", "boolean", "string[]", "int[]", "int64s"}
SIDES = {"client", "server", "browser", "gateway", "simulator", "agent"}


def test_generated_module_is_current():
    expected = semconv_codegen.render(semconv_codegen.load_registry())
    assert semconv_codegen.TARGET.read_text() == expected, (
        "streamscope/semconv.py is stale: python -m streamscope_cli.dev.semconv_codegen"
    )


def test_every_attribute_is_fully_described():
    registry = yaml.safe_load(conventions_file().read_text())
    every = registry["attributes"] + registry["signal_attributes"]
    names = [a["name"] for a in every]
    assert len(names) == len(set(names))
    for attribute in every:
        assert attribute["type"] in TYPES, attribute
        assert attribute["requirement"] in LEVELS, attribute
        assert set(attribute["sides"]) <= SIDES and attribute["sides"], attribute
        assert attribute["brief"], attribute
        if attribute["origin"] == "streamscope":
            assert attribute["name"].startswith("streamscope."), attribute
        else:
            assert not attribute["name"].startswith("streamscope."), attribute
        if attribute["requirement"] == "conditionally_required":
            assert attribute.get("condition"), attribute
    for name in registry["encodings"]["packed"]["arrays"] + registry["events"][0]["attributes"]:
        assert name in names
    for event in registry["log_events"]:
        assert set(event["attributes"]) <= set(names), event["name"]


def test_packed_arrays_and_events_line_up():
    assert semconv.PACKED_ARRAYS[0] == semconv.STREAMSCOPE_CHUNKS_OFFSET_US
    assert [a.rsplit(".", 1)[1] for a in semconv.PACKED_ARRAYS[1:]] == [
        a.rsplit(".", 1)[1] for a in semconv.CHUNK_EVENT_ATTRIBUTES
    ]
