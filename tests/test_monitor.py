"""Monitor: CPU figures that follow real work, and NVML figures checked exactly against a fake `pynvml` module
(no GPU here) that behaves like nvidia-ml-py: UUID lookup, NVMLError subclasses, a utilisation sample buffer with
microsecond timestamps, an energy counter in millijoules. The fallbacks must never raise.

    python -m pytest -q tests/test_monitor.py
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable

import fakes
import pytest
import torch
from fakes import UUID as UUID_A
from fakes import FakeGpu, FakeNotSupported, FakeNvmlError, fake_pynvml

from devicebench.engine import monitor as monitor_module
from devicebench.engine.monitor import (
    ENERGY_COUNTER_STEP_S,
    POWER_AND_ENERGY,
    POWER_AVERAGING_S,
    SHORTEST_CPU_WINDOW_S,
    UTILIZATION,
    UTILIZATION_RATES_PERIOD_S,
    Monitor,
)
from devicebench.nvml import power_limit_w

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda:0")
NEVER_S = 3600.0  # an interval the test never reaches: only start/window/stop take samples
GIB = 1024**3  # bytes
UUID_B = "5d7e9b41-0000-4000-8000-00000000000b"


class FakeGpuIsLost(FakeNvmlError):
    text = "GPU is lost"


class FakeDriverNotLoaded(FakeNvmlError):
    text = "Driver Not Loaded"


# The monitor's figures, as the NVML functions it reads them through
MEMORY, POWER, ENERGY = "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption"
UTILIZATION_RATES, SAMPLES = "nvmlDeviceGetUtilizationRates", "nvmlDeviceGetSamples"
POWER_LIMIT = "nvmlDeviceGetEnforcedPowerLimit"


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monitor's host clock, in seconds; the test moves it by assigning to element 0."""
    now = [0.0]
    monkeypatch.setattr(monitor_module, "host_seconds", lambda: now[0])
    return now


@pytest.fixture
def machine(monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]) -> Callable[..., list[str]]:
    """Installs a fake NVML over the given GPUs and makes torch's cuda:i report `cuda_uuids[i]` (None: no UUID);
    returns NVML's log."""

    def install(gpus: list[FakeGpu], cuda_uuids: tuple[str | None, ...] = (UUID_A,)) -> list[str]:
        nvml, calls = fake_pynvml(gpus, fake_clock)
        monkeypatch.setitem(sys.modules, "pynvml", nvml)
        described = [
            dataclasses.replace(fakes.H100, device=torch.device("cuda", index), uuid=uuid)
            for index, uuid in enumerate(cuda_uuids)
        ]
        fakes.install_machine(monkeypatch, fakes.cuda_build(devices=len(cuda_uuids)), described)
        return calls

    return install


