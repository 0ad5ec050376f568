"""Every shipped scenario, run for real against a collector: ground truth for exactly the causes it injects, and
for the times the clients' event loop, an engine node's or the proxy's did not run (recorded by their watchdogs on
any run, most on a busy host: the client's host as ``client_host``, a node's serving loop as ``server_host``, the
proxy's pauses as ``connection`` of the streams it held)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from streamscope_cli.workload.load import CLIENT_SERVICE, run_load
from streamscope_cli.workload.scenario import HostLoad, load_scenario, plan
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector
from tests.support import wait_for_rows

EXPECTED = {
    "steady": set(),
    "prefill-storm": {"prefill_interference"},
    "kv-pressure": {"kv_pressure", "queue"},  # a full KV cache leaves new requests waiting too
    "spec-collapse": {"spec_decode"},
    "gateway-buffering": {"network_buffering"},
    "flaky-network": {"connection"},
    "chunking-regression": {"chunking_regression"},
    "gpu-trouble": {"gpu_throttle", "gpu_fault"},
    "mixed": {
        "prefill_interference",
        "kv_pressure",
        "spec_decode",
        "network_buffering",
        "connection",
        "chunking_regression",
        "queue",
    },
}
QUICK_STREAMS = 60  # every scenario but mixed runs shortened; its causes still occur many times over


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_scenario_ground_truth(storage_dsn, name):
    scenario = load_scenario(name)
    if name != "mixed":
        scenario = replace(scenario, load=replace(scenario.load, streams=QUICK_STREAMS))
    collector = Collector(CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None)).start()
    try:
        report = run_load(scenario, collector.http_url)
        query = collector.query_client.query
        planned = len(plan(scenario))
        wait_for_rows(
            collector.query_client, "SELECT count() FROM streams WHERE side = 'client'", planned, timeout_s=30
        )
        assert report.finished == planned
        injected = query(
            "SELECT DISTINCT cause FROM ground_truth WHERE attributes['streamscope.truth.detail.source'] != 'watchdog'"
        ).result_rows
        assert {cause for (cause,) in injected} - {"client_host"} == EXPECTED[name]
        watched = query(
            "SELECT DISTINCT cause, trace_id = '', node_name FROM ground_truth "
            "WHERE attributes['streamscope.truth.detail.source'] = 'watchdog'"
        ).result_rows
        proxy = scenario.proxy.get("node", "proxy") if scenario.proxy else None
        serving = {("server_host", True, node.node) for node in scenario.nodes}  # a node's serving loop ran late
        assert set(watched) <= {("client_host", True, CLIENT_SERVICE), ("connection", False, proxy), *serving}
        host = query(
            "SELECT DISTINCT trace_id, node_name, attributes['streamscope.truth.detail.source'] FROM ground_truth "
            "WHERE cause = 'client_host'"
        ).result_rows
        assert set(host) <= {("", CLIENT_SERVICE, "watchdog")}, "nothing here blocks the loop but the host"
        assert query("SELECT DISTINCT scenario FROM ground_truth").result_rows in ([], [(name,)])
        orphans = query(
            "SELECT count() FROM ground_truth WHERE trace_id != '' "
            "AND trace_id NOT IN (SELECT trace_id FROM streams WHERE side = 'client')"
        ).result_rows[0][0]
        assert orphans == 0, "every ground-truth row with a trace id names a recorded stream"
        beyond = query(
            "SELECT count() FROM ground_truth AS g INNER JOIN streams AS s ON s.trace_id = g.trace_id "
            "WHERE s.side = 'server' AND g.node_name = s.node_name AND arrayMax(g.chunk_indices) >= s.chunk_count"
        ).result_rows[0][0]
        assert beyond == 0, "engine ground truth points at chunks the server span really emitted"
        if scenario.load.cancel_rate:
            outcomes = dict(
                query("SELECT outcome, count() FROM streams WHERE side = 'client' GROUP BY outcome").result_rows
            )
            assert outcomes.get("cancelled", 0) == report.outcomes["cancelled"] > 0
            server = dict(  # the server's outcome for each stream the client cancelled
                query(
                    "SELECT s.outcome, count() FROM streams AS c INNER JOIN streams AS s "
                    "ON s.trace_id = c.trace_id AND s.side = 'server' "
                    "WHERE c.side = 'client' AND c.outcome = 'cancelled' GROUP BY s.outcome"
                ).result_rows
            )
            assert sum(server.values()) == outcomes["cancelled"]
            # a cancel that reaches the server after its last chunk went out finds the stream completed: a race
            assert set(server) <= {"disconnected", "completed"}
            assert server.get("disconnected", 0) > server.get("completed", 0)
    finally:
        collector.stop()


def test_a_client_host_load_records_each_block_of_the_client_process(storage_dsn):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "attribution" / "tuning" / "client-host.yaml"
    scenario = load_scenario(str(path))
    loads = (HostLoad("client", period_s=1.0, busy_ms=300, start_s=0.5),)
    scenario = replace(scenario, load=replace(scenario.load, streams=30), host_load=loads)
    collector = Collector(CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None)).start()
    try:
        report = run_load(scenario, collector.http_url)
        client = collector.query_client
        wait_for_rows(client, "SELECT count() FROM streams WHERE side = 'client'", report.planned, timeout_s=30)
        wait_for_rows(
            client,
            "SELECT count() FROM ground_truth WHERE attributes['streamscope.truth.detail.source'] = 'injected'",
            max(1, int(report.duration_s) - 1),
            timeout_s=30,
        )
        rows = client.query(
            "SELECT DISTINCT cause, node_name, trace_id, scenario, magnitude, "
            "dateDiff('millisecond', start_time, end_time) >= 300 FROM ground_truth "
            "WHERE attributes['streamscope.truth.detail.source'] = 'injected'"
        ).result_rows
        assert rows == [("client_host", CLIENT_SERVICE, "", scenario.name, 0.3, 1)]
    finally:
        collector.stop()


def test_a_server_host_load_blocks_only_its_nodes_serving_loop_and_records_each_block(storage_dsn):
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "attribution" / "tuning" / "busy-api-server.yaml"
    scenario = load_scenario(str(path))
    loads = (HostLoad("server", period_s=1.0, busy_ms=300, start_s=0.5, node="node-1"),)
    scenario = replace(scenario, load=replace(scenario.load, streams=30), host_load=loads)
    collector = Collector(CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None)).start()
    try:
        report = run_load(scenario, collector.http_url, agents=False)
        client = collector.query_client
        wait_for_rows(client, "SELECT count() FROM streams WHERE side = 'client'", report.planned, timeout_s=30)
        injected = "attributes['streamscope.truth.detail.source'] = 'injected'"
        at_least = max(1, int(report.duration_s) - 2)
        wait_for_rows(client, f"SELECT count() FROM ground_truth WHERE {injected}", at_least, timeout_s=30)
        rows = client.query(
            "SELECT DISTINCT cause, node_name, trace_id, magnitude, "
            f"dateDiff('millisecond', start_time, end_time) >= 300 FROM ground_truth WHERE {injected}"
        ).result_rows
        assert rows == [("server_host", "node-1", "", 0.3, 1)]
        # the clients' loop was not blocked: no client host record says it was injected there
        clients = f"SELECT count() FROM ground_truth WHERE {injected} AND cause = 'client_host'"
        assert client.query(clients).result_rows == [(0,)]
    finally:
        collector.stop()
