"""TEST DOUBLE of the pynvml module, because no NVIDIA GPU or driver exists where these tests run.

It stands in for ``pynvml`` only inside tests, and only for the calls gpu_agent/streamscope_gpu_agent/nvml.py
makes. It is thin on purpose: each function returns the values configured on a ``FakeGpu`` or raises the configured
error, and records that it was called. Constants and exception classes are pynvml's real ones (imported, not
redefined), so the sampler's error handling is exercised against the very types the real library raises.

What it can simulate: any number of GPUs with their own values; any call raising any NVMLError (for every GPU or
one GPU); GPUs split by MIG, with their MIG devices; an older library missing a function (the attribute is absent,
as ``getattr`` sees it); queued XID events; nvmlInit failing (LibraryNotFound, DriverNotLoaded); a lost GPU (any
call raising NVMLError_GpuIsLost); the event types a GPU supports. Like the real library, device calls before
nvmlInit or after nvmlShutdown raise NVMLError_Uninitialized, and nvmlEventSetWait raises NVMLError_Timeout when
nothing is queued.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml


@dataclass(eq=False)
class FakeGpu:
    """One device; also serves as its own NVML handle. Raw values are in NVML's units (%, mW, KB/s, MHz, C)."""

    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    name: str = "NVIDIA H100 80GB HBM3"
    memory_used: int = 40 * 2**30
    memory_total: int = 80 * 2**30
    util_gpu: int = 87
    util_memory: int = 45
    sm_clock_mhz: int = 1980
    mem_clock_mhz: int = 2619
    power_mw: int = 412_345
    temperature_c: int = 61
    clock_reasons: int = 0
    pcie_tx_kbs: int = 1500
    pcie_rx_kbs: int = 250
    errors: dict[str, type[Exception]] = field(default_factory=dict)
    """NVML function name -> the error class it raises for this GPU (an NVMLError subclass, as a rule)."""
    supported_events: int = (
        pynvml.nvmlEventTypeXidCriticalError
        | pynvml.nvmlEventTypeGpuUnavailableError
        | pynvml.nvmlEventTypeGpuRecoveryAction
        | pynvml.nvmlEventTypePState
    )
    mig_slots: list[FakeGpu | None] = field(default_factory=list)
    """With MIG on, its MIG device slots (None: an empty slot); MIG is off when there are none."""
    instance: tuple[int, int] = (0xFFFFFFFF, 0xFFFFFFFF)
    """A MIG device's GPU and compute instance ids."""
    parent: FakeGpu | None = None


@dataclass
class FakeEventSet:
    registered: list[tuple[FakeGpu, int]] = field(default_factory=list)
    freed: bool = False


