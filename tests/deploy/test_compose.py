"""docker-compose.yml and what it mounts, checked without a Docker engine or a Grafana server: the file against
the Compose Specification schema, its services' commands against the real CLI, the ClickHouse users config on
the embedded engine, and Grafana's provisioning files against the keys the ClickHouse plugin reads."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path, PurePosixPath
from typing import Any

import click
import jsonschema
import pytest
import yaml

from streamscope_cli.main import cli
from streamscope_dashboards import alerts, fleet
from streamscope_dashboards.macros import QueryContext, resolve
from streamscope_dashboards.panels import attribution, common, cost, drilldown, nodes, quality
from streamscope_ingest import store
from tests.clickhouse_account import run_as

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_SCHEMA = ROOT / "tests" / "fixtures" / "schemas" / "compose-spec.json"  # the Compose Specification's schema
PROVISIONING = ROOT / "dashboards" / "grafana" / "provisioning"
PLUGIN_ID = "grafana-clickhouse-datasource"
DATASOURCE_UID = "clickhouse"  # generated dashboards and alert rules name the datasource by this uid
# jsonData keys the plugin's v4 backend reads (pkg/plugin/settings.go); v3 names such as `server` are only
# migrated by its config editor, never by provisioning.
PLUGIN_JSON_DATA_KEYS = {
    "host",
    "port",
    "protocol",
    "secure",
    "path",
    "username",
    "defaultDatabase",
    "tlsSkipVerify",
    "tlsAuth",
    "tlsAuthWithCACert",
    "dialTimeout",
    "queryTimeout",
    "connMaxLifetime",
    "maxIdleConns",
    "maxOpenConns",
    "customSettings",
    "httpHeaders",
    "forwardGrafanaHeaders",
}
# The plugin's driver sets this on every query (grafana/clickhouse-datasource#325), so its user must be
# allowed to change settings.
PLUGIN_QUERY_SETTINGS = "max_execution_time = 60"
COMPOSE_VARIABLE = re.compile(r"\$\{(?P<name>\w+)(?::-(?P<default>[^}]*))?\}")
EXACT_TAG = re.compile(r"\d+\.\d+\.\d+(\.\d+)?(-[\w.-]+)?")  # 26.9.6.6, 12.4.11, 3.11.14-slim-bookworm


def compose_text() -> str:
    return (ROOT / "docker-compose.yml").read_text()


def compose() -> dict:
    return yaml.safe_load(compose_text())


def with_local_defaults(node: Any) -> Any:
    """The compose file as `docker compose` reads it with none of its variables set."""
    if isinstance(node, dict):
        return {key: with_local_defaults(value) for key, value in node.items()}
    if isinstance(node, list):
        return [with_local_defaults(value) for value in node]
    if isinstance(node, str):
        return COMPOSE_VARIABLE.sub(lambda match: match["default"] or "", node)
    return node


def services() -> dict:
    return with_local_defaults(compose())["services"]


def parsed_command(command: list[str]) -> dict:
    """Parse a service's command exactly as the image's `streamscope` entrypoint would, without running it."""
    group = cli
    root = click.Context(group, info_name="streamscope")
    subcommand = group.get_command(root, command[0])
    assert subcommand is not None, f"no streamscope subcommand {command[0]!r}"
    return subcommand.make_context(command[0], list(command[1:]), parent=root).params


def bind_mounts(service: dict) -> dict[str, Path]:
    """Container path -> repository path of each of the service's bind mounts."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target = volume.split(":")[:2]
        if source.startswith("."):
            mounts[target] = ROOT / source
    return mounts


def published_ports(service: dict) -> set[int]:
    published = set()
    for port in service.get("ports", []):
        host_side = port.rsplit(":", 1)[0]  # "127.0.0.1:3000:3000" or "4318:4318"
        published.add(int(host_side.rsplit(":", 1)[-1]))
    return published


def users_config() -> ET.Element:
    [path] = [p for target, p in bind_mounts(services()["clickhouse"]).items() if "/users.d/" in target]
    return ET.parse(path).getroot()


def user(name: str) -> ET.Element:
    found = users_config().find(f"users/{name}")
    assert found is not None, f"no ClickHouse user {name!r}"
    return found


def grants(account: ET.Element) -> list[str]:
    return [query.text.strip() for query in account.findall("grants/query")]


