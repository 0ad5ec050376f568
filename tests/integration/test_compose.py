"""docker-compose.yml is checked without a Docker engine: against the Compose Specification schema, and its
collector command is the CLI's own."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml

from ingest import store

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_SCHEMA = ROOT / "tests" / "fixtures" / "schemas" / "compose-spec.json"  # the Compose Specification's schema


def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_compose_file_follows_the_compose_specification():
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())  # the schema names draft-07 without its '#'


def test_collector_service_runs_the_collector_against_the_clickhouse_service():
    services = compose()["services"]
    command = services["collector"]["command"]
    assert command[0] == "collector"
    dsn = command[command.index("--storage") + 1]
    target = store.parse_dsn(dsn)
    assert target.host == "clickhouse" and "clickhouse" in services
    environment = services["clickhouse"]["environment"]
    assert (target.username, target.password, target.database) == (
        environment["CLICKHOUSE_USER"],
        environment["CLICKHOUSE_PASSWORD"],
        environment["CLICKHOUSE_DB"],
    )
    assert services["collector"]["depends_on"]["clickhouse"]["condition"] == "service_healthy"


def test_workload_service_loops_a_shipped_scenario_into_the_collector_service():
    from streamscope.workload.scenario import shipped

    services = compose()["services"]
    command = services["workload"]["command"]
    assert command[0] == "load" and command[1] in shipped() and "--loop" in command
    assert command[command.index("--collector") + 1] == "http://collector:4318"
    assert services["workload"]["depends_on"]["collector"]["condition"] == "service_healthy"
    assert services["workload"]["image"] == services["collector"]["image"]
