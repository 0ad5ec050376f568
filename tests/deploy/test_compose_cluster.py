"""The compose profile ``cluster``, checked without a Docker engine or a ClickHouse cluster: its services against
the cluster config they mount (every node, shard and replica, every Keeper), its commands against the real CLI,
the load balancer against the collectors, and the settings it relies on against the embedded engine's own lists
of settings. (The whole file is validated against the Compose Specification by test_compose.py.)"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from streamscope_ingest import store
from tests.deploy.test_compose import ROOT, bind_mounts, parsed_command, published_ports, services

CLUSTER_DIR = ROOT / "schema" / "clickhouse" / "cluster"
NGINX = ROOT / "deploy" / "cluster" / "nginx.conf"


def in_profile() -> dict[str, dict]:
    return {name: service for name, service in services().items() if "cluster" in service.get("profiles", [])}


def clickhouse_nodes() -> dict[str, dict]:
    return {
        name: s for name, s in in_profile().items() if s.get("image", "").startswith("clickhouse/clickhouse-server")
    }


def keepers() -> dict[str, dict]:
    return {
        name: s for name, s in in_profile().items() if s.get("image", "").startswith("clickhouse/clickhouse-keeper")
    }


def config() -> ET.Element:
    return ET.parse(CLUSTER_DIR / "config.d" / "cluster.xml").getroot()


def networks(service: dict) -> dict[str, dict]:
    listed = service.get("networks", {})
    return {name: {} for name in listed} if isinstance(listed, list) else {k: v or {} for k, v in listed.items()}


def test_the_profile_is_apart_from_the_single_node_stack():
    cluster = in_profile()
    assert {"otlp-balancer", "grafana-cluster", "migrate-cluster", "collector-1", "collector-2"} <= set(cluster)
    for name, service in services().items():
        if name in cluster:
            assert set(networks(service)) == {"cluster"}, name
        else:
            assert "networks" not in service and set(service.get("profiles", [])) <= {"gpu"}, name
    ports = [port for service in services().values() for port in published_ports(service)]
    assert len(ports) == len(set(ports))  # both stacks can run at once


def test_every_clickhouse_node_is_where_the_cluster_config_puts_it():
    (cluster,) = config().find("remote_servers")
    assert cluster.tag == "streamscope" and cluster.find("secret").get("from_env") == "STREAMSCOPE_CLUSTER_SECRET"
    placed = {}
    for shard_number, shard in enumerate(cluster.findall("shard"), start=1):
        assert shard.findtext("internal_replication") == "true"  # replicated tables copy each other
        for replica in shard.findall("replica"):
            placed[replica.findtext("host")] = str(shard_number)
    nodes = clickhouse_nodes()
    assert len(placed) == 4 and set(placed) == set(nodes)
    macros = config().find("macros")
    assert (macros.find("shard").get("from_env"), macros.find("replica").get("from_env")) == (
        "STREAMSCOPE_SHARD",
        "STREAMSCOPE_REPLICA",
    )
    replicas = set()
    for name, node in nodes.items():
        environment = node["environment"]
        assert environment["STREAMSCOPE_SHARD"] == placed[name]
        replicas.add(environment["STREAMSCOPE_REPLICA"])
        assert "STREAMSCOPE_CLUSTER_SECRET" in environment
        mounted = bind_mounts(node)
        assert mounted["/etc/clickhouse-server/config.d/cluster.xml"] == CLUSTER_DIR / "config.d" / "cluster.xml"
        assert mounted["/etc/clickhouse-server/users.d/cluster.xml"] == CLUSTER_DIR / "users.d" / "cluster.xml"
        assert "/etc/clickhouse-server/users.d/streamscope.xml" in mounted  # the same accounts on every node
    assert len(replicas) == 4  # replica names are unique: they name each node in Keeper


def test_three_keepers_form_the_quorum_every_node_uses():
    keeper_config = ET.parse(CLUSTER_DIR / "keeper.xml").getroot().find("keeper_server")
    assert keeper_config.find("server_id").get("from_env") == "KEEPER_ID"
    raft = {s.findtext("id"): s.findtext("hostname") for s in keeper_config.find("raft_configuration")}
    running = keepers()
    assert len(running) == 3 and set(raft.values()) == set(running)
    for name, keeper in running.items():
        assert raft[keeper["environment"]["KEEPER_ID"]] == name
        assert bind_mounts(keeper)["/etc/clickhouse-keeper/keeper_config.xml"] == CLUSTER_DIR / "keeper.xml"
    client_port = keeper_config.findtext("tcp_port")
    used = {(n.findtext("host"), n.findtext("port")) for n in config().find("zookeeper")}
    assert used == {(name, client_port) for name in running}
    for node in clickhouse_nodes().values():
        assert set(node["depends_on"]) == set(running)


def test_migrate_and_the_collectors_run_on_the_cluster():
    nodes = set(clickhouse_nodes())
    migrate = parsed_command(in_profile()["migrate-cluster"]["command"])
    assert migrate["cluster"] == config().find("remote_servers")[0].tag
    assert store.parse_dsn(migrate["storage_dsn"]).host in nodes
    written_through, attributing = set(), []
    for name in ("collector-1", "collector-2"):
        collector = in_profile()[name]
        params = parsed_command(collector["command"])
        writes, reads = store.parse_dsn(params["storage_dsn"]), store.parse_dsn(params["query_storage_dsn"])
        assert writes.host == reads.host and writes.host in nodes and params["no_migrate"]
        written_through.add(writes.host)
        if not params["no_attribution"]:
            attributing.append(name)
        assert collector["depends_on"] == {"migrate-cluster": {"condition": "service_completed_successfully"}}
    assert len(written_through) == 2  # one node down leaves the other collector writing
    # both run the attribution job; the lease (its claims in Keeper, made by migrate --cluster) lets one at a time
    assert attributing == ["collector-1", "collector-2"]


def test_the_balancer_spreads_both_otlp_ports_over_both_collectors():
    text = NGINX.read_text()
    upstreams = dict(re.findall(r"upstream (\w+) \{(.*?)\}", text, re.S))
    servers = {name: set(re.findall(r"server ([\w-]+:\d+)", body)) for name, body in upstreams.items()}
    assert servers == {
        "otlp_grpc": {"collector-1:4317", "collector-2:4317"},
        "otlp_http": {"collector-1:4318", "collector-2:4318"},
    }
    listens = dict(re.findall(r"listen (\d+);\s*proxy_pass (\w+);", text))
    assert listens == {"4317": "otlp_grpc", "4318": "otlp_http"}
    balancer = in_profile()["otlp-balancer"]
    assert set(balancer["ports"]) == {"4417:4317", "4418:4318"}
    assert bind_mounts(balancer)["/etc/nginx/nginx.conf"] == NGINX


def test_grafana_reads_the_cluster_by_the_names_its_provisioning_uses():
    """The provisioned datasource names host ``clickhouse`` and the contact point ``collector``: on the cluster's
    network these are a node and a collector."""
    aliases = {
        alias: name
        for name, service in in_profile().items()
        for alias in networks(service).get("cluster", {}).get("aliases", [])
    }
    assert aliases["clickhouse"] in clickhouse_nodes() and aliases["collector"] == "collector-1"
    grafana = in_profile()["grafana-cluster"]
    assert bind_mounts(grafana) == bind_mounts(services()["grafana"])  # the same provisioning and dashboards


def test_the_settings_the_cluster_relies_on_exist(store_client):
    """Setting names are checked against the engine's own lists, so a misspelt one cannot pass unnoticed (a
    server refuses to start on an unknown setting in a profile)."""
    profile = ET.parse(CLUSTER_DIR / "users.d" / "cluster.xml").getroot().find("profiles/default")
    names = [setting.tag for setting in profile]
    known = store_client.query(
        "SELECT name FROM system.settings WHERE name IN {names:Array(String)}", parameters={"names": names}
    ).result_rows
    assert sorted(row[0] for row in known) == sorted(names) and "distributed_product_mode" in names
    merge_tree = [setting.tag for setting in config().find("merge_tree")]
    known = store_client.query(
        "SELECT name FROM system.merge_tree_settings WHERE name IN {names:Array(String)}",
        parameters={"names": merge_tree},
    ).result_rows
    assert sorted(row[0] for row in known) == sorted(merge_tree) == ["replicated_deduplication_window_seconds"]