def burn_cpu(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def test_cpu_window_follows_work_and_has_no_device_figures() -> None:
    with Monitor(CPU, interval_s=0.1) as monitor:
        time.sleep(0.3)
        idle = monitor.window()
        cpu_start_s, wall_start_s = time.process_time(), time.perf_counter()
        burn_cpu(0.3)
        # one Python thread spinning: ~100 % on an idle machine, less on a loaded one, so compare with what it got
        spun_percent = (time.process_time() - cpu_start_s) / (time.perf_counter() - wall_start_s) * 100
        busy = monitor.window()
    assert busy.process_cpu_percent == pytest.approx(spun_percent, abs=15)
    assert busy.process_cpu_percent > idle.process_cpu_percent + spun_percent / 2
    assert busy.samples >= 1 and idle.samples >= 1
    assert busy.rss_peak_mib > 0
    assert busy.device_utilization_percent is None and busy.device_energy_j is None
    assert busy.device_memory_peak_mib is None and busy.device_power_mean_w is None
    assert busy.device_note is None  # nothing to watch on the CPU device is not a failure


def test_default_interval_samples_a_short_epoch_several_times() -> None:
    with Monitor(CPU) as monitor:  # the default interval: 0.25 s took one sample or two in a 0.3 s epoch
        time.sleep(0.3)
        assert monitor.window().samples >= 4


def test_short_window_still_takes_a_sample() -> None:
    with Monitor(CPU, interval_s=NEVER_S) as monitor:
        assert monitor.window().samples == 1


def test_nvml_figures_and_energy_from_counter(machine, fake_clock: list[float]) -> None:
    calls = machine([FakeGpu(f"GPU-{UUID_A}", utilization_samples=[(1.0, 60), (2.0, 80)])])
    monitor = Monitor(CUDA0, interval_s=NEVER_S)
    monitor.start()
    fake_clock[0] = 2.0
    usage = monitor.window()
    assert usage.device_utilization_percent == 70
    assert usage.device_memory_peak_mib == 2048
    assert usage.device_energy_j == 200  # counter read at the window's edges: 100 W x 2 s
    assert usage.device_power_mean_w == 100  # energy over the window's length
    assert usage.device_note is None
    fake_clock[0] = 2.5
    assert monitor.stop().device_energy_j == 50  # the next window starts where this one ended
    assert calls == [f"uuid GPU-{UUID_A}", "shutdown"]


def test_energy_integrates_power_without_counter(machine, fake_clock: list[float]) -> None:
    machine([FakeGpu(f"GPU-{UUID_A}", failing={ENERGY: FakeNotSupported})])
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 2.5
        usage = monitor.window()
        assert usage.device_energy_j == pytest.approx(250)  # 100 W x 2.5 s
        assert usage.device_power_mean_w == pytest.approx(100)
        assert usage.device_note is None  # integrating power is a way to measure, not a missing figure
        fake_clock[0] = 3.5
        assert monitor.window().device_energy_j == pytest.approx(100)  # the next window starts where this ended


def test_the_gpu_is_found_by_uuid_when_cuda_and_nvml_number_gpus_differently(
    machine, monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]
) -> None:
    # NVML numbers by PCI bus (B first); CUDA puts the faster A first, so CUDA's cuda:0 is NVML's index 1
    gpu_b = FakeGpu(f"GPU-{UUID_B}", memory_used_gib=70, power_w=300, utilization_percent=5)
    gpu_a = FakeGpu(f"GPU-{UUID_A}", memory_used_gib=2, power_w=100, utilization_percent=73)
    calls = machine([gpu_b, gpu_a], cuda_uuids=(UUID_A, UUID_B))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    seen = {}
    for cuda_index in (0, 1):
        with Monitor(torch.device(f"cuda:{cuda_index}"), interval_s=NEVER_S) as monitor:
            fake_clock[0] += 1.0
            seen[cuda_index] = monitor.window()
    assert seen[0].device_memory_peak_mib == 2 * 1024 and seen[0].device_utilization_percent == 73
    assert seen[0].device_power_mean_w == pytest.approx(100)
    assert seen[1].device_memory_peak_mib == 70 * 1024 and seen[1].device_power_mean_w == pytest.approx(300)
    assert not any(call.startswith("index") for call in calls)


def test_a_mig_slice_is_found_by_its_own_uuid_and_its_unsupported_figures_are_named(
    machine, fake_clock: list[float]
) -> None:
    # on a MIG slice NVML gives memory but neither utilisation nor power nor energy
    unsupported = {name: FakeNotSupported for name in (UTILIZATION_RATES, SAMPLES, POWER, ENERGY)}
    parent = FakeGpu(f"GPU-{UUID_B}", memory_used_gib=40)
    calls = machine([parent, FakeGpu(f"MIG-{UUID_A}", memory_used_gib=3, failing=unsupported)])
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 2.0
        usage = monitor.window()
    assert calls[:2] == [f"uuid GPU-{UUID_A}", f"uuid MIG-{UUID_A}"]  # CUDA's UUID carries no prefix: both tried
    assert usage.device_memory_peak_mib == 3 * 1024  # the slice's memory, not the parent's 40 GiB
    assert usage.device_utilization_percent is None and usage.device_power_mean_w is None
    assert usage.device_energy_j is None
    assert usage.device_note == (
        "utilisation unknown: NVML: Not Supported; power and energy unknown: NVML: Not Supported"
    )


