"""The impairment proxy in a process of its own, for workloads that start one beside their clients.

A gateway does not share an interpreter with its clients. As a thread of the workload's process, the proxy would
wait for the clients' interpreter whenever their host is busy, and hold every stream it relays meanwhile: a delay
on the path that no impairment rule made, so no ground truth would name it. In its own process it is scheduled as
any gateway on a busy machine is, and its ground truth travels as the engines' does, over OTLP to the collector.

The child is ``python -m streamscope_cli.proxy.process CONFIG_JSON COLLECTOR_URL SCENARIO``; it prints the port it
bound, then serves until SIGTERM, and flushes its ground truth on the way out.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from streamscope_cli.child import ChildProcess

PROXY_SERVICE = "sim-proxy"


class ProxyProcess:
    """A child process serving the proxy on ``host`` (a free port), exporting its ground truth to a collector."""

    def __init__(self, config: Mapping[str, Any], *, collector_url: str, scenario: str, host: str = "127.0.0.1"):
        """``config``: the mapping ``ProxyConfig.from_dict`` takes (checked in the parent first, for its message)."""
        from streamscope_cli.proxy.config import ProxyConfig

        ProxyConfig.from_dict(config)
        self._child = ChildProcess(
            "streamscope_cli.proxy.process", json.dumps(dict(config)), collector_url, scenario, host, name="the proxy"
        )
        self._host = host
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self.port}"

    def start(self) -> ProxyProcess:
        self.port = self._child.start().port()
        return self

    def stop(self) -> None:
        """SIGTERM: in-flight streams get the proxy's grace period, then its ground truth is flushed."""
        self._child.stop()


def _serve(config_json: str, collector_url: str, scenario: str, host: str) -> None:
    from streamscope_cli.proxy.config import ProxyConfig
    from streamscope_cli.proxy.run import run_proxy
    from streamscope_cli.workload.truth_export import OtlpGroundTruthSink, ground_truth_logger

    logs = ground_truth_logger(PROXY_SERVICE, collector_url)
    try:
        run_proxy(
            ProxyConfig.from_dict(json.loads(config_json)),
            host,
            0,
            sink=OtlpGroundTruthSink(logs, scenario=scenario),
            on_ready=lambda port: print(port, flush=True),
        )
    finally:
        logs.shutdown()


if __name__ == "__main__":
    _serve(*sys.argv[1:5])
