"""NVML sampler: reads each NVIDIA GPU's memory, utilisation, clocks, power, temperature, clock-event reasons and
PCIe throughput as ``GPU_*`` Samples, and drains XID critical-error events. On a GPU split by MIG, each MIG device
is sampled too, as a device of its own (its memory is the slice an engine runs in), and an XID raised in one is
reported under its UUID.

Why it is shaped this way:

- NVML is injected (``NvmlSampler(nvml=...)``, STYLE.md point 9). Production passes the ``pynvml`` module (the
  default); tests pass a thin double because no GPU can run here. Error classes and constants are read from the
  injected object, so the double reuses pynvml's real ones.
- A node without a GPU or driver is normal (a CPU-only engine, a laptop, CI): ``start()`` logs one warning and
  returns False, and every other method then does nothing, so engine scraping carries on.
- GPUs differ in what they support (GeForce boards report no power, MIG hides clocks, WSL2 has no events). A
  call that is unsupported drops only its own metrics for that GPU, is logged once and is never made again; any
  other NVML error drops the metric for that sample only and is logged once per (GPU, metric, error class), so a
  flapping GPU cannot flood the log.
- ``sample()`` never raises: the agent's loop must outlive any GPU trouble.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from streamscope_gpu_agent.samples import (
    GPU_CLOCK_EVENT_REASONS,
    GPU_LOST,
    GPU_MEMORY_CLOCK,
    GPU_MEMORY_TOTAL,
    GPU_MEMORY_USED,
    GPU_MEMORY_UTILIZATION,
    GPU_PCIE_RX,
    GPU_PCIE_TX,
    GPU_POWER,
    GPU_SM_CLOCK,
    GPU_TEMPERATURE,
    GPU_UTILIZATION,
    SLOWDOWN_REASONS,
    Sample,
    XidEvent,
)

try:
    import pynvml
except ImportError:  # nvidia-ml-py is an optional dependency: without it, start() reports GPU metrics as off.
    pynvml = None

__all__ = ["GpuDevice", "NvmlSampler", "XidEvent"]

_NO_GPU_WARNING: Final = "no NVIDIA GPU or driver: GPU metrics are off; engine scraping continues (%s)"

_KIB: Final = 1024
"""nvmlDeviceGetPcieThroughput reports KB/s, NVML's KB being 1024 bytes (as nvidia-smi and nvitop read it)."""
PCIE_EVERY: Final = 10
"""PCIe throughput is read every this many samples: nvmlDeviceGetPcieThroughput takes 20 ms or more a call (it
measures over that long), twice per GPU, which every second would keep the agent busy a third of the time on an
eight-GPU node."""
_EVENT_KINDS: Final = (
    ("nvmlEventTypeXidCriticalError", "xid"),
    ("nvmlEventTypeGpuUnavailableError", "gpu_unavailable"),
    ("nvmlEventTypeGpuRecoveryAction", "gpu_recovery_action"),
)
"""The driver events the agent registers for, where the GPU supports them, and their event kinds."""
_NO_INSTANCE: Final = 0xFFFFFFFF
"""An event's GPU or compute instance id when it was not raised in a MIG instance."""
_MAX_XID_EVENTS_PER_CALL: Final = 1024
"""Bounds one xid_events() call during an event storm; the rest stay queued in NVML for the next call."""


@dataclass(frozen=True, slots=True)
class GpuDevice:
    """One GPU as NVML enumerated it at start()."""

    index: int
    uuid: str
    name: str


@dataclass(slots=True)
class _Gpu:
    device: GpuDevice
    handle: Any
    unsupported: set[str] = field(default_factory=set)
    """Readings this GPU does not support; never attempted again."""
    instance: tuple[int, int] | None = None
    """(GPU instance id, compute instance id) of a MIG device; None for a whole GPU."""
    lost: bool = False
    """NVML said the GPU is lost; it is reported as such until a reading succeeds again."""
    legacy_clock_reasons: bool = False
    """The library or driver lacks nvmlDeviceGetCurrentClocksEventReasons: use the older throttle-reasons call."""

    @property
    def label(self) -> str:
        return f"GPU {self.device.index} ({self.device.uuid})"


_Reading = Callable[[_Gpu], list[tuple[str, float]]]