def test_unsupported_utilisation_still_gives_power_and_energy(machine, fake_clock: list[float]) -> None:
    machine([FakeGpu(f"GPU-{UUID_A}", failing={UTILIZATION_RATES: FakeNotSupported, SAMPLES: FakeNotSupported})])
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 2.0
        usage = monitor.window()
    assert usage.device_utilization_percent is None
    assert usage.device_energy_j == 200 and usage.device_power_mean_w == 100
    assert usage.device_memory_peak_mib == 2048
    assert usage.device_note == "utilisation unknown: NVML: Not Supported"


def test_a_figure_that_fails_mid_run_drops_alone_from_then_on(machine, fake_clock: list[float]) -> None:
    gpu = FakeGpu(f"GPU-{UUID_A}")
    machine([gpu])
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 2.0
        before = monitor.window()
        gpu.failing[MEMORY] = FakeGpuIsLost
        fake_clock[0] = 4.0
        after = monitor.window()
        del gpu.failing[MEMORY]  # a dropped figure stays dropped: a half-watched window would mislead
        fake_clock[0] = 6.0
        later = monitor.window()
    assert before.device_memory_peak_mib == 2048 and before.device_note is None
    for usage in (after, later):
        assert usage.device_memory_peak_mib is None
        assert usage.device_energy_j == 200 and usage.device_utilization_percent == 73
        assert usage.device_note == "memory unknown: NVML: GPU is lost"


def test_buffered_utilisation_is_averaged_over_exactly_the_window(machine, fake_clock: list[float]) -> None:
    samples = [(-0.2, 0), (-0.1, 0), (0.0, 0)]  # taken before the monitor started: never counted
    samples += [(0.1, 10), (0.2, 20), (0.3, 30), (0.4, 40), (0.5, 50), (0.6, 60), (0.7, 70), (0.8, 80)]
    gpu = FakeGpu(f"GPU-{UUID_A}", utilization_percent=99, utilization_samples=samples)
    machine([gpu])
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 0.35
        first = monitor.window()  # the samples at 0.1, 0.2, 0.3
        fake_clock[0] = 0.5
        second = monitor.window()  # 0.4 and 0.5 (taken exactly as the window closed)
        fake_clock[0] = 0.8
        third = monitor.window()  # 0.6, 0.7, 0.8
    assert first.device_utilization_percent == pytest.approx(20)
    assert second.device_utilization_percent == pytest.approx(45)
    assert third.device_utilization_percent == pytest.approx(70)


def buffered(period_s: float) -> list[tuple[float, int]]:
    """A utilisation buffer sampled every `period_s`, from before the monitor starts to long after the test ends."""
    return [(-1 + k * period_s, 50) for k in range(round(10 / period_s))]


