"""Scrape NVIDIA's dcgm-exporter and turn it into the same GPU Samples and XID errors the NVML sampler gives.

Clusters that run dcgm-exporter seldom give a sidecar NVML access; its ``/metrics`` (port 9400) carries what the
agent needs. Each series is labelled with the GPU (``gpu`` index, ``UUID``, ``modelName``) and, on a GPU split
by MIG, the GPU instance (``GPU_I_ID``, ``GPU_I_PROFILE``): an instance is reported as a GPU of its own (UUID
``<parent UUID>/<instance id>``, name ``<model> MIG <profile>``), since its memory and activity are the slice an
engine runs on, not the whole board's. Units are converted to the samples' (MiB to bytes, % to 0..1);
``DCGM_FI_DEV_XID_ERRORS`` is the last XID a GPU raised, so a new value is a new XID error. Counters
(``PCIE_REPLAY_COUNTER``) are reported as their increase since the previous scrape, as the engine scraper does.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from streamscope_gpu_agent.samples import (
    GPU_CLOCK_EVENT_REASONS,
    GPU_DRAM_ACTIVE,
    GPU_GRAPHICS_ENGINE_ACTIVE,
    GPU_MEMORY_CLOCK,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_MEMORY_UTILIZATION,
    GPU_PCIE_REPLAYS,
    GPU_PCIE_RX,
    GPU_PCIE_TX,
    GPU_POWER,
    GPU_ROW_REMAP_FAILURE,
    GPU_SM_ACTIVE,
    GPU_SM_CLOCK,
    GPU_SM_OCCUPANCY,
    GPU_TEMPERATURE,
    GPU_TENSOR_ACTIVE,
    GPU_UTILIZATION,
    SLOWDOWN_REASONS,
    Sample,
    XidEvent,
)
from streamscope_gpu_agent.scrape import Fetch, describe, http_fetch

__all__ = ["DcgmReading", "DcgmScraper"]

logger = logging.getLogger(__name__)

_MIB: Final = 1024 * 1024
_PERCENT: Final = 0.01

GAUGES: Final[dict[str, tuple[str, float]]] = {
    # field (etc/default-counters.csv, etc/dcp-metrics-included.csv) -> (sample metric, factor to its unit)
    "DCGM_FI_DEV_GPU_UTIL": (GPU_UTILIZATION, _PERCENT),
    "DCGM_FI_DEV_MEM_COPY_UTIL": (GPU_MEMORY_UTILIZATION, _PERCENT),
    "DCGM_FI_DEV_FB_USED": (GPU_MEMORY_USED, _MIB),
    "DCGM_FI_DEV_SM_CLOCK": (GPU_SM_CLOCK, 1.0),
    "DCGM_FI_DEV_MEM_CLOCK": (GPU_MEMORY_CLOCK, 1.0),
    "DCGM_FI_DEV_POWER_USAGE": (GPU_POWER, 1.0),
    "DCGM_FI_DEV_GPU_TEMP": (GPU_TEMPERATURE, 1.0),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": (GPU_ROW_REMAP_FAILURE, 1.0),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": (GPU_GRAPHICS_ENGINE_ACTIVE, 1.0),
    "DCGM_FI_PROF_SM_ACTIVE": (GPU_SM_ACTIVE, 1.0),
    "DCGM_FI_PROF_SM_OCCUPANCY": (GPU_SM_OCCUPANCY, 1.0),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": (GPU_TENSOR_ACTIVE, 1.0),
    "DCGM_FI_PROF_DRAM_ACTIVE": (GPU_DRAM_ACTIVE, 1.0),
    "DCGM_FI_PROF_PCIE_TX_BYTES": (GPU_PCIE_TX, 1.0),
    "DCGM_FI_PROF_PCIE_RX_BYTES": (GPU_PCIE_RX, 1.0),
}
"""Gauges read as they are, converted to the samples' units."""
MEMORY_PARTS: Final = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
"""Framebuffer used, free and reserved (MiB): together the memory there is."""
CLOCK_EVENT_REASONS: Final = ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")
"""The clock-event bitmask, NVML's bits; the older name last."""
COUNTERS: Final = {"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": GPU_PCIE_REPLAYS}
XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"

