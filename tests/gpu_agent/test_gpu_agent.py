"""The GPU agent end to end: the simulator's live /metrics and a (doubled) GPU into ClickHouse."""

from __future__ import annotations

import asyncio
import json
import time

import httpx

from streamscope_cli.engine.app import EngineNode, NodeConfig
from streamscope_cli.engine.scheduler import SchedulerConfig
from streamscope_collector.serving import BackgroundServer
from streamscope_gpu_agent.agent import AgentConfig, GpuAgent
from streamscope_gpu_agent.nvml import NvmlSampler
from tests.gpu_agent_nvml_double import FakeGpu, FakeNvml
from tests.support import run, wait_until


def test_agent_scrapes_the_live_simulator_into_clickhouse_and_joins_streams_by_node(collector):
    from streamscope import setup

    engine_traces = setup("sim-engine", endpoint=collector.http_url, set_global=False)
    node = EngineNode(
        NodeConfig(node="gpu-node-7", scheduler=SchedulerConfig(num_blocks=60, block_size=16)),
        tracer_provider=engine_traces,
    )
    server = BackgroundServer(node.app).start()
    url = f"http://127.0.0.1:{server.port}"
    agent = GpuAgent(
        AgentConfig(
            node="gpu-node-7",
            engine_url=f"{url}/metrics",
            collector_url=collector.http_url,
            gpu=False,
            engine_interval_s=0.05,
        )
    ).start()
    try:
        body = {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 200,
            "stream": True,
            "sim": {"prompt_tokens": 200},
        }

        async def load() -> None:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:
                await asyncio.gather(*(client.post("/v1/chat/completions", json=body) for _ in range(6)))

        asyncio.run(load())
        time.sleep(0.3)
    finally:
        agent.stop()
        server.stop()
        engine_traces.shutdown()
    query = collector.query_client.query
    metrics = dict(
        query("SELECT metric, sum(value) FROM engine_samples WHERE source = 'engine' GROUP BY metric").result_rows
    )
    assert metrics["generation_tokens"] == 6 * 200  # counter increases add up to what was generated
    assert metrics["preemptions"] > 0
    assert query("SELECT max(value) FROM engine_samples WHERE metric = 'kv_usage'").result_rows[0][0] > 0.8
    assert query("SELECT min(value) FROM engine_samples WHERE metric = 'engine_up'").result_rows[0][0] == 1
    assert (
        query("SELECT sum(magnitude) FROM engine_events WHERE kind = 'preemption'").result_rows[0][0]
        == (metrics["preemptions"])
    )
    joined = query(
        "SELECT count() FROM streams AS s INNER JOIN engine_events AS e ON e.node_name = s.node_name "
        "WHERE s.side = 'server' AND e.kind = 'preemption' "
        "AND e.start_time <= s.start_time + toIntervalMicrosecond(s.duration_us) AND e.end_time >= s.start_time"
    ).result_rows[0][0]
    assert joined > 0, "a preemption on node X joins with the streams node X served at that time"


def test_gpu_samples_and_events_through_the_nvml_double(collector):
    """No GPU here: the NVML side runs against the labelled pynvml double."""
    gpu = FakeGpu(uuid="GPU-7e57", clock_reasons=0)
    nvml = FakeNvml([gpu])
    agent = GpuAgent(
        AgentConfig(node="gpu-node-8", collector_url=collector.http_url, gpu_interval_s=0.05),
        nvml=NvmlSampler(nvml=nvml),
    ).start()
    try:
        time.sleep(0.2)
        gpu.clock_reasons = 0x4  # SW power cap: throttling starts
        nvml.queue_xid(0, 79)
        time.sleep(0.3)
        gpu.clock_reasons = 0
        time.sleep(0.3)
    finally:
        agent.stop()
    query = collector.query_client.query
    assert query(
        "SELECT gpu_uuid, gpu_index, max(value) FROM engine_samples WHERE metric = 'power_watts' GROUP BY 1, 2"
    ).result_rows == [("GPU-7e57", 0, gpu.power_mw / 1000)]
    kinds = dict(query("SELECT kind, count() FROM engine_events GROUP BY kind").result_rows)
    assert kinds == {"throttle": 1, "xid": 1}
    assert query("SELECT xid, gpu_uuid FROM engine_events WHERE kind = 'xid'").result_rows == [(79, "GPU-7e57")]


def test_gpu_agent_once_json_prints_normalized_samples():
    node = EngineNode(NodeConfig(node="n"))
    server = BackgroundServer(node.app).start()
    try:
        httpx.post(f"http://127.0.0.1:{server.port}/v1/completions", json={"prompt": "hi", "max_tokens": 3})
        result = run(
            "gpu-agent", "--node", "n", "--engine-url", f"http://127.0.0.1:{server.port}/metrics", "--once", "--json"
        )
    finally:
        server.stop()
    assert result.returncode == 0, result.stderr
    samples = json.loads(result.stdout)["samples"]
    by_metric = {(s["source"], s["metric"]): s for s in samples}
    assert by_metric[("engine", "prompt_tokens")]["value"] == 0  # an increase: the second scrape's
    assert by_metric[("engine", "kv_usage")]["engine"] == "vllm"
    assert by_metric[("agent", "engine_up")]["value"] == 1
    assert "no NVIDIA GPU or driver" in result.stderr  # said once, and the engine was still scraped


def test_an_engine_answering_again_after_an_outage_is_a_restart_event():
    from streamscope_gpu_agent.scrape import EngineScraper

    node = EngineNode(NodeConfig(node="n"))
    exposition = {"text": ""}

    def fetch(url: str, timeout: float) -> str:
        if not exposition["text"]:
            raise httpx.ConnectError("connection refused")
        return exposition["text"]

    from streamscope_cli.engine.metrics import exposition as render

    agent = GpuAgent(
        AgentConfig(node="n", engine_url="http://engine/metrics", gpu=False, engine_interval_s=0.02),
        scraper=EngineScraper("http://engine/metrics", fetch=fetch),
    )
    exposition["text"] = render(node.metrics).decode()
    agent.start()
    wait_until(lambda: len(agent.outbox.samples) > 0, "the first samples", timeout_s=15.0)
    exposition["text"] = ""  # the engine goes away
    time.sleep(0.1)
    exposition["text"] = render(node.metrics).decode()  # and comes back
    time.sleep(0.1)
    agent.stop()
    kinds = [event.kind for event in agent.outbox.events]
    assert kinds.count("engine_restart") == 1
    down = [s for s in agent.outbox.samples if s.metric == "engine_up" and s.value == 0]
    assert down, "the outage itself is recorded"


def test_gpu_agent_refuses_to_read_no_gpu_from_dcgm_exporter():
    result = run("gpu-agent", "--node", "n", "--no-gpu", "--dcgm-url", "http://127.0.0.1:9400/metrics", "--once")
    assert result.returncode == 2 and "--no-gpu" in result.stderr and "--dcgm-url" in result.stderr
    assert "Traceback" not in result.stderr
