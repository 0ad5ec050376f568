"""NvmlSampler against a TEST DOUBLE of pynvml (tests/gpu_agent_nvml_double.py): there is no GPU or driver here.

The double reuses pynvml's real constants and exception classes. One test runs the real pynvml, which on this
machine finds no NVIDIA library, to check that the sampler degrades to "GPU metrics off" as it would on a CPU node.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time

import pynvml
import pytest

from streamscope_gpu_agent import samples
from streamscope_gpu_agent.nvml import PCIE_EVERY, NvmlSampler, XidEvent
from tests.gpu_agent_nvml_double import FakeGpu, FakeNvml

T0 = 1_800_000_000_000_000_000
NO_GPU = "no NVIDIA GPU or driver: GPU metrics are off; engine scraping continues"
DCGM_ONLY = {samples.GPU_PCIE_REPLAYS, samples.GPU_ROW_REMAP_FAILURE, samples.GPU_GRAPHICS_ENGINE_ACTIVE}
DCGM_ONLY |= {samples.GPU_SM_ACTIVE, samples.GPU_SM_OCCUPANCY, samples.GPU_TENSOR_ACTIVE, samples.GPU_DRAM_ACTIVE}
ALL_GPU_METRICS = {value for name, value in vars(samples).items() if name.startswith("GPU_")} - DCGM_ONLY
ALL_GPU_METRICS -= {samples.GPU_LOST}  # reported only for a GPU that is lost, or back


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "streamscope_gpu_agent.nvml" and r.levelno == logging.WARNING
    ]


def by_metric(sampled: list[samples.Sample], gpu_index: int = 0) -> dict[str, float]:
    """The values of one GPU's samples, failing on a duplicate metric."""
    values: dict[str, float] = {}
    for sample in sampled:
        if sample.gpu_index == gpu_index:
            assert sample.metric not in values, sample
            values[sample.metric] = sample.value
    return values


def started(nvml: FakeNvml, **kwargs) -> NvmlSampler:
    """Started, reading PCIe throughput every sample unless ``pcie_every`` says otherwise."""
    sampler = NvmlSampler(nvml, clock=lambda: T0, **{"pcie_every": 1, **kwargs})
    assert sampler.start() is True
    return sampler


@pytest.fixture(autouse=True)
def _capture_all(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="streamscope_gpu_agent.nvml")


# values


def test_values_are_converted_to_the_sample_units() -> None:
    reasons = (
        pynvml.nvmlClocksEventReasonGpuIdle
        | pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwSlowdown
    )
    gpu = FakeGpu(
        memory_used=12 * 2**30,
        memory_total=80 * 2**30,
        util_gpu=87,
        util_memory=45,
        sm_clock_mhz=1980,
        mem_clock_mhz=2619,
        power_mw=412_345,
        temperature_c=61,
        clock_reasons=reasons,
        pcie_tx_kbs=1500,
        pcie_rx_kbs=250,
    )
    sampled = started(FakeNvml([gpu])).sample()

    assert by_metric(sampled) == {
        samples.GPU_MEMORY_USED: 12 * 2**30,
        samples.GPU_MEMORY_TOTAL: 80 * 2**30,
        samples.GPU_UTILIZATION: pytest.approx(0.87),
        samples.GPU_MEMORY_UTILIZATION: pytest.approx(0.45),
        samples.GPU_SM_CLOCK: 1980,
        samples.GPU_MEMORY_CLOCK: 2619,
        samples.GPU_POWER: pytest.approx(412.345),
        samples.GPU_TEMPERATURE: 61,
        samples.GPU_CLOCK_EVENT_REASONS: pynvml.nvmlClocksEventReasonSwPowerCap
        | pynvml.nvmlClocksEventReasonHwSlowdown,
        samples.GPU_PCIE_TX: 1500 * 1024,
        samples.GPU_PCIE_RX: 250 * 1024,
    }
    assert {s.metric for s in sampled} == ALL_GPU_METRICS
    for sample in sampled:
        assert (sample.time_ns, sample.source, sample.engine) == (T0, "gpu", "")
        assert (sample.gpu_index, sample.gpu_uuid, sample.gpu_name) == (0, gpu.uuid, gpu.name)
        assert isinstance(sample.value, float)


