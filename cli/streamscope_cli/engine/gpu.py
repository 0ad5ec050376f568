"""The simulated node's GPU: thermal throttling and faults on demand, and the dcgm-exporter endpoint that
reports them.

A throttled GPU runs its clocks down, so every engine step takes ``factor`` times as long until the throttle
ends; a faulted GPU (an XID error, and the recovery after it) runs nothing until it is back. The engine asks
``SimulatedGpu.slowdown()`` and ``hang_s()`` before each step. The node serves what NVIDIA's dcgm-exporter would
say about this GPU (``GET /dcgm/metrics``): while throttled, the hardware-thermal-slowdown clock-event reason, a
lower SM clock and a hot die; while faulted, the XID it raised. The GPU agent reads them as it would on a real
cluster.

``dcgm_exposition`` renders any set of devices as dcgm-exporter 4.x does: field names, types and units from its
``etc/default-counters.csv`` and ``etc/dcp-metrics-included.csv``, labels from its metrics template (``gpu``,
``UUID``, ``pci_bus_id``, ``device``, ``modelName``, then ``GPU_I_PROFILE`` and ``GPU_I_ID`` on a MIG instance,
``Hostname``, ``DCGM_FI_DRIVER_VERSION``), counters without a ``_total`` suffix.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

HW_THERMAL_SLOWDOWN: Final = 0x40
"""NVML's clock-event reason bit for hardware thermal slowdown, as DCGM reports it."""
BASE_SM_CLOCK_MHZ: Final = 1980

FIELDS: Final[dict[str, tuple[str, str]]] = {
    "DCGM_FI_DEV_SM_CLOCK": ("gauge", "SM clock frequency (in MHz)."),
    "DCGM_FI_DEV_MEM_CLOCK": ("gauge", "Memory clock frequency (in MHz)."),
    "DCGM_FI_DEV_GPU_TEMP": ("gauge", "GPU temperature (in C)."),
    "DCGM_FI_DEV_POWER_USAGE": ("gauge", "Power draw (in W)."),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": ("counter", "Total number of PCIe retries."),
    "DCGM_FI_DEV_GPU_UTIL": ("gauge", "GPU utilization (in %)."),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gauge", "Memory utilization (in %)."),
    "DCGM_FI_DEV_XID_ERRORS": ("gauge", "Value of the last XID error encountered."),
    "DCGM_FI_DEV_FB_FREE": ("gauge", "Frame buffer memory free (in MB)."),
    "DCGM_FI_DEV_FB_USED": ("gauge", "Frame buffer memory used (in MB)."),
    "DCGM_FI_DEV_FB_RESERVED": ("gauge", "Frame buffer memory reserved (in MB)."),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gauge", "Whether remapping of rows has failed"),
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": ("gauge", "Current clock event reasons (bitmask)."),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": ("gauge", "Ratio of time the graphics engine is active."),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": ("gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    "DCGM_FI_PROF_DRAM_ACTIVE": ("gauge", "Ratio of cycles the device memory interface is active."),
    "DCGM_FI_PROF_PCIE_TX_BYTES": ("gauge", "The rate of data transmitted over the PCIe bus (in B/s)."),
    "DCGM_FI_PROF_PCIE_RX_BYTES": ("gauge", "The rate of data received over the PCIe bus (in B/s)."),
}


@dataclass
class Device:
    """One GPU, or one MIG instance of it (``instance`` set), and its field values."""

    index: int
    uuid: str
    values: dict[str, float]
    model: str = "NVIDIA H100 80GB HBM3"
    instance: str = ""
    profile: str = ""
    host: str = "gpu-node-7"

    def labels(self) -> dict[str, str]:
        labels = {
            "gpu": str(self.index),
            "UUID": self.uuid,
            "pci_bus_id": f"00000000:{0x18 + self.index:02X}:00.0",
            "device": f"nvidia{self.index}",
            "modelName": self.model,
        }
        if self.instance:
            labels |= {"GPU_I_PROFILE": self.profile, "GPU_I_ID": self.instance}
        return labels | {"Hostname": self.host, "DCGM_FI_DRIVER_VERSION": "570.124.06"}


@dataclass(eq=False)
class _Exporter:
    devices: list[Device] = field(default_factory=list)

    def collect(self) -> Iterator[Metric]:
        for name, (kind, doc) in FIELDS.items():
            metric = Metric(name, doc, kind)
            for device in self.devices:
                if name in device.values:
                    metric.add_sample(name, device.labels(), device.values[name])
            if metric.samples:
                yield metric


def dcgm_exposition(*devices: Device) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Exporter(list(devices)))
    text = generate_latest(registry).decode()
    # dcgm-exporter renders its own text (a Go template): a counter's HELP and TYPE carry its name unsuffixed too
    for name in (name for name, (kind, _) in FIELDS.items() if kind == "counter"):
        text = text.replace(f"{name}_total ", f"{name} ")
    return text


class SimulatedGpu:
    """The node's one GPU; ``throttle`` may be called from any thread."""

    def __init__(self, node: str) -> None:
        self.node = node
        self._lock = threading.Lock()
        self._until_ns = 0
        self._factor = 1.0
        self._fault_until_ns = 0
        self._xid = 0

    def throttle(self, for_s: float, factor: float) -> None:
        """Slow every step ``factor`` times from now, for ``for_s`` seconds."""
        with self._lock:
            self._until_ns, self._factor = time.time_ns() + int(for_s * 1e9), factor

    def fault(self, for_s: float, xid: int) -> None:
        """Raise XID ``xid`` now: the GPU runs nothing for ``for_s`` seconds (the error and its recovery)."""
        with self._lock:
            self._fault_until_ns, self._xid = time.time_ns() + int(for_s * 1e9), xid

    def hang_s(self, now_ns: int | None = None) -> float:
        """How long from now the GPU runs nothing: 0 unless it is faulted."""
        with self._lock:
            return max(0, self._fault_until_ns - (time.time_ns() if now_ns is None else now_ns)) / 1e9

    def slowdown(self, now_ns: int | None = None) -> float:
        """How many times longer a step starting now takes: 1 unless throttled."""
        with self._lock:
            return self._factor if (time.time_ns() if now_ns is None else now_ns) < self._until_ns else 1.0

    def exposition(self) -> str:
        factor = self.slowdown()
        throttled = factor > 1
        with self._lock:
            xid = self._xid if time.time_ns() < self._fault_until_ns else 0
        values = {
            "DCGM_FI_DEV_SM_CLOCK": round(BASE_SM_CLOCK_MHZ / factor),
            "DCGM_FI_DEV_MEM_CLOCK": 2619,
            "DCGM_FI_DEV_GPU_TEMP": 91 if throttled else 62,
            "DCGM_FI_DEV_POWER_USAGE": 300.0 if throttled else 480.0,
            "DCGM_FI_DEV_GPU_UTIL": 100,
            "DCGM_FI_DEV_FB_FREE": 2048,
            "DCGM_FI_DEV_FB_USED": 78976,
            "DCGM_FI_DEV_XID_ERRORS": xid,
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": HW_THERMAL_SLOWDOWN if throttled else 0,
        }
        device = Device(0, f"GPU-sim-{self.node}", values, model="streamscope simulated GPU", host=self.node)
        return dcgm_exposition(device)