class FakeNvml:
    """The pynvml surface used by NvmlSampler. ``calls`` lists (function name, GPU index or -1) in call order."""

    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_Uninitialized = pynvml.NVMLError_Uninitialized
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_NotFound = pynvml.NVMLError_NotFound
    NVML_DEVICE_MIG_ENABLE = pynvml.NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = pynvml.NVML_DEVICE_MIG_DISABLE
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    nvmlEventTypeXidCriticalError = pynvml.nvmlEventTypeXidCriticalError
    nvmlEventTypeGpuUnavailableError = pynvml.nvmlEventTypeGpuUnavailableError
    nvmlEventTypeGpuRecoveryAction = pynvml.nvmlEventTypeGpuRecoveryAction
    nvmlClocksEventReasonGpuIdle = pynvml.nvmlClocksEventReasonGpuIdle
    nvmlClocksThrottleReasonGpuIdle = pynvml.nvmlClocksThrottleReasonGpuIdle

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        *,
        init_error: type[pynvml.NVMLError] | None = None,
        errors: dict[str, type[Exception]] | None = None,
        missing: frozenset[str] = frozenset(),
    ) -> None:
        """``errors``: function name -> error class raised for every GPU. ``missing``: attribute names this
        "library" lacks, e.g. {"nvmlDeviceGetCurrentClocksEventReasons"} for nvidia-ml-py older than 12.535."""
        self.gpus = [FakeGpu()] if gpus is None else gpus
        self.init_error = init_error
        self.errors = dict(errors or {})
        self.missing = missing
        self.initialized = False
        self.calls: list[tuple[str, int]] = []
        self.wait_timeouts: list[int] = []
        self.event_sets: list[FakeEventSet] = []
        self._events: deque[SimpleNamespace] = deque()

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "missing"):
            raise AttributeError(f"module 'pynvml' has no attribute {name!r}")
        return object.__getattribute__(self, name)

    def queue_xid(
        self,
        gpu_index: int,
        xid: int,
        event_type: int = pynvml.nvmlEventTypeXidCriticalError,
        instance: tuple[int, int] = (0xFFFFFFFF, 0xFFFFFFFF),
    ) -> None:
        """Queue an XID critical error (or another event type, with ``xid`` as its data) on one GPU, raised in the
        MIG ``instance`` (GPU, compute instance ids) when given, as the driver would post it."""
        self._events.append(
            SimpleNamespace(
                device=self.gpus[gpu_index],
                eventType=event_type,
                eventData=xid,
                gpuInstanceId=instance[0],
                computeInstanceId=instance[1],
            )
        )

    def count(self, name: str, gpu_index: int = -1) -> int:
        return self.calls.count((name, gpu_index))

    def _enter(self, name: str, gpu: FakeGpu | None = None) -> None:
        """Record the call, then raise as the real library would: uninitialised, or the configured error."""
        board = gpu.parent or gpu if gpu is not None else None  # a MIG device's calls count under its GPU
        self.calls.append((name, -1 if board is None else self.gpus.index(board)))  # FakeGpu compares by identity
        if not self.initialized and name != "nvmlInit":
            raise pynvml.NVMLError_Uninitialized()
        error = (gpu.errors.get(name) if gpu is not None else None) or self.errors.get(name)
        if error is not None:
            raise error()

    # init and devices

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetHandleByIndex", self.gpus[index])
        return self.gpus[index]

    def nvmlDeviceGetUUID(self, handle: FakeGpu) -> str:
        self._enter("nvmlDeviceGetUUID", handle)
        return handle.uuid

    def nvmlDeviceGetName(self, handle: FakeGpu) -> str:
        self._enter("nvmlDeviceGetName", handle)
        return handle.name

    # readings

    def nvmlDeviceGetMemoryInfo(self, handle: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlDeviceGetMemoryInfo", handle)
        free = handle.memory_total - handle.memory_used
        return SimpleNamespace(total=handle.memory_total, free=free, used=handle.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpu) -> SimpleNamespace:
        self._enter("nvmlDeviceGetUtilizationRates", handle)
        return SimpleNamespace(gpu=handle.util_gpu, memory=handle.util_memory)

    def nvmlDeviceGetClockInfo(self, handle: FakeGpu, clock_type: int) -> int:
        self._enter("nvmlDeviceGetClockInfo", handle)
        clocks = {pynvml.NVML_CLOCK_SM: handle.sm_clock_mhz, pynvml.NVML_CLOCK_MEM: handle.mem_clock_mhz}
        if clock_type not in clocks:
            raise pynvml.NVMLError_InvalidArgument()
        return clocks[clock_type]

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetPowerUsage", handle)
        return handle.power_mw

    def nvmlDeviceGetTemperature(self, handle: FakeGpu, sensor: int) -> int:
        self._enter("nvmlDeviceGetTemperature", handle)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return handle.temperature_c

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksEventReasons", handle)
        return handle.clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetCurrentClocksThrottleReasons", handle)
        return handle.clock_reasons

    def nvmlDeviceGetPcieThroughput(self, handle: FakeGpu, counter: int) -> int:
        self._enter("nvmlDeviceGetPcieThroughput", handle)
        counters = {
            pynvml.NVML_PCIE_UTIL_TX_BYTES: handle.pcie_tx_kbs,
            pynvml.NVML_PCIE_UTIL_RX_BYTES: handle.pcie_rx_kbs,
        }
        if counter not in counters:
            raise pynvml.NVMLError_InvalidArgument()
        return counters[counter]

    # events

    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._enter("nvmlEventSetCreate")
        self.event_sets.append(FakeEventSet())
        return self.event_sets[-1]

    def nvmlDeviceGetMigMode(self, handle: FakeGpu) -> list[int]:
        self._enter("nvmlDeviceGetMigMode", handle)
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if handle.mig_slots else pynvml.NVML_DEVICE_MIG_DISABLE
        return [mode, mode]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", handle)
        return len(handle.mig_slots)

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: FakeGpu, index: int) -> FakeGpu:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", handle)
        device = handle.mig_slots[index]
        if device is None:
            raise pynvml.NVMLError_NotFound()
        device.parent = handle
        return device

    def nvmlDeviceGetGpuInstanceId(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", handle)
        return handle.instance[0]

    def nvmlDeviceGetComputeInstanceId(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", handle)
        return handle.instance[1]

    def nvmlDeviceGetSupportedEventTypes(self, handle: FakeGpu) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return handle.supported_events

    def nvmlDeviceRegisterEvents(self, handle: FakeGpu, event_types: int, event_set: FakeEventSet) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)
        event_set.registered.append((handle, event_types))

    def nvmlEventSetWait_v2(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait_v2")
        return self._next_event(event_set, timeout_ms)

    def nvmlEventSetWait(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait")
        return self._next_event(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set: FakeEventSet) -> None:
        self._enter("nvmlEventSetFree")
        event_set.freed = True

    def _next_event(self, event_set: FakeEventSet, timeout_ms: int) -> SimpleNamespace:
        """Never sleeps: an empty queue times out at once, whatever ``timeout_ms`` says."""
        assert not event_set.freed, "waited on a freed event set"
        self.wait_timeouts.append(timeout_ms)
        registered = {id(gpu): types for gpu, types in event_set.registered}
        while self._events:
            event = self._events.popleft()
            if registered.get(id(event.device), 0) & event.eventType:
                return event
        raise pynvml.NVMLError_Timeout()
