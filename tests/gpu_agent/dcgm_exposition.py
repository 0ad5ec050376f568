"""dcgm-exporter expositions of H100s and their MIG instances, rendered as dcgm-exporter 4.x does
(``streamscope_cli.engine.gpu.dcgm_exposition``: its field definitions, its labels)."""

from __future__ import annotations

from streamscope_cli.engine.gpu import Device
from streamscope_cli.engine.gpu import dcgm_exposition as exposition

__all__ = ["Device", "exposition", "h100", "mig_slice"]


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
