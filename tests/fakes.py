"""Made-up machines for the tests, one way each: a PyTorch build and its accelerators (a devicebench.machine snapshot),
a GPU driver installed or not, and nvidia-ml-py over chosen GPUs. Each is installed through pytest's monkeypatch, so
it is undone when the test ends, and the code under test asks for the machine exactly as it does on a real one.

    from fakes import H100, install_machine, machine
    install_machine(monkeypatch, machine(cuda_build="12.4", cuda_devices=1), [H100])
"""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import sys
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import pytest
import torch

from devicebench import environment, host
from devicebench import machine as machine_module
from devicebench.machine import Accelerator, Machine

# --- the machine torch reports ---------------------------------------------------------------------------------

H100_NAME = "NVIDIA H100 80GB HBM3"  # the H100 SXM's datasheet: fp32 67, tf32 494.7, bf16 989.4 TFLOP/s, 3,350 GB/s
UUID = "8f3a1c2e-0000-4000-8000-00000000000a"  # as torch prints a CUDA device's UUID: no "GPU-" prefix
H100 = Accelerator(
    device=torch.device("cuda", 0),
    name=H100_NAME,
    memory_total_bytes=81559 * 2**20,
    compute_capability=(9, 0),
    multiprocessors=132,
    uuid=UUID,
)
# What the cached facts derived from the snapshot are: each test that installs a machine gets empty ones of its own
_DERIVED_CACHES = (
    (environment, "_software_versions"),
    (environment, "_cudnn_version"),
    (environment, "_accelerator_descriptions"),
    (host, "cpu_isa"),
)


def machine(**changes: object) -> Machine:
    """A CPU-only build of this torch version that sees no accelerator, with `changes` made (any Machine field)."""
    cpu_only = Machine(
        torch_version=torch.__version__,
        cuda_build=None,
        hip_build=None,
        xpu_build=None,
        mps_built=False,
        cudnn_version=None,
        cpu_capability=torch.backends.cpu.get_cpu_capability(),  # this CPU's, which tests of the ISA replace
        cuda_devices=0,
        mps_available=False,
        xpu_devices=0,
    )
    return dataclasses.replace(cpu_only, **changes)


def this_machine(**changes: object) -> Machine:
    """This machine as its torch reports it, with `changes` made (any Machine field)."""
    return dataclasses.replace(machine_module.snapshot(), **changes)


def cuda_build(devices: int = 0, **changes: object) -> Machine:
    """A CUDA 12.4 build with cuDNN 9.1.0 that sees `devices` CUDA devices."""
    return machine(cuda_build="12.4", cudnn_version=90100, cuda_devices=devices, **changes)


def h100s(count: int) -> list[Accelerator]:
    """cuda:0 .. cuda:count-1, each an H100 SXM with the same UUID (NVML's fakes find each by it)."""
    return [dataclasses.replace(H100, device=torch.device("cuda", index)) for index in range(count)]


def install_machine(
    monkeypatch: pytest.MonkeyPatch, snapshot: Machine, accelerators: Iterable[Accelerator] = ()
) -> list[torch.device]:
    """Make devicebench.machine answer with `snapshot` and `accelerators` until the test ends; returns the log of
    the devices asked about, in order. Asking about a device not given is a KeyError, as torch raises for one."""
    described = {_indexed(accelerator.device): accelerator for accelerator in accelerators}
    asked: list[torch.device] = []

    def accelerator(device: torch.device) -> Accelerator:
        asked.append(device)
        return described[_indexed(device)]

    monkeypatch.setattr(machine_module, "snapshot", lambda: snapshot)
    monkeypatch.setattr(machine_module, "accelerator", accelerator)
    for module, name in _DERIVED_CACHES:  # a fresh cache for the test; the real one returns, untouched, after it
        monkeypatch.setattr(module, name, functools.cache(getattr(module, name).__wrapped__))
    return asked


def _indexed(device: torch.device) -> torch.device:
    """`cuda` means cuda:0, as it does in torch."""
    return device if device.index is not None or device.type == "mps" else torch.device(device.type, 0)


# --- the GPU driver installed ----------------------------------------------------------------------------------


def install_driver(monkeypatch: pytest.MonkeyPatch, paths: Iterable[str] = (), tools: Iterable[str] = ()) -> None:
    """Exactly these driver paths exist and these tools are on PATH, among those host.GPU_DRIVERS names."""
    present_paths, present_tools = frozenset(paths), frozenset(tools)
    looked_for = {path for vendor_paths, _ in host.GPU_DRIVERS.values() for path in vendor_paths}
    real_exists = os.path.exists
    monkeypatch.setattr(
        os.path, "exists", lambda path: path in present_paths if path in looked_for else real_exists(path)
    )
    monkeypatch.setattr(shutil, "which", lambda tool: f"/usr/bin/{tool}" if tool in present_tools else None)


