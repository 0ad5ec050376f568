"""The GPU agent: scrape the engine every 250 ms and the GPU every second, derive events, ship over OTLP.

Each source runs in its own thread at its own interval; a scrape that fails or times out is recorded (as
``engine_up`` 0 and ``scrape_errors``) and the loop goes on. The GPUs are read through NVML, or, where a cluster
runs NVIDIA's dcgm-exporter and gives the agent no NVML access, from that exporter's endpoint. Without a GPU or
driver the agent says so once and keeps scraping the engine.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import httpx

from streamscope.threads import named_thread
from streamscope_gpu_agent.dcgm import DcgmScraper
from streamscope_gpu_agent.events import EngineEvent, EventDeriver, Thresholds
from streamscope_gpu_agent.export import OtlpShipper, Outbox, agent_resource
from streamscope_gpu_agent.samples import Sample, XidEvent
from streamscope_gpu_agent.scrape import EngineScraper, ScrapeResult, http_fetch

if TYPE_CHECKING:  # NVML is imported only where GPUs are read
    from streamscope_gpu_agent.nvml import NvmlSampler

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentConfig:
    node: str
    engine_url: str | None = None
    """The engine's Prometheus endpoint, e.g. http://127.0.0.1:8000/metrics; None scrapes no engine."""
    collector_url: str | None = None
    """OTLP/HTTP base URL of the collector; None keeps everything local (for --once)."""
    dcgm_url: str | None = None
    """dcgm-exporter's endpoint, e.g. http://127.0.0.1:9400/metrics: the GPUs are read from it, not through NVML."""
    engine_interval_s: float = 0.25
    gpu_interval_s: float = 1.0
    scrape_timeout_s: float = 1.0
    gpu: bool = True
    host: str = field(default_factory=socket.gethostname)
    thresholds: Thresholds = field(default_factory=Thresholds)

    def __post_init__(self) -> None:
        if not self.node:
            raise ValueError("the agent needs a node name (the one the engine's server spans carry)")
        if self.engine_interval_s <= 0 or self.gpu_interval_s <= 0 or self.scrape_timeout_s <= 0:
            raise ValueError("intervals and the scrape timeout must be positive")