SYSTEM_GRANT = re.compile(r"GRANT SELECT\((?P<columns>[\w, ]+)\) ON system\.(?P<table>\w+)")


def system_grants(name: str) -> list[str]:
    """The grants of system-table columns a reading account holds (a server requires them: config.d)."""
    return [grant for grant in grants(user(name)) if SYSTEM_GRANT.fullmatch(grant)]


def provisioning(relative: str) -> dict:
    return yaml.safe_load((PROVISIONING / relative).read_text())


def datasource() -> dict:
    [only] = provisioning("datasources/clickhouse.yaml")["datasources"]
    return only


def service_target(service: str, option: str = "--storage") -> store.StoreTarget:
    command = services()[service]["command"]
    return store.parse_dsn(command[command.index(option) + 1])


def collector_target() -> store.StoreTarget:
    return service_target("collector")


def password_of(account: ET.Element) -> str:
    return services()["clickhouse"]["environment"][account.find("password").get("from_env")]


def test_compose_file_follows_the_compose_specification():
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    jsonschema.Draft7Validator(schema).validate(compose())  # the schema names draft-07 without its '#'


def test_every_variable_has_a_local_default_that_the_readme_documents():
    text = compose_text()
    variables = list(COMPOSE_VARIABLE.finditer(text))
    assert text.count("$") == len(variables), "an interpolation form the checks here do not read"
    readme = (ROOT / "README.md").read_text()
    for variable in variables:
        assert variable["default"], f"{variable['name']} has no local default"
        assert f"`{variable['name']}`" in readme and f"`{variable['default']}`" in readme


def test_every_file_the_stack_mounts_or_builds_from_exists():
    for name, service in services().items():
        for target, source in bind_mounts(service).items():
            assert source.exists(), f"{name} mounts {source} at {target}"
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file()


def test_every_image_is_pinned_to_an_exact_version():
    all_services = services()
    built_here = {service["image"] for service in all_services.values() if "build" in service}
    for name, service in all_services.items():
        image = service["image"]
        if image in built_here:
            continue
        assert EXACT_TAG.fullmatch(image.partition(":")[2]), f"{name} runs {image}, not an exact version"
    bases = re.findall(r"^FROM (\S+)", (ROOT / "Dockerfile").read_text(), flags=re.MULTILINE)
    assert bases and all(EXACT_TAG.fullmatch(base.partition(":")[2]) for base in bases)


def test_every_port_the_readme_quick_start_names_is_published():
    readme = (ROOT / "README.md").read_text()
    quick_start = readme.split("## Run the stack with Docker Compose", 1)[1].split("\n## ", 1)[0]
    named = {int(port) for port in re.findall(r"localhost:(\d+)", quick_start)}
    assert named >= {3000, 4317, 4318, 8123}
    published = set().union(*(published_ports(service) for service in services().values()))
    assert named <= published


def test_every_dependency_waits_for_a_health_check_or_a_one_shot_job_to_succeed():
    all_services = services()
    for name, service in all_services.items():
        for dependency, condition in service.get("depends_on", {}).items():
            if "healthcheck" in all_services[dependency]:
                assert condition == {"condition": "service_healthy"}, f"{name} -> {dependency}"
            else:  # a job that exits: started again by nothing, waited for until it has succeeded
                assert condition == {"condition": "service_completed_successfully"}, f"{name} -> {dependency}"
                assert "restart" not in all_services[dependency]
    assert all_services["grafana"]["depends_on"] == {"clickhouse": {"condition": "service_healthy"}}


@pytest.mark.parametrize("name", ["migrate", "collector", "workload", "chat", "gpu-agent"])
def test_services_of_the_streamscope_image_run_commands_the_cli_accepts(name):
    service = services()[name]
    assert service["image"] == services()["collector"]["image"]
    parsed_command(service["command"])