# --- nvidia-ml-py --------------------------------------------------------------------------------------------------


class FakeNvmlError(Exception):
    """nvidia-ml-py's NVMLError: str() is NVML's own text for the code."""

    text = "Unknown Error"

    def __str__(self) -> str:
        return self.text


class FakeNotSupported(FakeNvmlError):
    text = "Not Supported"


class FakeNotFound(FakeNvmlError):
    text = "Not Found"


NVML_EPOCH_US = 1_700_000_000_000_000  # the fake clock's 0 s on NVML's clock
NVML_VALUE_TYPE_UNSIGNED_INT = 1  # as in nvml.h: samples come as the union's uiVal
GIB = 2**30  # bytes


@dataclass
class FakeGpu:
    """What NVML says of one GPU. Power is constant, so the energy counter reads power x the fake clock; successive
    nvmlDeviceGetClockInfo calls read `sm_clocks_mhz` in turn."""

    nvml_uuid: str = f"GPU-{UUID}"  # with its prefix, as NVML names it
    memory_used_gib: float = 2
    power_w: float = 100
    utilization_percent: int = 73  # what nvmlDeviceGetUtilizationRates says, at any time
    # the driver's utilisation buffer: (seconds on the fake clock, percent); None: the GPU keeps no buffer
    utilization_samples: list[tuple[float, int]] | None = None
    pids: tuple[int, ...] = ()  # the processes computing on it
    sm_clocks_mhz: list[int] = field(default_factory=lambda: [345, 1980, 1950])
    max_sm_clock_mhz: int = 1980
    temperature_c: int = 62
    slowdown_c: int = 90
    power_limit_mw: int = 700_000  # an H100 SXM's 700 W
    default_power_limit_mw: int = 700_000
    pcie_generation: int = 5
    max_pcie_generation: int = 5
    pcie_width: int = 16
    max_pcie_width: int = 16
    failing: dict[str, type[FakeNvmlError]] = field(default_factory=dict)  # NVML function -> the error it raises


def nvml_timestamp_us(clock_s: float) -> int:
    """NVML stamps samples in microseconds since the Unix epoch, a clock of its own beside the monitor's."""
    return NVML_EPOCH_US + round(clock_s * 1e6)


def fake_pynvml(
    gpus: list[FakeGpu],
    clock: list[float] | None = None,
    driver: str | bytes = "550.54.15",
    init_error: FakeNvmlError | None = None,
) -> tuple[types.ModuleType, list[str]]:
    """A stand-in for nvidia-ml-py over `gpus`, in NVML's (PCI bus) order, reading the fake clock `clock` (seconds,
    element 0). Returns the module and a log of the UUIDs and indices it was asked for and each shutdown."""
    now = clock if clock is not None else [0.0]
    calls: list[str] = []
    nvml = types.ModuleType("pynvml")
    nvml.NVMLError, nvml.NVMLError_NotSupported, nvml.NVMLError_NotFound = FakeNvmlError, FakeNotSupported, FakeNotFound
    nvml.NVML_TOTAL_POWER_SAMPLES, nvml.NVML_GPU_UTILIZATION_SAMPLES, nvml.NVML_CLOCK_SM = 0, 1, 1
    nvml.NVML_TEMPERATURE_GPU, nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 0, 1

    def init() -> None:
        if init_error is not None:
            raise init_error

    def handle_by_uuid(uuid: str) -> FakeGpu:
        calls.append(f"uuid {uuid}")
        found = next((gpu for gpu in gpus if gpu.nvml_uuid == uuid), None)
        if found is None:
            raise FakeNotFound()
        return found

    def handle_by_index(index: int) -> FakeGpu:
        calls.append(f"index {index}")
        return gpus[index]

    nvml.nvmlInit, nvml.nvmlShutdown = init, lambda: calls.append("shutdown")
    nvml.nvmlSystemGetDriverVersion = lambda: driver
    nvml.nvmlDeviceGetHandleByUUID, nvml.nvmlDeviceGetHandleByIndex = handle_by_uuid, handle_by_index
    for name, answer in _device_answers(now).items():
        setattr(nvml, name, _device_call(name, answer))
    return nvml, calls


def _device_call(name: str, answer: Callable[..., object]) -> Callable[..., object]:
    def call(gpu: FakeGpu, *arguments: object) -> object:
        if name in gpu.failing:
            raise gpu.failing[name]()
        return answer(gpu, *arguments)

    return call


