"""Monitor: CPU figures that follow real work, and NVML figures checked exactly against a fake `pynvml` module
(no GPU here), including the fallbacks that must never raise.

    python -m pytest -q tests/test_monitor.py
"""

from __future__ import annotations

import sys
import time
import types
from collections.abc import Callable

import pytest
import torch

from devicebench.engine import monitor as monitor_module
from devicebench.engine.monitor import (
    SHORTEST_CPU_WINDOW_S,
    Monitor,
    NvmlUnavailable,
    nvml_target,
)

CPU = torch.device("cpu")
CUDA0 = torch.device("cuda:0")
NEVER_S = 3600.0  # an interval the test never reaches: only start/window/stop take samples
GIB = 1024**3  # bytes


class FakeNvmlError(Exception):
    pass


class FakeNotSupported(FakeNvmlError):
    pass


def fake_pynvml(
    energy_counter: bool = True, init: Callable[[], None] = lambda: None
) -> tuple[types.ModuleType, list[str]]:
    """A stand-in for nvidia-ml-py: 100 W constant, 73 % busy, 2 GiB used, energy counter +50 J per read.

    Returns the module and a log of the handles it was asked for and whether it was shut down.
    """
    calls: list[str] = []
    energy_mj = [0]

    def total_energy(handle: object) -> int:
        if not energy_counter:
            raise FakeNotSupported("Not Supported")
        energy_mj[0] += 50_000  # millijoules
        return energy_mj[0]

    nvml = types.ModuleType("pynvml")
    nvml.NVMLError = FakeNvmlError
    nvml.NVMLError_NotSupported = FakeNotSupported
    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: calls.append("shutdown")
    nvml.nvmlDeviceGetHandleByIndex = lambda index: calls.append(f"index {index}") or f"handle {index}"
    nvml.nvmlDeviceGetHandleByUUID = lambda uuid: calls.append(f"uuid {uuid}") or f"handle {uuid}"
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: types.SimpleNamespace(gpu=73, memory=10)
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: types.SimpleNamespace(used=2 * GIB, total=80 * GIB)
    nvml.nvmlDeviceGetPowerUsage = lambda handle: 100_000  # milliwatts
    nvml.nvmlDeviceGetTotalEnergyConsumption = total_energy
    return nvml, calls


@pytest.fixture
def fake_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monitor's host clock, in seconds; the test moves it by assigning to element 0."""
    now = [0.0]
    monkeypatch.setattr(monitor_module, "host_seconds", lambda: now[0])
    return now


def burn_cpu(seconds: float) -> None:
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


def test_cpu_window_follows_work_and_has_no_device_figures() -> None:
    with Monitor(CPU, interval_s=0.1) as monitor:
        time.sleep(0.3)
        idle = monitor.window()
        burn_cpu(0.3)
        busy = monitor.window()
    assert busy.process_cpu_percent > idle.process_cpu_percent + 40  # one Python thread spinning ~ 100 %
    assert busy.samples >= 1 and idle.samples >= 1
    assert busy.rss_peak_mib > 0
    assert busy.device_utilization_percent is None and busy.device_energy_j is None
    assert busy.device_memory_peak_mib is None and busy.device_power_mean_w is None
    assert busy.device_note is None  # nothing to watch on the CPU device is not a failure


def test_short_window_still_takes_a_sample() -> None:
    with Monitor(CPU, interval_s=NEVER_S) as monitor:
        assert monitor.window().samples == 1


def test_nvml_figures_and_energy_from_counter(monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]) -> None:
    nvml, calls = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monitor = Monitor(CUDA0, interval_s=NEVER_S)
    monitor.start()
    fake_clock[0] = 2.0
    usage = monitor.window()
    assert usage.device_utilization_percent == 73
    assert usage.device_power_mean_w == 100
    assert usage.device_memory_peak_mib == 2048
    assert usage.device_energy_j == 50  # one counter read per window boundary, +50 J each; not 100 W x 2 s
    assert usage.device_note is None
    assert monitor.stop().device_energy_j == 50
    assert calls == ["index 0", "shutdown"]


def test_energy_integrates_power_without_counter(monkeypatch: pytest.MonkeyPatch, fake_clock: list[float]) -> None:
    nvml, _ = fake_pynvml(energy_counter=False)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        fake_clock[0] = 2.5
        assert monitor.window().device_energy_j == pytest.approx(250)  # 100 W x 2.5 s
        fake_clock[0] = 3.0
        assert monitor.window().device_energy_j == pytest.approx(50)  # the next window starts where this ended


def test_missing_pynvml_explains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        time.sleep(SHORTEST_CPU_WINDOW_S * 1.5)  # long enough for the CPU to be measured at all
        usage = monitor.window()
    assert usage.device_utilization_percent is None and usage.device_energy_j is None
    assert "nvidia-ml-py" in usage.device_note
    assert usage.process_cpu_percent is not None  # CPU figures survive


def test_nvml_init_failure_explains_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    def driver_not_loaded() -> None:
        raise FakeNvmlError("Driver Not Loaded")

    nvml, calls = fake_pynvml(init=driver_not_loaded)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    with Monitor(CUDA0, interval_s=NEVER_S) as monitor:
        usage = monitor.window()
    assert usage.device_power_mean_w is None
    assert "NVML failed" in usage.device_note and "Driver Not Loaded" in usage.device_note
    assert calls == []  # nothing to shut down after a failed init


def test_cuda_visible_devices_maps_to_nvml_index(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml, calls = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    with Monitor(torch.device("cuda:1"), interval_s=NEVER_S) as monitor:
        assert monitor.window().device_utilization_percent == 73
    assert calls[0] == "index 3"


def test_nvml_target_reads_uuids_and_refuses_what_it_cannot_map() -> None:
    assert nvml_target(1, None) == 1
    assert nvml_target(0, "GPU-8f3a, 1") == "GPU-8f3a"
    with pytest.raises(NvmlUnavailable, match="MIG-"):
        nvml_target(0, "MIG-4b2c")
    with pytest.raises(NvmlUnavailable, match="not among"):
        nvml_target(2, "0,1")


def test_unmappable_device_gives_note_not_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml, calls = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with Monitor(torch.device("cuda:1"), interval_s=NEVER_S) as monitor:
        assert "CUDA_VISIBLE_DEVICES" in monitor.window().device_note
    assert calls == ["shutdown"]


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