Device = tuple[str, str, str, str]
"""(UUID, gpu index, GPU instance id, its profile): one GPU, or one MIG instance of it."""


@dataclass(frozen=True, slots=True)
class DcgmReading:
    samples: list[Sample]
    xids: list[XidEvent]
    ok: bool
    error: str = ""


@dataclass
class DcgmScraper:
    """Scrapes one dcgm-exporter endpoint; keeps each device's counters and last XID between scrapes."""

    url: str
    fetch: Fetch = http_fetch
    timeout_s: float = 1.0
    clock: Callable[[], int] = time.time_ns
    _counters: dict[tuple[Device, str], float] = field(default_factory=dict)
    _last_xid: dict[Device, float] = field(default_factory=dict)
    _up: bool | None = None

    def scrape(self) -> DcgmReading:
        """Fetch and convert once; never raises: a failure comes back as ``ok=False`` with the reason."""
        try:
            text = self.fetch(self.url, self.timeout_s)
            time_ns = self.clock()
            fields, models = _parse(text)
        except Exception as exc:  # the transport's and the parser's errors alike; the text is untrusted
            return self._failed(f"scraping dcgm-exporter at {self.url} failed: {describe(exc)}")
        if not fields:
            return self._failed(f"no DCGM fields at {self.url}")
        if self._up is False:
            logger.info("dcgm-exporter at %s is back", self.url)
        self._up = True
        samples: list[Sample] = []
        xids: list[XidEvent] = []
        for device, values in sorted(fields.items()):
            uuid, index, instance, profile = device
            name = models.get(device, "")
            if instance:
                uuid, name = f"{uuid}/{instance}", f"{name} MIG {profile}".strip()
            gpu_index = int(index) if index.isdigit() else -1
            for metric, value in self._convert(device, values):
                samples.append(Sample(time_ns, "gpu", metric, value, gpu_uuid=uuid, gpu_index=gpu_index, gpu_name=name))
            xid = values.get(XID_ERRORS)
            if xid is not None:
                if xid and self._last_xid.get(device, 0.0) != xid:
                    xids.append(XidEvent(time_ns, uuid, gpu_index, int(xid)))
                self._last_xid[device] = xid
        return DcgmReading(samples, xids, True)

    def _convert(self, device: Device, values: dict[str, float]) -> list[tuple[str, float]]:
        converted = [(metric, values[name] * factor) for name, (metric, factor) in GAUGES.items() if name in values]
        if all(part in values for part in MEMORY_PARTS[:2]):
            converted.append((GPU_MEMORY_TOTAL, sum(values.get(part, 0.0) for part in MEMORY_PARTS) * _MIB))
        reasons = next((values[name] for name in CLOCK_EVENT_REASONS if name in values), None)
        if reasons is not None:
            converted.append((GPU_CLOCK_EVENT_REASONS, float(int(reasons) & SLOWDOWN_REASONS)))
        for name, metric in COUNTERS.items():
            if name in values:
                previous = self._counters.get((device, name))
                self._counters[device, name] = values[name]
                if previous is not None:  # the first scrape is the baseline; a reset counts from zero
                    converted.append((metric, values[name] - previous if values[name] >= previous else values[name]))
        return converted

    def _failed(self, error: str) -> DcgmReading:
        if self._up is not False:  # once per outage, not once per scrape
            logger.warning("%s", error)
        self._up = False
        return DcgmReading([], [], False, error)


def _parse(text: str) -> tuple[dict[Device, dict[str, float]], dict[Device, str]]:
    """Each device's DCGM fields by name, and its model name; raises on text that is not an exposition."""
    wanted = {*GAUGES, *MEMORY_PARTS, *CLOCK_EVENT_REASONS, *COUNTERS, XID_ERRORS}
    fields: dict[Device, dict[str, float]] = {}
    models: dict[Device, str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            name = sample.name.removesuffix("_total")  # the parser gives a counter's sample the suffix DCGM omits
            if name not in wanted or "UUID" not in labels or math.isnan(sample.value):
                continue
            device = (
                labels["UUID"],
                labels.get("gpu", ""),
                labels.get("GPU_I_ID", ""),
                labels.get("GPU_I_PROFILE", ""),
            )
            fields.setdefault(device, {})[name] = float(sample.value)
            models[device] = labels.get("modelName", "")
    return fields, models