def _device_answers(clock: list[float]) -> dict[str, Callable[..., object]]:
    """What each NVML device call answers for a FakeGpu, given its arguments after the handle."""
    clocks_read: dict[int, int] = {}  # id of the GPU -> how many clock readings it gave

    def sm_clock(gpu: FakeGpu, kind: int) -> int:
        taken = clocks_read.get(id(gpu), 0)
        clocks_read[id(gpu)] = taken + 1
        return gpu.sm_clocks_mhz[min(taken, len(gpu.sm_clocks_mhz) - 1)]  # the last reading stays

    def samples(gpu: FakeGpu, sampling_type: int, last_seen_us: int) -> tuple[int, list[types.SimpleNamespace]]:
        if gpu.utilization_samples is None or sampling_type != 1:  # NVML_GPU_UTILIZATION_SAMPLES
            raise FakeNotSupported()
        taken = [
            types.SimpleNamespace(timeStamp=nvml_timestamp_us(at_s), sampleValue=types.SimpleNamespace(uiVal=percent))
            for at_s, percent in gpu.utilization_samples
            if last_seen_us < nvml_timestamp_us(at_s) <= nvml_timestamp_us(clock[0])
        ]
        if not taken:
            raise FakeNotFound()  # what NVML answers when no sample is newer than last_seen_us
        return NVML_VALUE_TYPE_UNSIGNED_INT, taken

    return {
        "nvmlDeviceGetMemoryInfo": lambda gpu: types.SimpleNamespace(
            used=round(gpu.memory_used_gib * GIB), total=80 * GIB
        ),
        "nvmlDeviceGetPowerUsage": lambda gpu: round(gpu.power_w * 1000),  # milliwatts
        "nvmlDeviceGetTotalEnergyConsumption": lambda gpu: round(gpu.power_w * clock[0] * 1000),  # millijoules
        "nvmlDeviceGetUtilizationRates": lambda gpu: types.SimpleNamespace(gpu=gpu.utilization_percent, memory=10),
        "nvmlDeviceGetSamples": samples,
        "nvmlDeviceGetComputeRunningProcesses": lambda gpu: [types.SimpleNamespace(pid=pid) for pid in gpu.pids],
        "nvmlDeviceGetClockInfo": sm_clock,
        "nvmlDeviceGetMaxClockInfo": lambda gpu, kind: gpu.max_sm_clock_mhz,
        "nvmlDeviceGetTemperature": lambda gpu, sensor: gpu.temperature_c,
        "nvmlDeviceGetTemperatureThreshold": lambda gpu, threshold: gpu.slowdown_c,
        "nvmlDeviceGetEnforcedPowerLimit": lambda gpu: gpu.power_limit_mw,
        "nvmlDeviceGetPowerManagementDefaultLimit": lambda gpu: gpu.default_power_limit_mw,
        "nvmlDeviceGetCurrPcieLinkGeneration": lambda gpu: gpu.pcie_generation,
        "nvmlDeviceGetMaxPcieLinkGeneration": lambda gpu: gpu.max_pcie_generation,
        "nvmlDeviceGetCurrPcieLinkWidth": lambda gpu: gpu.pcie_width,
        "nvmlDeviceGetMaxPcieLinkWidth": lambda gpu: gpu.max_pcie_width,
    }


def install_nvml(
    monkeypatch: pytest.MonkeyPatch,
    gpus: list[FakeGpu],
    clock: list[float] | None = None,
    driver: str | bytes = "550.54.15",
    init_error: FakeNvmlError | None = None,
) -> list[str]:
    """fake_pynvml(...) made what `import pynvml` finds until the test ends; returns its log of calls."""
    module, calls = fake_pynvml(gpus, clock, driver, init_error)
    monkeypatch.setitem(sys.modules, "pynvml", module)
    return calls


# --- a CUDA graph, on the CPU (engine/step_graph.py) -------------------------------------------------------------


class FakeCapture:
    """Warms up and "captures" a step as engine/step_graph.CudaCapture does, on any device: the capture records the
    step without running it, and each replay runs it and writes its results into the same two tensors, as a CUDA
    graph writes into its static outputs. `events` logs each warm-up, capture and replay."""

    def __init__(self, events: list[str] | None = None) -> None:
        self.events = [] if events is None else events

    def warm_up(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        self.events.append("warm-up")
        return step()

    def capture(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> FakeGraph:
        self.events.append("capture")
        return FakeGraph(step, self.events)


class FakeGraph:
    def __init__(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]], events: list[str]) -> None:
        self.step = step
        self.events = events
        self.outputs: tuple[torch.Tensor, torch.Tensor] = (torch.empty(0), torch.empty(0))

    def replay(self) -> None:
        self.events.append("replay")
        fresh = self.step()
        if self.outputs[0].numel() == 0:  # the first replay: the static outputs' memory, kept from then on
            self.outputs = (torch.empty_like(fresh[0]), torch.empty_like(fresh[1]))
        for static, result in zip(self.outputs, fresh):
            static.copy_(result)
