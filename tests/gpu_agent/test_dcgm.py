"""dcgm-exporter scraping: expositions as dcgm-exporter renders them in, the samples and XIDs NVML would give out."""

from __future__ import annotations

import httpx
import pytest

from streamscope_gpu_agent import samples as m
from streamscope_gpu_agent.agent import AgentConfig, GpuAgent
from streamscope_gpu_agent.dcgm import DcgmScraper
from tests.gpu_agent.dcgm_exposition import exposition, h100, mig_slice

URL = "http://gpu-node-7:9400/metrics"
NOW_NS = 1_800_000_000_000_000_000
MIB = 1024 * 1024


class Exporter:
    """A ``fetch`` returning the exposition the test sets, or raising the exception it sets."""

    def __init__(self, answer: str | Exception) -> None:
        self.answer = answer

    def __call__(self, url: str, timeout_s: float) -> str:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


def scraper(exporter: Exporter) -> DcgmScraper:
    return DcgmScraper(URL, fetch=exporter, clock=lambda: NOW_NS)


def by_gpu(samples: list[m.Sample]) -> dict[str, dict[str, float]]:
    values: dict[str, dict[str, float]] = {}
    for sample in samples:
        assert sample.source == "gpu" and sample.time_ns == NOW_NS
        assert sample.metric not in values.get(sample.gpu_uuid, {}), sample
        values.setdefault(sample.gpu_uuid, {})[sample.metric] = sample.value
    return values


def test_whole_gpus_are_read_in_the_samples_units_under_their_own_identity() -> None:
    # GpuIdle, application clocks and sync boost are not slowdowns; hardware thermal slowdown (0x40) is
    reading = scraper(Exporter(exposition(h100(0), h100(1, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x1 | 0x2 | 0x10 | 0x40))))
    reading = reading.scrape()

    assert reading.ok and reading.xids == []
    gpus = by_gpu(reading.samples)
    first = gpus["GPU-4b7e0c2a-91f3-4d1e-8c55-000000000000"]
    assert first == pytest.approx(
        {
            m.GPU_UTILIZATION: 0.97,
            m.GPU_MEMORY_UTILIZATION: 0.64,
            m.GPU_MEMORY_USED: 78976 * MIB,
            m.GPU_MEMORY_TOTAL: (78976 + 2048 + 488) * MIB,
            m.GPU_SM_CLOCK: 1980,
            m.GPU_MEMORY_CLOCK: 2619,
            m.GPU_POWER: 512.5,
            m.GPU_TEMPERATURE: 61,
            m.GPU_CLOCK_EVENT_REASONS: 0,
            m.GPU_ROW_REMAP_FAILURE: 0,
            m.GPU_GRAPHICS_ENGINE_ACTIVE: 0.93,
            m.GPU_TENSOR_ACTIVE: 0.21,
            m.GPU_DRAM_ACTIVE: 0.74,
            m.GPU_PCIE_TX: 3.3e7,
            m.GPU_PCIE_RX: 9.8e7,
        }
    )  # the replay counter's first reading is its baseline
    assert gpus["GPU-4b7e0c2a-91f3-4d1e-8c55-000000000001"][m.GPU_CLOCK_EVENT_REASONS] == 0x40
    names = {(s.gpu_uuid, s.gpu_index, s.gpu_name) for s in reading.samples}
    assert names == {
        ("GPU-4b7e0c2a-91f3-4d1e-8c55-000000000000", 0, "NVIDIA H100 80GB HBM3"),
        ("GPU-4b7e0c2a-91f3-4d1e-8c55-000000000001", 1, "NVIDIA H100 80GB HBM3"),
    }


def test_each_mig_instance_is_a_gpu_of_its_own_with_its_own_memory() -> None:
    board = h100(2)
    slices = [mig_slice(board, "7", "1g.10gb"), mig_slice(board, "8", "1g.10gb", DCGM_FI_DEV_FB_USED=300)]
    gpus = {s.gpu_uuid: s.gpu_name for s in scraper(Exporter(exposition(*slices))).scrape().samples}
    values = by_gpu(scraper(Exporter(exposition(*slices))).scrape().samples)

    assert gpus == {f"{board.uuid}/7": "NVIDIA H100 80GB HBM3 MIG 1g.10gb", f"{board.uuid}/8": gpus[f"{board.uuid}/8"]}
    assert values[f"{board.uuid}/7"][m.GPU_MEMORY_USED] == 8800 * MIB
    assert values[f"{board.uuid}/8"][m.GPU_MEMORY_USED] == 300 * MIB
    assert values[f"{board.uuid}/8"][m.GPU_MEMORY_TOTAL] == 1500 * MIB  # the slice's, not the board's 80 GB
    assert m.GPU_UTILIZATION not in values[f"{board.uuid}/7"]  # MIG turns utilisation off: absent, not 0


