"""A workload is laid out as a deployment: every engine node (and the proxy) is served by a process of its own,
so a busy clients' process cannot slow the engines, and the node's schedule still runs on the run's clock."""

from __future__ import annotations

import os
from dataclasses import replace

import httpx

from streamscope_cli.workload.load import start_workload
from streamscope_cli.workload.scenario import load_scenario
from streamscope_collector.config import CollectorConfig
from streamscope_collector.service import Collector


def _listening_pids(port: int) -> set[int]:
    """The processes holding a socket that listens on ``port`` (from /proc: no tool to install)."""
    inodes = set()
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            if int(fields[1].split(":")[1], 16) == port and fields[3] == "0A":  # 0A: LISTEN
                inodes.add(fields[9])
    pids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:[") and target[8:-1] in inodes:
                    pids.add(int(pid))
        except OSError:  # gone, or not ours to read
            continue
    return pids


def test_each_engine_node_and_the_proxy_serve_from_a_process_of_their_own(storage_dsn):
    scenario = load_scenario("mixed")
    scenario = replace(scenario, nodes=scenario.nodes[:2])
    collector = Collector(CollectorConfig(storage_dsn=storage_dsn, http_port=0, grpc_port=None)).start()
    workload = start_workload(scenario, collector_url=collector.http_url, agents=False)
    try:
        servers = {url: _listening_pids(int(url.rsplit(":", 1)[1])) for url in workload.urls.values()}
        assert workload.proxy_url is not None
        servers[workload.proxy_url] = _listening_pids(int(workload.proxy_url.rsplit(":", 1)[1]))
        assert all(len(pids) == 1 for pids in servers.values()), servers
        pids = [next(iter(p)) for p in servers.values()]
        assert os.getpid() not in pids
        assert len(set(pids)) == len(pids) == len(scenario.nodes) + 1
        for url in workload.urls.values():
            assert httpx.get(f"{url}/health").status_code == 200
    finally:
        workload.stop()
        collector.stop()
    assert not any(os.path.exists(f"/proc/{pid}") for pid in pids), "stopping the workload ends its processes"