def test_the_migrate_job_alone_changes_the_schema_and_the_collector_inserts_and_reads_as_other_accounts():
    admin, writer, reader = (
        service_target("migrate"),
        collector_target(),
        service_target("collector", "--query-storage"),
    )
    database = admin.database
    for target in (admin, writer, reader):
        assert (target.host, target.port, target.database) == ("clickhouse", 8123, database)
        assert target.password == password_of(user(target.username))
    assert len({admin.username, writer.username, reader.username}) == 3
    # and its DDL on a cluster (the `cluster` profile) runs on every node
    assert grants(user(admin.username)) == [f"GRANT ALL ON {database}.*", "GRANT CLUSTER ON *.*"]
    assert grants(user(writer.username)) == [f"GRANT INSERT ON {database}.*"]
    assert grants(user(reader.username)) == [f"GRANT SELECT ON {database}.*", *system_grants(reader.username)]
    assert parsed_command(services()["migrate"]["command"])["storage_dsn"]
    assert parsed_command(services()["collector"]["command"])["no_migrate"]
    assert services()["collector"]["depends_on"] == {"migrate": {"condition": "service_completed_successfully"}}


def test_workload_service_loops_a_shipped_scenario_into_the_collector_service():
    from streamscope_cli.workload.scenario import shipped

    params = parsed_command(services()["workload"]["command"])
    assert params["scenario"] in shipped() and params["loop"]
    assert params["collector_url"] == "http://collector:4318"


def test_chat_page_sends_browser_spans_to_the_published_collector_which_admits_its_origin():
    chat = parsed_command(services()["chat"]["command"])
    assert chat["collector_url"] == "http://collector:4318"
    assert chat["page_collector_url"] == "http://localhost:4318"  # as the browser on the host reaches it
    assert chat["host"] == "0.0.0.0" and chat["port"] in published_ports(services()["chat"])
    assert 4318 in published_ports(services()["collector"])
    origins = services()["collector"]["environment"]["STREAMSCOPE_CORS_ORIGINS"]
    assert f"http://localhost:{chat['port']}" in origins.split(",")


def test_gpu_profile_runs_the_agent_on_nvidia_devices_against_the_collector():
    service = services()["gpu-agent"]
    assert service["profiles"] == ["gpu"]
    [devices] = service["deploy"]["resources"]["reservations"]["devices"]
    assert devices["driver"] == "nvidia" and devices["count"] == "all" and "gpu" in devices["capabilities"]
    params = parsed_command(service["command"])
    assert params["node"] and not params["no_gpu"] and not params["once"]
    assert params["engine_url"].startswith("http://") and params["engine_url"].endswith("/metrics")
    assert params["collector_url"] == "http://collector:4318"


def test_grafana_user_only_reads_the_streamscope_database():
    name = datasource()["jsonData"]["username"]
    reader = user(name)
    assert grants(reader) == [f"GRANT SELECT ON {collector_target().database}.*", *system_grants(name)]
    assert all(grant.endswith(" ON system.parts") for grant in system_grants(name))  # nothing else of system
    assert reader.find("password").get("from_env") in services()["clickhouse"]["environment"]


def engine_users_config(account: ET.Element) -> str:
    """A users config for the embedded engine whose ``default`` user has ``account``'s grants and profile."""
    config = ET.Element("clickhouse")
    profiles = ET.SubElement(config, "profiles")
    profiles.extend(users_config().find("profiles"))
    ET.SubElement(profiles, "default")
    ET.SubElement(ET.SubElement(config, "quotas"), "default")
    default = ET.SubElement(ET.SubElement(config, "users"), "default")
    ET.SubElement(default, "password")
    ET.SubElement(ET.SubElement(default, "networks"), "ip").text = "::/0"
    ET.SubElement(default, "profile").text = account.findtext("profile")
    ET.SubElement(default, "quota").text = "default"
    default.append(account.find("grants"))
    return ET.tostring(config, encoding="unicode")


def as_account(name: str, data: Path, *actions: str) -> dict[str, str]:
    """Try ``actions`` (tests.clickhouse_account) as the account ``name`` on the engine at ``data``."""
    return run_as(data, engine_users_config(user(name)), name, *actions)