@pytest.mark.parametrize(
    ("reasons", "slowdowns"),
    [
        (pynvml.nvmlClocksEventReasonGpuIdle, 0),
        # clocks lowered on purpose (application clocks, sync boost, display clock) hold nothing back
        (
            pynvml.nvmlClocksEventReasonApplicationsClocksSetting
            | pynvml.nvmlClocksEventReasonSyncBoost
            | pynvml.nvmlClocksEventReasonDisplayClockSetting,
            0,
        ),
        (pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonSyncBoost, 0x4),
        (pynvml.nvmlClocksEventReasonHwThermalSlowdown | pynvml.nvmlClocksEventReasonGpuIdle, 0x40),
    ],
)
def test_only_clock_events_that_slow_the_gpu_are_reported(reasons: int, slowdowns: int) -> None:
    sampled = started(FakeNvml([FakeGpu(clock_reasons=reasons)])).sample()

    assert by_metric(sampled)[samples.GPU_CLOCK_EVENT_REASONS] == slowdowns


def test_two_gpus_are_sampled_each_under_its_own_identity() -> None:
    gpus = [
        FakeGpu(uuid="GPU-aaaa", name="NVIDIA A100-SXM4-40GB", power_mw=100_000, temperature_c=40),
        FakeGpu(uuid="GPU-bbbb", name="NVIDIA L4", power_mw=72_000, temperature_c=55),
    ]
    sampler = started(FakeNvml(gpus))
    sampled = sampler.sample()

    assert [(d.index, d.uuid, d.name) for d in sampler.devices] == [
        (0, "GPU-aaaa", "NVIDIA A100-SXM4-40GB"),
        (1, "GPU-bbbb", "NVIDIA L4"),
    ]
    assert len(sampled) == 2 * len(ALL_GPU_METRICS)
    for index, gpu in enumerate(gpus):
        mine = [s for s in sampled if s.gpu_index == index]
        assert {(s.gpu_uuid, s.gpu_name) for s in mine} == {(gpu.uuid, gpu.name)}
        assert by_metric(sampled, index)[samples.GPU_POWER] == gpu.power_mw / 1000
        assert by_metric(sampled, index)[samples.GPU_TEMPERATURE] == gpu.temperature_c


# no GPU


@pytest.mark.parametrize("error", [pynvml.NVMLError_LibraryNotFound, pynvml.NVMLError_DriverNotLoaded])
def test_without_a_driver_gpu_metrics_are_off_with_one_warning(
    caplog: pytest.LogCaptureFixture, error: type[pynvml.NVMLError]
) -> None:
    nvml = FakeNvml(init_error=error)
    sampler = NvmlSampler(nvml, clock=lambda: T0)

    assert sampler.start() is False
    assert sampler.start() is False  # a retry stays quiet
    assert sampler.available is False
    assert sampler.sample() == []
    assert sampler.xid_events(timeout_ms=10) == []
    sampler.stop()

    (warning,) = warnings(caplog)
    assert NO_GPU in warning
    assert error.__name__ in warning
    assert nvml.count("nvmlShutdown") == 0  # NVML was never initialised
    assert [name for name, _ in nvml.calls] == ["nvmlInit", "nvmlInit"]