def test_a_new_last_xid_is_an_xid_error_once_and_the_replay_counter_reports_increases() -> None:
    exporter = Exporter(exposition(h100(0)))
    scrape = scraper(exporter)
    assert scrape.scrape().xids == []
    readings = []
    for xid, replays in [(79, 3), (79, 10), (48, 2), (0, 2)]:  # the counter reset between the 2nd and the 3rd
        exporter.answer = exposition(h100(0, DCGM_FI_DEV_XID_ERRORS=xid, DCGM_FI_DEV_PCIE_REPLAY_COUNTER=replays))
        readings.append(scrape.scrape())

    assert [[(x.xid, x.gpu_index) for x in r.xids] for r in readings] == [[(79, 0)], [], [(48, 0)], []]
    assert [by_gpu(r.samples)[h100(0).uuid][m.GPU_PCIE_REPLAYS] for r in readings] == [0, 7, 2, 0]


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (httpx.ConnectError("connection refused"), "scraping dcgm-exporter at"),
        (
            "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n",
            "no DCGM fields",
        ),
        ('DCGM_FI_DEV_GPU_UTIL{UUID="x"} not-a-number\n', "scraping dcgm-exporter at"),
    ],
)
def test_a_failed_scrape_says_why_and_the_next_one_carries_on(answer: str | Exception, reason: str) -> None:
    exporter = Exporter(answer)
    scrape = scraper(exporter)
    failed = scrape.scrape()
    assert (failed.ok, failed.samples) == (False, []) and reason in failed.error
    exporter.answer = exposition(h100(0))
    assert scrape.scrape().ok


def test_the_agent_reads_the_gpus_from_dcgm_exporter_and_derives_throttle_and_xid_events() -> None:
    hot = exposition(h100(0, DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x20, DCGM_FI_DEV_XID_ERRORS=31))
    agent = GpuAgent(AgentConfig(node="gpu-node-7", dcgm_url=URL, engine_interval_s=0.01))
    assert agent.nvml is None  # dcgm-exporter stands in for NVML
    assert agent.dcgm is not None
    agent.dcgm.fetch = Exporter(hot)

    samples, events = agent.collect_once()
    assert {s.metric for s in samples} >= {m.GPU_UTILIZATION, m.GPU_CLOCK_EVENT_REASONS}
    assert sorted((e.kind, e.gpu_uuid, e.magnitude) for e in events) == [
        ("throttle", h100(0).uuid, 0x20),  # still open: shown up to the reading
        ("xid", h100(0).uuid, 31),
    ]


def test_the_simulated_nodes_gpu_reports_its_throttle_as_dcgm_exporter_would() -> None:
    from streamscope_cli.engine.gpu import SimulatedGpu

    gpu = SimulatedGpu("node-1")
    scrape = scraper(Exporter(gpu.exposition()))
    cool = by_gpu(scrape.scrape().samples)["GPU-sim-node-1"]
    gpu.throttle(60, 4)
    scrape.fetch = Exporter(gpu.exposition())
    hot = by_gpu(scrape.scrape().samples)["GPU-sim-node-1"]

    assert (cool[m.GPU_CLOCK_EVENT_REASONS], hot[m.GPU_CLOCK_EVENT_REASONS]) == (0, 0x40)  # hardware thermal
    assert hot[m.GPU_SM_CLOCK] == cool[m.GPU_SM_CLOCK] / 4
    assert gpu.slowdown() == 4

    gpu.fault(60, 43)  # it stopped processing: nothing runs until it recovers
    scrape.fetch = Exporter(gpu.exposition())
    assert [(x.xid, x.gpu_uuid) for x in scrape.scrape().xids] == [(43, "GPU-sim-node-1")]
    assert gpu.hang_s() > 59