def test_each_account_may_do_its_job_and_nothing_more_on_the_clickhouse_engine(tmp_path):
    """The shipped grants and profiles, enforced by the engine itself, against streamscope's own code paths."""
    data = tmp_path / "engine"
    admin, writer, reader = (
        service_target("migrate"),
        collector_target(),
        service_target("collector", "--query-storage"),
    )
    grafana = datasource()["jsonData"]["username"]
    assert as_account(admin.username, data, "create database", "migrate") == {"create database": "ok", "migrate": "ok"}

    trespass = ("create database", "migrate", "alter delete", "truncate", "drop table")
    assert as_account(
        writer.username, data, "insert spans", "look up repeated spans", "streamscope sql", *trespass
    ) == {
        "insert spans": "ok",
        "look up repeated spans": "denied",  # the writer cannot even read back what it wrote
        "streamscope sql": "denied",
        **dict.fromkeys(trespass, "denied"),
    }
    for name in (reader.username, grafana):
        assert as_account(
            name, data, "look up repeated spans", "streamscope sql", "dashboard query", "insert spans", *trespass
        ) == {
            "look up repeated spans": "ok",
            "streamscope sql": "ok",
            "dashboard query": "ok",  # with the plugin's per-query settings
            "insert spans": "denied",
            **dict.fromkeys(trespass, "denied"),
        }


def test_datasource_is_the_clickhouse_service_read_as_the_grafana_user():
    source = datasource()
    assert source["uid"] == DATASOURCE_UID and source["type"] == PLUGIN_ID
    settings = source["jsonData"]
    assert set(settings) <= PLUGIN_JSON_DATA_KEYS
    assert settings["host"] in services() and settings["port"] == 8123 and settings["protocol"] == "http"
    assert settings["defaultDatabase"] == collector_target().database
    [variable] = re.fullmatch(r"\$\{(\w+)\}", source["secureJsonData"]["password"]).groups()  # no defaults here
    grafana, clickhouse = services()["grafana"], services()["clickhouse"]
    reader = user(settings["username"])
    assert grafana["environment"][variable] == clickhouse["environment"][reader.find("password").get("from_env")]