def test_a_driver_without_devices_turns_gpu_metrics_off_and_shuts_nvml_down(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(gpus=[])
    sampler = NvmlSampler(nvml)

    assert sampler.start() is False
    assert sampler.sample() == []
    (warning,) = warnings(caplog)
    assert NO_GPU in warning
    assert "no device" in warning
    assert nvml.initialized is False


def test_the_real_pynvml_matches_what_the_driver_says(caplog: pytest.LogCaptureFixture) -> None:
    """Runs the installed nvidia-ml-py. On a CPU-only machine (like CI here) there is no libnvidia-ml.so and GPU
    metrics turn off with one warning; on a GPU machine the sampler sees exactly the GPUs NVML counts."""
    try:
        pynvml.nvmlInit()
        expected_gpus = pynvml.nvmlDeviceGetCount()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError:
        expected_gpus = 0
    sampler = NvmlSampler()
    try:
        if expected_gpus:
            assert sampler.start() is True
            assert {s.gpu_index for s in sampler.sample()} == set(range(expected_gpus))
            return
        assert sampler.start() is False
        assert sampler.available is False
        assert sampler.sample() == []
        assert sampler.xid_events(timeout_ms=10) == []
    finally:
        sampler.stop()
        sampler.stop()
    (warning,) = warnings(caplog)
    assert NO_GPU in warning
    assert "NVMLError_LibraryNotFound" in warning or "NVMLError_DriverNotLoaded" in warning


# unsupported calls and errors


def test_an_unsupported_call_drops_only_its_metric_is_warned_once_and_not_called_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    unsupported = FakeGpu(uuid="GPU-geforce", errors={"nvmlDeviceGetPowerUsage": pynvml.NVMLError_NotSupported})
    nvml = FakeNvml([unsupported, FakeGpu(uuid="GPU-datacenter")])
    sampler = started(nvml)

    rounds = [sampler.sample() for _ in range(3)]

    for sampled in rounds:
        assert set(by_metric(sampled, 0)) == ALL_GPU_METRICS - {samples.GPU_POWER}
        assert set(by_metric(sampled, 1)) == ALL_GPU_METRICS
    (warning,) = warnings(caplog)
    assert "GPU 0 (GPU-geforce)" in warning
    assert "nvmlDeviceGetPowerUsage" in warning
    assert nvml.count("nvmlDeviceGetPowerUsage", 0) == 1
    assert nvml.count("nvmlDeviceGetPowerUsage", 1) == 3


def test_a_transient_error_drops_the_metric_from_that_sample_and_is_logged_once_per_error_class(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gpu = FakeGpu(errors={"nvmlDeviceGetTemperature": pynvml.NVMLError_Timeout})
    nvml = FakeNvml([gpu])
    sampler = started(nvml)

    lost = [sampler.sample() for _ in range(3)]
    gpu.errors["nvmlDeviceGetTemperature"] = pynvml.NVMLError_Unknown
    unknown = [sampler.sample() for _ in range(2)]
    del gpu.errors["nvmlDeviceGetTemperature"]
    recovered = sampler.sample()

    for sampled in lost + unknown:
        assert set(by_metric(sampled)) == ALL_GPU_METRICS - {samples.GPU_TEMPERATURE}
    assert by_metric(recovered)[samples.GPU_TEMPERATURE] == gpu.temperature_c
    assert nvml.count("nvmlDeviceGetTemperature", 0) == 6  # retried every sample
    logged = warnings(caplog)
    assert len(logged) == 2
    assert "NVMLError_Timeout" in logged[0]
    assert "NVMLError_Unknown" in logged[1]


def test_an_error_that_is_not_nvmls_never_escapes_sample(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml([FakeGpu(errors={"nvmlDeviceGetMemoryInfo": RuntimeError})])
    sampler = started(nvml)

    first, second = sampler.sample(), sampler.sample()

    assert (
        set(by_metric(first))
        == set(by_metric(second))
        == ALL_GPU_METRICS
        - {
            samples.GPU_MEMORY_USED,
            samples.GPU_MEMORY_TOTAL,
        }
    )
    (warning,) = warnings(caplog)
    assert "RuntimeError" in warning


# clock-event reasons: new call, old call


def test_an_old_library_without_the_clocks_event_call_falls_back_to_throttle_reasons(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reasons = pynvml.nvmlClocksThrottleReasonGpuIdle | pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    nvml = FakeNvml([FakeGpu(clock_reasons=reasons)], missing=frozenset({"nvmlDeviceGetCurrentClocksEventReasons"}))
    sampler = started(nvml)

    rounds = [sampler.sample() for _ in range(2)]

    for sampled in rounds:
        assert by_metric(sampled)[samples.GPU_CLOCK_EVENT_REASONS] == pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    assert nvml.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 2
    assert warnings(caplog) == []


@pytest.mark.parametrize("error", [pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_NotSupported])
def test_a_failing_clocks_event_call_falls_back_to_throttle_reasons_for_good(
    caplog: pytest.LogCaptureFixture, error: type[pynvml.NVMLError]
) -> None:
    reasons = pynvml.nvmlClocksThrottleReasonHwPowerBrakeSlowdown
    nvml = FakeNvml([FakeGpu(clock_reasons=reasons)], errors={"nvmlDeviceGetCurrentClocksEventReasons": error})
    sampler = started(nvml)

    rounds = [sampler.sample() for _ in range(3)]

    for sampled in rounds:
        assert by_metric(sampled)[samples.GPU_CLOCK_EVENT_REASONS] == reasons
    assert nvml.count("nvmlDeviceGetCurrentClocksEventReasons", 0) == 1
    assert nvml.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 3
    assert warnings(caplog) == []


def test_when_neither_reasons_call_is_supported_the_metric_is_dropped_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(
        errors={
            "nvmlDeviceGetCurrentClocksEventReasons": pynvml.NVMLError_NotSupported,
            "nvmlDeviceGetCurrentClocksThrottleReasons": pynvml.NVMLError_NotSupported,
        }
    )
    sampler = started(nvml)

    rounds = [sampler.sample() for _ in range(3)]

    for sampled in rounds:
        assert set(by_metric(sampled)) == ALL_GPU_METRICS - {samples.GPU_CLOCK_EVENT_REASONS}
    assert len(warnings(caplog)) == 1
    assert nvml.count("nvmlDeviceGetCurrentClocksThrottleReasons", 0) == 1


def test_a_library_with_neither_reasons_call_drops_the_metric_as_unsupported(caplog: pytest.LogCaptureFixture) -> None:
    both = frozenset({"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"})
    sampler = started(FakeNvml(missing=both))

    rounds = [sampler.sample() for _ in range(2)]

    for sampled in rounds:
        assert set(by_metric(sampled)) == ALL_GPU_METRICS - {samples.GPU_CLOCK_EVENT_REASONS}
    (warning,) = warnings(caplog)
    assert "is not supported" in warning


# XID events


def test_xid_events_are_drained_in_one_call_with_their_gpu() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb")])
    ticks = itertools.count(T0)
    sampler = NvmlSampler(nvml, clock=lambda: next(ticks))
    assert sampler.start()
    nvml.queue_xid(0, 79)
    nvml.queue_xid(1, 13)
    nvml.queue_xid(0, 48)

    events = sampler.xid_events(timeout_ms=500)

    assert events == [
        XidEvent(time_ns=T0, gpu_uuid="GPU-aaaa", gpu_index=0, xid=79),
        XidEvent(time_ns=T0 + 1, gpu_uuid="GPU-bbbb", gpu_index=1, xid=13),
        XidEvent(time_ns=T0 + 2, gpu_uuid="GPU-aaaa", gpu_index=0, xid=48),
    ]
    assert nvml.wait_timeouts == [500, 0, 0, 0]  # waits for the first only, then takes what is queued
    assert nvml.count("nvmlEventSetWait_v2") == 4
    assert sampler.xid_events(timeout_ms=100) == []
    assert nvml.wait_timeouts[-1] == 100


def test_xid_registration_covers_every_gpu_and_the_error_events_each_supports() -> None:
    older = FakeGpu(uuid="GPU-bbbb", supported_events=pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypePState)
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa"), older])
    started(nvml)

    (event_set,) = nvml.event_sets
    errors = pynvml.nvmlEventTypeGpuUnavailableError | pynvml.nvmlEventTypeGpuRecoveryAction
    assert event_set.registered == [
        (nvml.gpus[0], pynvml.nvmlEventTypeXidCriticalError | errors),
        (older, pynvml.nvmlEventTypeXidCriticalError),  # P-state changes are not errors: never registered
    ]


def test_a_gpu_unavailable_or_needing_recovery_is_an_event_of_its_kind() -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa")])
    sampler = started(nvml)
    nvml.queue_xid(0, 0, pynvml.nvmlEventTypeGpuUnavailableError)
    nvml.queue_xid(0, pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, pynvml.nvmlEventTypeGpuRecoveryAction)
    nvml.queue_xid(0, 79)

    found = [(e.kind, e.xid, e.gpu_uuid) for e in sampler.xid_events(timeout_ms=10)]
    assert found == [
        ("gpu_unavailable", 0, "GPU-aaaa"),
        ("gpu_recovery_action", pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET, "GPU-aaaa"),
        ("xid", 79, "GPU-aaaa"),
    ]


def test_a_lost_gpu_is_reported_lost_until_it_answers_and_the_others_still_flow(
    caplog: pytest.LogCaptureFixture,
) -> None:
    nvml = FakeNvml([FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb")])
    sampler = started(nvml)
    nvml.gpus[0].errors["nvmlDeviceGetMemoryInfo"] = pynvml.NVMLError_GpuIsLost

    lost = [sampler.sample(), sampler.sample()]
    assert [by_metric(sampled, 0) for sampled in lost] == [{samples.GPU_LOST: 1.0}] * 2
    assert all(
        set(by_metric(sampled, 1)) >= ALL_GPU_METRICS - {samples.GPU_PCIE_TX, samples.GPU_PCIE_RX} for sampled in lost
    )
    del nvml.gpus[0].errors["nvmlDeviceGetMemoryInfo"]
    back = by_metric(sampler.sample(), 0)
    assert back[samples.GPU_LOST] == 0.0 and samples.GPU_MEMORY_USED in back
    assert samples.GPU_LOST not in by_metric(sampler.sample(), 0)
    assert len([w for w in warnings(caplog) if "lost" in w]) == 1


def test_pcie_throughput_is_read_every_tenth_sample_only() -> None:
    nvml = FakeNvml()
    sampler = started(nvml, pcie_every=PCIE_EVERY)
    with_pcie = [samples.GPU_PCIE_TX in by_metric(sampler.sample()) for _ in range(2 * PCIE_EVERY)]

    assert with_pcie == ([True] + [False] * (PCIE_EVERY - 1)) * 2
    assert nvml.count("nvmlDeviceGetPcieThroughput", 0) == 4


def test_no_xid_event_times_out_to_an_empty_list(caplog: pytest.LogCaptureFixture) -> None:
    sampler = started(FakeNvml())

    began = time.monotonic()
    assert sampler.xid_events(timeout_ms=2000) == []
    assert time.monotonic() - began < 1.0  # NVML did the waiting (the double's instantly): no second wait on top
    assert warnings(caplog) == []


def test_an_xid_from_a_gpu_that_no_longer_answers_is_still_reported() -> None:
    nvml = FakeNvml()
    sampler = started(nvml)
    nvml.gpus[0].errors["nvmlDeviceGetUUID"] = pynvml.NVMLError_GpuIsLost
    nvml.queue_xid(0, 79)

    assert sampler.xid_events(timeout_ms=0) == [XidEvent(time_ns=T0, gpu_uuid="", gpu_index=-1, xid=79)]


def test_unsupported_xid_registration_is_said_once_and_events_stay_empty(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(
        [FakeGpu(uuid="GPU-aaaa"), FakeGpu(uuid="GPU-bbbb")],
        errors={"nvmlDeviceRegisterEvents": pynvml.NVMLError_NotSupported},
    )
    sampler = started(nvml)
    nvml.queue_xid(0, 79)

    assert sampler.xid_available is False
    assert sampler.xid_events(timeout_ms=0) == []
    assert sampler.xid_events(timeout_ms=0) == []
    assert len(sampler.sample()) == len(ALL_GPU_METRICS) * 2  # metrics still flow
    (warning,) = warnings(caplog)
    assert "XID events are off" in warning
    assert "GPU-aaaa" in warning and "GPU-bbbb" in warning
    assert nvml.count("nvmlEventSetWait_v2") == 0
    assert nvml.event_sets[0].freed


@pytest.mark.parametrize(
    "errors",
    [
        {"nvmlDeviceRegisterEvents": pynvml.NVMLError_NotSupported},  # XID events off
        {"nvmlEventSetWait_v2": pynvml.NVMLError_Unknown},  # NVML fails at once
    ],
    ids=["events-off", "wait-fails"],
)
def test_xid_events_takes_its_timeout_when_nvml_cannot_wait(errors: dict[str, type[pynvml.NVMLError]]) -> None:
    """A caller polling xid_events() in a loop must not spin when NVML returns at once."""
    sampler = started(FakeNvml(errors=errors))

    began = time.monotonic()
    assert sampler.xid_events(timeout_ms=50) == []
    assert time.monotonic() - began >= 0.045


def test_a_binding_older_than_the_v2_wait_waits_with_the_plain_name() -> None:
    nvml = FakeNvml(missing=frozenset({"nvmlEventSetWait_v2"}))
    sampler = started(nvml)
    nvml.queue_xid(0, 31)

    assert [e.xid for e in sampler.xid_events(timeout_ms=10)] == [31]
    assert nvml.count("nvmlEventSetWait") == 2


def test_a_driver_without_the_v2_wait_turns_events_off_once(caplog: pytest.LogCaptureFixture) -> None:
    """nvidia-ml-py routes the plain nvmlEventSetWait to _v2 as well: it is no fallback, so none is tried."""
    nvml = FakeNvml(errors={"nvmlEventSetWait_v2": pynvml.NVMLError_FunctionNotFound})
    sampler = started(nvml)
    nvml.queue_xid(0, 31)

    assert sampler.xid_events(timeout_ms=10) == []
    assert not sampler.xid_available
    assert (nvml.count("nvmlEventSetWait_v2"), nvml.count("nvmlEventSetWait")) == (1, 0)
    assert [w for w in warnings(caplog) if "XID events are off" in w] != []


def test_unsupported_waiting_turns_xid_events_off_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(errors={"nvmlEventSetWait_v2": pynvml.NVMLError_NotSupported})
    sampler = started(nvml)

    assert sampler.xid_events(timeout_ms=0) == []
    assert sampler.xid_available is False
    assert sampler.xid_events(timeout_ms=0) == []

    (warning,) = warnings(caplog)
    assert "XID events are off" in warning
    assert nvml.count("nvmlEventSetWait_v2") == 1
    assert nvml.event_sets[0].freed


def test_a_failing_wait_returns_nothing_and_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    nvml = FakeNvml(errors={"nvmlEventSetWait_v2": pynvml.NVMLError_Unknown})
    sampler = started(nvml)

    assert sampler.xid_events(timeout_ms=0) == []
    assert sampler.xid_events(timeout_ms=0) == []

    assert sampler.xid_available is True
    (warning,) = warnings(caplog)
    assert "NVMLError_Unknown" in warning


# stop


def test_stop_frees_the_event_set_and_shuts_nvml_down_once() -> None:
    nvml = FakeNvml()
    sampler = started(nvml)

    sampler.stop()
    sampler.stop()

    assert nvml.count("nvmlEventSetFree") == 1
    assert nvml.event_sets[0].freed
    assert nvml.count("nvmlShutdown") == 1
    assert nvml.initialized is False
    assert sampler.available is False
    assert sampler.sample() == []
    assert sampler.xid_events(timeout_ms=0) == []


def test_stop_waits_for_a_running_xid_wait_before_freeing_its_event_set() -> None:
    """Freeing the set NVML is waiting on would be a use-after-free in the C library."""

    class BlockingWait(FakeNvml):
        def __init__(self) -> None:
            super().__init__()
            self.waiting, self.release = threading.Event(), threading.Event()

        def nvmlEventSetWait_v2(self, event_set, timeout_ms: int):
            self.waiting.set()
            assert self.release.wait(5)
            return super().nvmlEventSetWait_v2(event_set, timeout_ms)

    nvml = BlockingWait()
    sampler = started(nvml)
    waiter = threading.Thread(target=sampler.xid_events, args=(1000,))
    stopper = threading.Thread(target=sampler.stop)

    waiter.start()
    assert nvml.waiting.wait(5)
    stopper.start()
    stopper.join(0.1)
    blocked = stopper.is_alive() and not nvml.event_sets[0].freed
    nvml.release.set()
    waiter.join(5)
    stopper.join(5)

    assert blocked
    assert nvml.event_sets[0].freed
    assert nvml.initialized is False


def test_stop_before_start_does_nothing() -> None:
    nvml = FakeNvml()

    NvmlSampler(nvml).stop()

    assert nvml.calls == []


def test_a_stopped_sampler_can_start_again() -> None:
    nvml = FakeNvml()
    sampler = started(nvml)
    sampler.stop()

    assert sampler.start() is True
    assert len(sampler.sample()) == len(ALL_GPU_METRICS)
    assert nvml.count("nvmlInit") == 2


def test_each_mig_device_is_sampled_as_its_own_device_and_named_by_the_xids_raised_in_it() -> None:
    small = FakeGpu(uuid="MIG-1111", memory_used=3 * 2**30, memory_total=10 * 2**30, instance=(7, 0))
    other = FakeGpu(uuid="MIG-2222", memory_used=9 * 2**30, memory_total=10 * 2**30, instance=(8, 0))
    board = FakeGpu(
        uuid="GPU-board",
        mig_slots=[small, None, other],
        errors={"nvmlDeviceGetUtilizationRates": pynvml.NVMLError_NotSupported},
    )
    nvml = FakeNvml([board, FakeGpu(uuid="GPU-whole")])
    sampler = started(nvml)

    assert [(d.index, d.uuid, d.name) for d in sampler.devices] == [
        (0, "GPU-board", "NVIDIA H100 80GB HBM3"),
        (1, "GPU-whole", "NVIDIA H100 80GB HBM3"),
        (0, "MIG-1111", "NVIDIA H100 80GB HBM3 MIG 7.0"),
        (0, "MIG-2222", "NVIDIA H100 80GB HBM3 MIG 8.0"),
    ]
    by_uuid: dict[str, dict[str, float]] = {}
    for sample in sampler.sample():
        by_uuid.setdefault(sample.gpu_uuid, {})[sample.metric] = sample.value
    # a slice reports its own memory; the board keeps its clocks, power and temperature, its utilisation is off
    assert by_uuid["MIG-1111"] == {samples.GPU_MEMORY_USED: 3 * 2**30, samples.GPU_MEMORY_TOTAL: 10 * 2**30}
    assert by_uuid["MIG-2222"][samples.GPU_MEMORY_USED] == 9 * 2**30
    assert samples.GPU_UTILIZATION not in by_uuid["GPU-board"] and samples.GPU_POWER in by_uuid["GPU-board"]
    # events are registered on the boards, which post them with the instance that raised them
    assert [gpu.uuid for gpu, _ in nvml.event_sets[0].registered] == ["GPU-board", "GPU-whole"]
    nvml.queue_xid(0, 43, instance=(8, 0))
    nvml.queue_xid(0, 79)
    assert [(e.gpu_uuid, e.gpu_index, e.xid) for e in sampler.xid_events(timeout_ms=10)] == [
        ("MIG-2222", 0, 43),
        ("GPU-board", 0, 79),
    ]