class GpuAgent:
    def __init__(
        self, config: AgentConfig, *, scraper: EngineScraper | None = None, nvml: NvmlSampler | None = None
    ) -> None:
        self.config = config
        self._http = httpx.Client()  # one connection for a scrape every 250 ms
        self.scraper = scraper or (
            EngineScraper(
                config.engine_url,
                timeout_s=config.scrape_timeout_s,
                fetch=lambda url, timeout: http_fetch(url, timeout, self._http),
            )
            if config.engine_url
            else None
        )
        self.dcgm = (
            DcgmScraper(
                config.dcgm_url,
                timeout_s=config.scrape_timeout_s,
                fetch=lambda url, timeout: http_fetch(url, timeout, self._http),
            )
            if config.dcgm_url and config.gpu
            else None
        )
        self.nvml: NvmlSampler | None = nvml
        if self.nvml is None and config.gpu and self.dcgm is None:
            from streamscope_gpu_agent.nvml import NvmlSampler

            self.nvml = NvmlSampler()
        self.outbox = Outbox()
        self._deriver = EventDeriver(config.thresholds)
        self._deriver_lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._gpu_on = False
        self._shipper: OtlpShipper | None = None

    # --- one-shot, for people debugging a deployment ------------------------------------------------------

    def collect_once(self) -> tuple[list[Sample], list[EngineEvent]]:
        """What the running agent would report first: the engine scraped twice one interval apart (counters report
        increases, so the first scrape is only their baseline) and the GPUs read once, with the events those
        readings make, levels still open included. Nothing is sent anywhere."""
        deriver = EventDeriver(self.config.thresholds)
        samples: list[Sample] = []
        events: list[EngineEvent] = []
        if self.scraper is not None:
            baseline = self.scraper.scrape()
            deriver.observe(baseline.samples, time.time_ns())
            time.sleep(self.config.engine_interval_s)
            result = self.scraper.scrape()
            events += _engine_events(deriver, result, was_down=not baseline.ok)
            samples += result.samples
        readings: list[Sample] = []
        xids: list[XidEvent] = []
        if self.dcgm is not None:
            readings, xids = self._read_dcgm()
        elif self.nvml is not None and self.nvml.start():
            try:
                readings = self.nvml.sample()
            finally:
                self.nvml.stop()
        events += deriver.observe(readings, time.time_ns())
        events += [deriver.xid(error) for error in xids]
        return samples + readings, events + deriver.close_all()

    # --- running ------------------------------------------------------------------------------------------

    def start(self) -> GpuAgent:
        config = self.config
        if config.collector_url:
            resource = agent_resource(config.node, config.host, config.engine_url or "")
            self._shipper = OtlpShipper(config.collector_url, resource, self.outbox).start()
        if self.scraper is not None:
            self._spawn("engine-scrape", self._engine_loop)
        if self.dcgm is not None:
            self._spawn("gpu-dcgm", lambda: self._gpu_loop(self._read_dcgm))
        if self.nvml is not None:
            self._gpu_on = bool(self.nvml.start())
            if self._gpu_on:
                nvml = self.nvml
                self._spawn("gpu-sample", lambda: self._gpu_loop(lambda: (nvml.sample(), [])))
                if getattr(self.nvml, "xid_available", True):
                    self._spawn("gpu-xid", self._xid_loop)
        return self

    def stop(self) -> None:
        """Stop sampling, close open events, deliver what is buffered (best effort)."""
        self._stop.set()
        for thread in self._threads:
            thread.join()
        with self._deriver_lock:
            self.outbox.add([], self._deriver.close_all())
        if self._gpu_on and self.nvml is not None:
            self.nvml.stop()
        if self._shipper is not None:
            self._shipper.stop(drain=True)
        self._http.close()

    def _spawn(self, name: str, target) -> None:
        thread = named_thread(target, f"gpu-agent-{name}")
        thread.start()
        self._threads.append(thread)

    def _engine_loop(self) -> None:
        assert self.scraper is not None
        was_down = False
        while not self._stop.is_set():
            started = time.monotonic()
            result = self.scraper.scrape()
            with self._deriver_lock:
                events = _engine_events(self._deriver, result, was_down=was_down)
            was_down = not result.ok
            self.outbox.add(result.samples, events)
            self._stop.wait(max(0.0, self.config.engine_interval_s - (time.monotonic() - started)))

    def _read_dcgm(self) -> tuple[list[Sample], list[XidEvent]]:
        assert self.dcgm is not None
        reading = self.dcgm.scrape()
        return reading.samples, reading.xids

    def _gpu_loop(self, read: Callable[[], tuple[list[Sample], list[XidEvent]]]) -> None:
        """Read the GPUs every interval (``read``: their samples and the XID errors learnt of with them)."""
        previous = time.time_ns()
        while not self._stop.is_set():
            started = time.monotonic()
            samples, xids = read()
            with self._deriver_lock:
                events = self._deriver.observe(samples, previous)
                events += [self._deriver.xid(error) for error in xids]
            self.outbox.add(samples, events)
            previous = time.time_ns()
            self._stop.wait(max(0.0, self.config.gpu_interval_s - (time.monotonic() - started)))

    def _xid_loop(self) -> None:
        sampler = self.nvml
        assert sampler is not None, "started only with a sampler"
        while not self._stop.is_set():
            found = sampler.xid_events(500)
            if found:
                with self._deriver_lock:
                    events = [self._deriver.xid(error) for error in found]
                self.outbox.add([], events)


def _engine_events(deriver: EventDeriver, result: ScrapeResult, *, was_down: bool) -> list[EngineEvent]:
    """The events one engine scrape makes. Counters report the increase since the previous good scrape, outages
    included; a counter reset, or an engine answering again after it could not be reached, is a restart."""
    now = time.time_ns()
    events = deriver.observe(result.samples, result.since_ns or now)
    restarted = set(result.restarted) | (set(result.engines) if result.ok and was_down else set())
    return events + [deriver.restarted(engine, now) for engine in sorted(restarted)]