def test_grafana_installs_the_plugin_and_mounts_provisioning_and_dashboards():
    grafana = services()["grafana"]
    environment = grafana["environment"]
    plugin, _, version = environment["GF_PLUGINS_PREINSTALL_SYNC"].partition("@")
    assert plugin == PLUGIN_ID and EXACT_TAG.fullmatch(version)
    assert environment["GF_AUTH_ANONYMOUS_ENABLED"] == "true" and environment["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"
    assert environment["GF_SECURITY_ADMIN_PASSWORD"]
    assert all(volume.endswith(":ro") for volume in grafana["volumes"] if volume.startswith("."))
    mounts = bind_mounts(grafana)
    assert mounts["/etc/grafana/provisioning"] == PROVISIONING  # the image's GF_PATHS_PROVISIONING
    [provider] = provisioning("dashboards/streamscope.yaml")["providers"]
    assert provider["type"] == "file" and provider["folder"] == "streamscope"
    assert mounts[provider["options"]["path"]] == ROOT / "dashboards" / "grafana" / "dashboards"
    assert PurePosixPath(provider["options"]["path"]).is_absolute()


@pytest.mark.parametrize(
    ("collector", "grafana"),
    [("collector", "grafana"), ("collector-1", "grafana-cluster"), ("collector-2", "grafana-cluster")],
)
def test_grafanas_contact_point_sends_the_token_the_collectors_alert_webhook_takes(monkeypatch, collector, grafana):
    """The webhook takes only its own token: Grafana sends it as a bearer token from the variable the collector's
    option reads, both given the same value (a tenant's token is refused there)."""
    [point] = provisioning("alerting/contact-points.yaml")["contactPoints"]
    [settings] = [receiver["settings"] for receiver in point["receivers"] if receiver["type"] == "webhook"]
    assert settings["authorization_scheme"] == "Bearer"
    [variable] = re.fullmatch(r"\$\{(\w+)\}", settings["authorization_credentials"]).groups()  # no defaults here
    sent = services()[grafana]["environment"][variable]
    for name, value in services()[collector]["environment"].items():
        monkeypatch.setenv(name, value)  # as the container's environment gives it to the entrypoint
    assert sent and parsed_command(services()[collector]["command"])["alert_webhook_token"] == sent


def test_the_collectors_spool_outlives_its_container():
    """What the collector acknowledged but has not stored yet is in its spool, under the image's data directory:
    a named volume keeps it when the container is recreated, and the image makes that directory its user's, which
    a fresh volume then takes over."""
    dockerfile = (ROOT / "Dockerfile").read_text()
    [data_dir] = re.findall(r"^ENV STREAMSCOPE_DATA_DIR=(\S+)", dockerfile, flags=re.MULTILINE)
    [user] = re.findall(r"^USER (\S+)", dockerfile, flags=re.MULTILINE)
    assert re.search(rf"install -d -o {user} -g {user} {re.escape(data_dir)}\b", dockerfile)
    collector = services()["collector"]
    assert "--spool-dir" not in collector["command"]  # so the spool is under the data directory
    named = {target: source for source, target, *_ in (v.split(":") for v in collector["volumes"])}
    assert named[data_dir] in compose()["volumes"]


def test_the_provisioning_mount_has_every_folder_grafana_reads():
    """The read-only mount replaces Grafana's whole provisioning folder; Grafana logs an error at every start for
    each of its folders that is missing (plugins/ is read even when no app plugin is provisioned)."""
    assert all((PROVISIONING / folder).is_dir() for folder in ("datasources", "dashboards", "alerting", "plugins"))
    assert not [path for path in (PROVISIONING / "plugins").iterdir() if path.suffix in (".yaml", ".yml")]


def _queries_run_by_readers() -> list[str]:
    """Every query a dashboard, an alert rule or the report runs that reads a system table, as the server gets it."""
    queries = [
        target["rawSql"]
        for path in sorted((ROOT / "dashboards" / "grafana" / "dashboards").glob("*.json"))
        for panel in json.loads(path.read_text())["panels"]
        for target in panel.get("targets", [])
    ]
    queries += [rule.sql for rule in alerts.RULES]
    modules = (attribution, common, cost, drilldown, nodes, quality, fleet)
    queries += [value for module in modules for value in vars(module).values() if isinstance(value, str)]
    at = datetime.now(UTC)
    context = QueryContext(at - timedelta(hours=1), at, timedelta(minutes=1))
    return [resolve(query, context, common.DEFAULTS) for query in queries if "system." in query and "SELECT" in query]


def _system_columns_read(client, query: str) -> dict[str, set[str]]:
    """System table -> the columns of it ``query`` reads, from the server's own analysis of it (EXPLAIN QUERY TREE:
    each COLUMN names the TABLE it comes from)."""
    tree = "\n".join(row[0] for row in client.query(f"EXPLAIN QUERY TREE {query}").result_rows)
    tables = dict(re.findall(r"TABLE id: (\d+),(?: alias: \w+,)? table_name: system\.(\w+)", tree))
    read: dict[str, set[str]] = {}
    for column, source in re.findall(r"COLUMN id: \d+, column_name: (\w+), result_type: .*?, source_id: (\d+)", tree):
        if source in tables:
            read.setdefault(tables[source], set()).add(column)
    return read


def test_readers_hold_a_grant_for_every_system_column_their_queries_read(store_client):
    """The server the stack runs requires a grant to read a system table (config.d:
    select_from_system_db_requires_grant), the embedded engine does not; so here every system column a dashboard,
    rule or report query reads is checked against the grants of the accounts that run them (system.tables,
    columns and databases are readable by every account and need none)."""
    needed: dict[str, set[str]] = {}
    for query in _queries_run_by_readers():
        for table, columns in _system_columns_read(store_client, query).items():
            if table not in ("tables", "columns", "databases", "one"):
                needed.setdefault(table, set()).update(columns)
    assert needed.get("parts", set()) >= {"data_compressed_bytes", "active"}  # Chunk economics, the report
    for account in ("grafana", "streamscope_reader"):
        held: dict[str, set[str]] = {}
        for grant in system_grants(account):
            match = SYSTEM_GRANT.fullmatch(grant)
            assert match is not None
            held.setdefault(match["table"], set()).update(c.strip() for c in match["columns"].split(","))
        missing = {table: columns - held.get(table, set()) for table, columns in needed.items()}
        assert not {table: columns for table, columns in missing.items() if columns}, account


def test_the_first_start_of_clickhouse_cannot_strand_the_migrate_job():
    """With CLICKHOUSE_DB the image's entrypoint starts a temporary server to create the database and stops it;
    the healthcheck can pass against that one and the job find nothing listening. The database is migrate's to
    create, and the job keeps trying for a while."""
    assert "CLICKHOUSE_DB" not in services()["clickhouse"]["environment"]
    assert parsed_command(services()["migrate"]["command"])["wait_s"] >= 60