class NvmlSampler:
    """Samples every GPU on the node through NVML; inert when there is none.

    Call ``start()`` once, then ``sample()`` each interval and, from a thread of its own, ``xid_events(timeout_ms)``
    while ``xid_available`` (it blocks up to ``timeout_ms``); ``stop()`` at the end. ``stop()`` waits for a running
    ``xid_events()`` to return before freeing the event set it waits on, so a freed set is never waited on.
    """

    def __init__(
        self,
        nvml: Any = pynvml,
        *,
        clock: Callable[[], int] = time.time_ns,
        log: logging.Logger = logging.getLogger(__name__),  # noqa: B008 - a module logger, shared on purpose
        pcie_every: int = PCIE_EVERY,
    ) -> None:
        self._nvml = nvml
        self._pcie_every = pcie_every
        self._clock = clock
        self._log = log
        self._initialized = False
        self._warned_off = False
        self._gpus: list[_Gpu] = []
        self._logged: set[tuple[int, str, type[BaseException]]] = set()
        self._samples_taken = 0
        self._readings: tuple[tuple[str, _Reading], ...] = (
            ("nvmlDeviceGetMemoryInfo", self._read_memory),
            ("nvmlDeviceGetUtilizationRates", self._read_utilization),
            ("nvmlDeviceGetClockInfo(NVML_CLOCK_SM)", self._read_sm_clock),
            ("nvmlDeviceGetClockInfo(NVML_CLOCK_MEM)", self._read_memory_clock),
            ("nvmlDeviceGetPowerUsage", self._read_power),
            ("nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)", self._read_temperature),
            ("nvmlDeviceGetCurrentClocksEventReasons", self._read_clock_event_reasons),
            ("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_TX_BYTES)", self._read_pcie_tx),
            ("nvmlDeviceGetPcieThroughput(NVML_PCIE_UTIL_RX_BYTES)", self._read_pcie_rx),
        )
        """Each NVML call once per GPU and sample, named for the logs and for remembering what is unsupported."""
        self._mig_readings = self._readings[:1]
        """What a MIG device is read for: its memory, the slice's own (the rest is the board's, or off)."""
        self._event_lock = threading.Lock()
        self._event_set: Any = None
        self._event_wait: Callable[[Any, int], Any] | None = None
        """nvmlEventSetWait_v2, or nvmlEventSetWait in a binding that predates it."""

    @property
    def available(self) -> bool:
        """True once start() found at least one GPU, until stop()."""
        return self._initialized and bool(self._gpus)

    @property
    def devices(self) -> tuple[GpuDevice, ...]:
        return tuple(gpu.device for gpu in self._gpus)

    @property
    def xid_available(self) -> bool:
        """True while XID events are registered; a loop calling xid_events() can stop when this turns False."""
        return self._event_set is not None

    def start(self) -> bool:
        """Initialise NVML, enumerate the GPUs and register for XID events; False (one warning) when there is no GPU."""
        if self.available:
            return True
        if self._nvml is None:
            return self._off("nvidia-ml-py is not installed")
        nvml = self._nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            return self._off(f"{type(exc).__name__}: {exc}")
        self._initialized = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self._shutdown()
            return self._off(f"nvmlDeviceGetCount failed: {type(exc).__name__}: {exc}")
        boards = [gpu for index in range(count) if (gpu := self._open(index)) is not None]
        self._gpus = [*boards, *(instance for board in boards for instance in self._mig_devices(board))]
        if not self._gpus:
            self._shutdown()
            return self._off("NVML found no usable device" if count else "NVML found no device")
        self._register_xid_events()
        names = ", ".join(f"{gpu.device.index}: {gpu.device.name}" for gpu in self._gpus)
        self._log.info("NVML sampling %d GPU(s): %s", len(self._gpus), names)
        return True

    def sample(self) -> list[Sample]:
        """One Sample per (GPU, metric) that could be read now; [] when NVML is unavailable. Never raises."""
        if not self.available:
            return []
        now = self._clock()
        pcie = self._samples_taken % self._pcie_every == 0
        self._samples_taken += 1
        samples: list[Sample] = []
        for gpu in self._gpus:
            was_lost, gpu.lost = gpu.lost, False
            values: list[tuple[str, float]] = []
            for key, read in self._readings if gpu.instance is None else self._mig_readings:
                if key in gpu.unsupported or (key.startswith("nvmlDeviceGetPcieThroughput") and not pcie):
                    continue
                values += self._read(gpu, key, read)
                if gpu.lost:  # nothing else can be read from it
                    values = [(GPU_LOST, 1.0)]
                    break
            if was_lost and not gpu.lost:
                values.append((GPU_LOST, 0.0))
            samples += [
                Sample(
                    now,
                    "gpu",
                    metric,
                    value,
                    gpu_uuid=gpu.device.uuid,
                    gpu_index=gpu.device.index,
                    gpu_name=gpu.device.name,
                )
                for metric, value in values
            ]
        return samples

    def xid_events(self, timeout_ms: int) -> list[XidEvent]:
        """XID errors raised since the last call: waits up to ``timeout_ms`` for the first, then takes whatever
        else is already queued without waiting. Never raises.

        With nothing to report it returns [] after ``timeout_ms``, also when XID events are off or NVML fails, so
        a caller polling it in a loop cannot spin; ``xid_available`` tells whether such a loop is worth running.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        with self._event_lock:
            events, waited = self._drain_xid_events(timeout_ms)
        if not events and not waited:
            time.sleep(max(0.0, deadline - time.monotonic()))
        return events

    def stop(self) -> None:
        """Free the event set and shut NVML down. Idempotent."""
        with self._event_lock:
            self._free_event_set()
        self._gpus = []
        self._shutdown()

    # start() helpers

    def _off(self, reason: str) -> bool:
        """Say once per sampler that GPU metrics are off, and why; a retried start() that fails again stays quiet."""
        if self._warned_off:
            self._log.debug(_NO_GPU_WARNING, reason)
        else:
            self._log.warning(_NO_GPU_WARNING, reason)
            self._warned_off = True
        return False

    def _open(self, index: int) -> _Gpu | None:
        """Handle and identity of one device; None (with a warning) for a device NVML cannot open, e.g. one that
        is lost or hidden from this container, so the others are still sampled."""
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            name = _text(nvml.nvmlDeviceGetName(handle))
        except nvml.NVMLError as exc:
            self._log.warning("GPU %d: skipped, NVML cannot open it: %s: %s", index, type(exc).__name__, exc)
            return None
        return _Gpu(GpuDevice(index, uuid, name), handle)

    def _mig_devices(self, board: _Gpu) -> list[_Gpu]:
        """The MIG devices of a GPU with MIG on, each sampled as a device of its own: its memory is its slice, the
        one an engine on it runs in (the board's utilisation is switched off under MIG; its clocks, power and
        temperature stay the board's). None where MIG is off or the library predates it."""
        nvml = self._nvml
        try:
            if nvml.nvmlDeviceGetMigMode(board.handle)[0] != nvml.NVML_DEVICE_MIG_ENABLE:
                return []
            slots = nvml.nvmlDeviceGetMaxMigDeviceCount(board.handle)
        except (nvml.NVMLError, AttributeError):
            return []
        devices = []
        for slot in range(slots):
            try:
                handle = nvml.nvmlDeviceGetMigDeviceHandleByIndex(board.handle, slot)
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
                instance = (nvml.nvmlDeviceGetGpuInstanceId(handle), nvml.nvmlDeviceGetComputeInstanceId(handle))
            except nvml.NVMLError_NotFound:
                continue  # an empty slot
            except nvml.NVMLError as exc:
                self._log.warning("%s: MIG device %d skipped: %s: %s", board.label, slot, type(exc).__name__, exc)
                continue
            name = f"{board.device.name} MIG {instance[0]}.{instance[1]}"
            devices.append(_Gpu(GpuDevice(board.device.index, uuid, name), handle, instance=instance))
        return devices

    def _register_xid_events(self) -> None:
        """Register every GPU for XID critical errors in one event set. Where that is unsupported (WSL2, some
        vGPU) say so in one warning here; with no GPU registered, xid_events() then returns [] at once."""
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            self._log.warning("XID events are off: nvmlEventSetCreate failed: %s: %s", type(exc).__name__, exc)
            return
        failures = []
        boards = [gpu for gpu in self._gpus if gpu.instance is None]  # a board's events carry the instance ids
        for gpu in boards:
            try:
                nvml.nvmlDeviceRegisterEvents(gpu.handle, self._event_types(gpu), event_set)
            except nvml.NVMLError as exc:
                failures.append(f"{gpu.label}: {type(exc).__name__}: {exc}")
        if failures:
            self._log.warning("XID events are off for %s", "; ".join(failures))
        self._event_set = event_set
        if len(failures) == len(boards):
            self._free_event_set()
            return
        # a binding older than nvmlEventSetWait_v2 calls the driver's first wait by the plain name; newer bindings
        # route the plain name to _v2 too, so it is no fallback for a driver that lacks _v2
        newest = getattr(nvml, "nvmlEventSetWait_v2", None)
        self._event_wait = newest if newest is not None else nvml.nvmlEventSetWait

    def _event_types(self, gpu: _Gpu) -> int:
        """XID errors, plus the GPU-unavailable and recovery-action events where the GPU and library have them."""
        nvml = self._nvml
        known = [getattr(nvml, name, 0) for name, _ in _EVENT_KINDS]
        try:
            supported = int(nvml.nvmlDeviceGetSupportedEventTypes(gpu.handle))
        except (nvml.NVMLError, AttributeError):
            return int(nvml.nvmlEventTypeXidCriticalError)
        return int(nvml.nvmlEventTypeXidCriticalError) | (supported & sum(known[1:]))

    def _shutdown(self) -> None:
        if not self._initialized:
            return
        self._initialized = False
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError as exc:
            self._log.debug("nvmlShutdown failed: %s", exc)

    # sample() helpers

    def _read(self, gpu: _Gpu, key: str, read: _Reading) -> list[tuple[str, float]]:
        """Run one reading; on failure drop its metrics (for good when unsupported) and log it once."""
        nvml = self._nvml
        try:
            return [(metric, float(value)) for metric, value in read(gpu)]
        except nvml.NVMLError_GpuIsLost as exc:
            if not gpu.lost:
                self._once(gpu, "lost", exc, "%s: %s: %s: %s; reported as lost until it answers again (logged once)")
            gpu.lost = True
        except (nvml.NVMLError_NotSupported, nvml.NVMLError_FunctionNotFound) as exc:
            gpu.unsupported.add(key)
            self._log.warning("%s: %s is not supported (%s): its metrics are off for this GPU", gpu.label, key, exc)
        except nvml.NVMLError as exc:
            self._once(gpu, key, exc, "%s: %s failed: %s: %s; metric dropped from this sample (logged once)")
        except Exception as exc:  # not NVML's: a binding or driver oddity must not stop the agent's loop
            self._once(gpu, key, exc, "%s: %s raised %s: %s; metric dropped from this sample (logged once)", trace=True)
        return []

    def _once(self, gpu: _Gpu, key: str, exc: Exception, message: str, *, trace: bool = False) -> None:
        seen = (gpu.device.index, key, type(exc))
        if seen not in self._logged:
            self._logged.add(seen)
            self._log.warning(message, gpu.label, key, type(exc).__name__, exc, exc_info=exc if trace else None)

    def _read_memory(self, gpu: _Gpu) -> list[tuple[str, float]]:
        memory = self._nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
        return [(GPU_MEMORY_USED, memory.used), (GPU_MEMORY_TOTAL, memory.total)]

    def _read_utilization(self, gpu: _Gpu) -> list[tuple[str, float]]:
        rates = self._nvml.nvmlDeviceGetUtilizationRates(gpu.handle)
        return [(GPU_UTILIZATION, rates.gpu / 100), (GPU_MEMORY_UTILIZATION, rates.memory / 100)]

    def _read_sm_clock(self, gpu: _Gpu) -> list[tuple[str, float]]:
        return [(GPU_SM_CLOCK, self._nvml.nvmlDeviceGetClockInfo(gpu.handle, self._nvml.NVML_CLOCK_SM))]

    def _read_memory_clock(self, gpu: _Gpu) -> list[tuple[str, float]]:
        return [(GPU_MEMORY_CLOCK, self._nvml.nvmlDeviceGetClockInfo(gpu.handle, self._nvml.NVML_CLOCK_MEM))]

    def _read_power(self, gpu: _Gpu) -> list[tuple[str, float]]:
        return [(GPU_POWER, self._nvml.nvmlDeviceGetPowerUsage(gpu.handle) / 1000)]

    def _read_temperature(self, gpu: _Gpu) -> list[tuple[str, float]]:
        return [(GPU_TEMPERATURE, self._nvml.nvmlDeviceGetTemperature(gpu.handle, self._nvml.NVML_TEMPERATURE_GPU))]

    def _read_clock_event_reasons(self, gpu: _Gpu) -> list[tuple[str, float]]:
        """The reasons bitmask without GpuIdle: an idle GPU running slow clocks is not a problem to report.

        nvmlDeviceGetCurrentClocksEventReasons replaced the throttle-reasons call (driver 535): older bindings
        lack the attribute and older drivers the symbol, so fall back, once per GPU, to the call they do have.
        """
        nvml = self._nvml
        current = None if gpu.legacy_clock_reasons else getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        reasons = None
        if current is not None:
            try:
                reasons = current(gpu.handle)
            except (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NotSupported) as exc:
                self._log.debug("GPU %d: no clock-event reasons (%s), using throttle reasons", gpu.device.index, exc)
        if reasons is None:
            gpu.legacy_clock_reasons = True
            legacy = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
            if legacy is None:  # removed from bindings after CUDA 13: neither call exists for this GPU
                raise nvml.NVMLError_FunctionNotFound()
            reasons = legacy(gpu.handle)
        return [(GPU_CLOCK_EVENT_REASONS, int(reasons) & SLOWDOWN_REASONS)]

    def _read_pcie_tx(self, gpu: _Gpu) -> list[tuple[str, float]]:
        kib_s = self._nvml.nvmlDeviceGetPcieThroughput(gpu.handle, self._nvml.NVML_PCIE_UTIL_TX_BYTES)
        return [(GPU_PCIE_TX, kib_s * _KIB)]

    def _read_pcie_rx(self, gpu: _Gpu) -> list[tuple[str, float]]:
        kib_s = self._nvml.nvmlDeviceGetPcieThroughput(gpu.handle, self._nvml.NVML_PCIE_UTIL_RX_BYTES)
        return [(GPU_PCIE_RX, kib_s * _KIB)]

    # xid_events() helpers

    def _drain_xid_events(self, timeout_ms: int) -> tuple[list[XidEvent], bool]:
        """The queued XID events, and whether NVML itself waited (timed out) rather than failed or was off."""
        nvml = self._nvml
        events: list[XidEvent] = []
        wait_ms = timeout_ms
        wait = self._event_wait
        while wait is not None and self._event_set is not None and len(events) < _MAX_XID_EVENTS_PER_CALL:
            try:
                data = wait(self._event_set, wait_ms)
            except nvml.NVMLError_Timeout:
                return events, True
            except nvml.NVMLError as exc:
                self._wait_failed(exc)
                break
            wait_ms = 0
            kind = next((kind for name, kind in _EVENT_KINDS if int(data.eventType) & getattr(nvml, name, 0)), None)
            if kind is not None:
                events.append(self._xid_event(data, kind))
        return events, False

    def _wait_failed(self, exc: Exception) -> None:
        """Handle a failed wait: waiting that is unsupported (WSL2, a driver older than nvmlEventSetWait_v2) turns
        events off, said once; anything else is logged once."""
        nvml = self._nvml
        if isinstance(exc, (nvml.NVMLError_FunctionNotFound, nvml.NVMLError_NotSupported)):
            self._log.warning("XID events are off: waiting for them is not supported: %s", exc)
            self._free_event_set()
            return
        seen = (-1, "nvmlEventSetWait", type(exc))
        if seen not in self._logged:
            self._logged.add(seen)
            self._log.warning("waiting for XID events failed: %s: %s (logged once)", type(exc).__name__, exc)

    def _free_event_set(self) -> None:
        if self._event_set is None:
            return
        event_set, self._event_set = self._event_set, None
        try:
            self._nvml.nvmlEventSetFree(event_set)
        except self._nvml.NVMLError as exc:
            self._log.debug("nvmlEventSetFree failed: %s", exc)

    def _xid_event(self, data: Any, kind: str) -> XidEvent:
        """Identify the GPU by UUID: NVML hands back a new handle object, so handles cannot be compared. A GPU
        that fell off the bus may not answer; the XID is still worth reporting without its identity."""
        try:
            uuid = _text(self._nvml.nvmlDeviceGetUUID(data.device))
        except self._nvml.NVMLError:
            uuid = ""
        index = next((gpu.device.index for gpu in self._gpus if uuid and gpu.device.uuid == uuid), -1)
        instance = (getattr(data, "gpuInstanceId", _NO_INSTANCE), getattr(data, "computeInstanceId", _NO_INSTANCE))
        if index >= 0 and instance[0] != _NO_INSTANCE:  # raised in a MIG instance: name its device
            mig = [gpu for gpu in self._gpus if gpu.device.index == index and gpu.instance is not None]
            exact = [gpu for gpu in mig if gpu.instance == instance]
            same_gpu_instance = [gpu for gpu in mig if gpu.instance and gpu.instance[0] == instance[0]]
            uuid = next((gpu.device.uuid for gpu in exact + same_gpu_instance), uuid)
        return XidEvent(time_ns=self._clock(), gpu_uuid=uuid, gpu_index=index, xid=int(data.eventData), kind=kind)


def _text(value: str | bytes) -> str:
    """Older nvidia-ml-py releases return bytes for names and UUIDs."""
    return value.decode() if isinstance(value, bytes) else value