@pytest.mark.parametrize(
    ("gpu", "figure", "shortest_s"),
    [
        (FakeGpu(f"GPU-{UUID_A}", utilization_samples=buffered(0.2)), UTILIZATION, 0.2),
        (FakeGpu(f"GPU-{UUID_A}", failing={SAMPLES: FakeNotSupported}), UTILIZATION, UTILIZATION_RATES_PERIOD_S),
        (FakeGpu(f"GPU-{UUID_A}", utilization_samples=buffered(0.05)), POWER_AND_ENERGY, ENERGY_COUNTER_STEP_S),
        (
            FakeGpu(f"GPU-{UUID_A}", utilization_samples=buffered(0.05), failing={ENERGY: FakeNotSupported}),
            POWER_AND_ENERGY,
            POWER_AVERAGING_S,
        ),
    ],
    ids=["buffered utilisation", "polled utilisation", "energy counter", "integrated power"],
)
def test_a_window_shorter_than_a_figures_update_period_reports_it_unknown(
    machine, fake_clock: list[float], gpu: FakeGpu, figure: str, shortest_s: float
) -> None:
    machine([gpu])

    def figure_of(usage):
        if figure == UTILIZATION:
            return usage.device_utilization_percent
        assert (usage.device_energy_j is None) == (usage.device_power_mean_w is None)
        return usage.device_energy_j

    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:  # the buffer's history gives its sample period at once
        fake_clock[0] = shortest_s
        long_enough = monitor.window()  # exactly one update period
        fake_clock[0] = shortest_s + shortest_s * 0.999
        too_short = monitor.window()
    assert figure_of(long_enough) is not None and long_enough.device_note is None
    assert figure_of(too_short) is None
    window_s = shortest_s * 0.999
    assert too_short.device_note.startswith(f"{figure} unknown: the {window_s:.3g} s window is shorter than the ")
    assert f"{figure} unknown" in too_short.device_note and f"than the {shortest_s:.3g} s" in too_short.device_note
    assert too_short.device_memory_peak_mib == 2048  # an instantaneous reading is never too short


def test_missing_pynvml_explains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        time.sleep(SHORTEST_CPU_WINDOW_S * 1.5)  # long enough for the CPU to be measured at all
        usage = monitor.window()
    assert usage.device_utilization_percent is None and usage.device_energy_j is None
    assert "nvidia-ml-py" in usage.device_note
    assert usage.process_cpu_percent is not None  # CPU figures survive


def test_nvml_init_failure_explains_itself(monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]) -> None:
    nvml, calls = fake_pynvml([], fake_clock, init_error=FakeDriverNotLoaded())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        usage = monitor.window()
    assert usage.device_power_mean_w is None
    assert usage.device_note == "NVML failed to initialise: Driver Not Loaded"
    assert calls == []  # nothing to shut down after a failed init


def test_a_uuid_nvml_does_not_know_gives_note_not_exception(machine) -> None:
    calls = machine([FakeGpu(f"GPU-{UUID_B}")], cuda_uuids=(UUID_A,))
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        usage = monitor.window()
    assert usage.device_memory_peak_mib is None
    assert usage.device_note == (
        f"NVML has no device with CUDA's UUID (GPU-{UUID_A}: Not Found; MIG-{UUID_A}: Not Found)"
    )
    assert calls == [f"uuid GPU-{UUID_A}", f"uuid MIG-{UUID_A}", "shutdown"]


def test_a_torch_without_device_uuids_gives_note_not_exception(machine, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = machine([FakeGpu(f"GPU-{UUID_A}")], cuda_uuids=(None,))
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        assert "no UUID" in monitor.window().device_note
    assert power_limit_w(CUDA0) is None
    assert calls == ["shutdown", "shutdown"]


def test_power_limit_is_read_from_the_gpu_with_cudas_uuid(machine) -> None:
    machine([FakeGpu(f"GPU-{UUID_B}", failing={POWER_LIMIT: FakeNotSupported}), FakeGpu(f"GPU-{UUID_A}")])
    assert power_limit_w(CUDA0) == 700


def test_stop_is_idempotent_and_window_after_stop_raises() -> None:
    monitor = Monitor(CPU, interval_s=NEVER_S)
    monitor.start()
    first = monitor.stop()
    assert monitor.stop() is first
    with pytest.raises(RuntimeError, match="stopped"):
        monitor.window()


def test_a_window_too_short_to_measure_gives_no_cpu_figure() -> None:
    with Monitor(torch.device("cpu"), interval_s=NEVER_S) as monitor:
        usage = monitor.window()  # microseconds: a tenth of a clock tick
    assert usage.process_cpu_percent is None and usage.rss_peak_mib > 0
