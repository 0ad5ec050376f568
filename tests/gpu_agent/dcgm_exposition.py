"""dcgm-exporter expositions built with prometheus_client, as NVIDIA/dcgm-exporter 4.x renders them.

Field names, types and units follow its ``etc/default-counters.csv`` and ``etc/dcp-metrics-included.csv``; labels
follow its metrics template (``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, then ``GPU_I_PROFILE``
and ``GPU_I_ID`` on a MIG instance, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``). Counters keep their names as DCGM
has them, without a ``_total`` suffix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric

FIELDS: dict[str, tuple[str, str]] = {
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


def exposition(*devices: Device) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Exporter(list(devices)))  # type: ignore[arg-type]
    text = generate_latest(registry).decode()
    # dcgm-exporter renders its own text (a Go template): a counter's HELP and TYPE carry its name unsuffixed too
    for name in (name for name, (kind, _) in FIELDS.items() if kind == "counter"):
        text = text.replace(f"{name}_total ", f"{name} ")
    return text


def h100(index: int, **values: float) -> Device:
    """A whole H100 with readings a busy decode server gives, ``values`` overriding them."""
    readings = {
        "DCGM_FI_DEV_SM_CLOCK": 1980,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_GPU_TEMP": 61,
        "DCGM_FI_DEV_POWER_USAGE": 512.5,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 3,
        "DCGM_FI_DEV_GPU_UTIL": 97,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 64,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_DEV_FB_FREE": 2048,
        "DCGM_FI_DEV_FB_USED": 78976,
        "DCGM_FI_DEV_FB_RESERVED": 488,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.93,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.21,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.74,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 3.3e7,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 9.8e7,
    }
    return Device(index, f"GPU-4b7e0c2a-91f3-4d1e-8c55-0000000000{index:02d}", readings | values)


def mig_slice(parent: Device, instance: str, profile: str, **values: float) -> Device:
    """A MIG instance of ``parent``: dcgm-exporter gives it its own memory and profiling fields, no utilisation."""
    readings = {
        "DCGM_FI_DEV_FB_FREE": 1200,
        "DCGM_FI_DEV_FB_USED": 8800,
        "DCGM_FI_DEV_FB_RESERVED": 0,
        "DCGM_FI_DEV_XID_ERRORS": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.5,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.4,
    }
    return Device(parent.index, parent.uuid, readings | values, parent.model, instance, profile, parent.host)
