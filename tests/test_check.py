"""`devicebench check`: every check's pass, warn and fail on made-up machines (a fake NVML, a fake accelerator whose
synchronize works or returns at once, forced ISAs and loads, ceilings at a chosen fraction of the datasheet), and
the real command on this CPU end to end.

    python -m pytest -q tests/test_check.py
"""

from __future__ import annotations

import json
import os
import platform
import re
import sys
import threading
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import fakes
import psutil
import pytest
import torch
from fakes import H100_NAME as H100
from fakes import FakeGpu, FakeNotSupported, FakeNvmlError
from typer.testing import CliRunner

from devicebench import check, nvml
from devicebench.check import ceilings as check_ceilings
from devicebench.check import cpu as check_cpu
from devicebench.check import noise as check_noise
from devicebench.check import software as check_software
from devicebench.check import work as check_work
from devicebench.check.ceilings import ACCELERATOR_CHECK_PLAN, CPU_CHECK_PLAN
from devicebench.check.findings import (
    CEILINGS,
    CPU,
    FAIL,
    GROUPS,
    NOISE,
    PASS,
    SOFTWARE,
    STATUSES,
    TIMING,
    WARN,
    WORK,
    Check,
)
from devicebench.check.work import TIMING_PRODUCTS, TIMING_SIZE_ACCELERATOR, TrainingRun
from devicebench.cli import EXIT_USAGE, app
from devicebench.cli import check as check_command
from devicebench.engine import monitor as monitor_module
from devicebench.engine import run_to_run
from devicebench.engine.calibrate import DeviceCeilings, Measurement
from devicebench.engine.calibration_files import CALIBRATION_DIR_VARIABLE
from devicebench.engine.calibration_store import load_calibration
from devicebench.engine.timing import Stopwatch
from devicebench.environment import machine_fingerprint
from devicebench.machine import Accelerator
from devicebench.results.stats import between_process_cv

cli = CliRunner()
CPU_DEVICE = torch.device("cpu")
CUDA0 = torch.device("cuda", 0)
OTHER_PID = 999_999_999  # a process ID no test process has
HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")
CHECK_KEYS = {"device", "group", "name", "status", "measured", "advice"}


def find(checks: list[Check], name: str) -> Check:
    (found,) = [entry for entry in checks if entry.name == name]
    return found


def processes_of_known_rates(device: torch.device) -> run_to_run.RunToRunMeasurement:
    """The run-to-run check's measurement with each fresh process replaced by known epochs: 2% apart, 1% within."""
    processes = iter([[100.0, 101.0, 99.0], [102.0, 103.0, 101.0], [98.0, 99.0, 97.0], [100.0, 99.0, 101.0]])
    return run_to_run.measure_run_to_run(device, processes=4, launch=lambda name: next(processes))


@pytest.fixture(autouse=True)
def run_to_run_without_processes(monkeypatch, no_stored_calibration):
    """Every check here measures the run-to-run variation from known epochs (tests/test_run_to_run.py starts real
    processes) and stores it in the empty calibration folder each test gets."""
    monkeypatch.setattr(check_noise, "measure_run_to_run", processes_of_known_rates)


@pytest.fixture(autouse=True)
def fresh_driver_version():
    """nvml.driver_version() is cached: each test sees its own (fake) NVML."""
    nvml.driver_version.cache_clear()
    yield
    nvml.driver_version.cache_clear()


@pytest.fixture
def cpu_machine(monkeypatch) -> Callable[..., None]:
    """A Linux machine with a CPU-only PyTorch, no GPU, no driver, nothing hidden; calling it changes the build
    (any devicebench.machine.Machine field)."""
    monkeypatch.setattr(platform, "system", lambda: "Linux")
    for variable in HIDING_VARIABLES:
        monkeypatch.delenv(variable, raising=False)
    fakes.install_driver(monkeypatch)

    def build(**changes: object) -> None:
        fakes.install_machine(monkeypatch, fakes.machine(**changes))

    build()
    return build


def install_h100(monkeypatch, visible: bool = True) -> None:
    """cuda:0 an H100 behind a CUDA 12.4 build with cuDNN 9.1.0; `visible` False: the build sees no GPU."""
    fakes.install_machine(monkeypatch, fakes.cuda_build(devices=1 if visible else 0), fakes.h100s(1))


@pytest.fixture
def h100_machine(cpu_machine, monkeypatch):
    """cuda:0 is an H100 behind a CUDA 12.4 build with cuDNN 9.1.0, and its NVIDIA driver is installed."""
    install_h100(monkeypatch)
    fakes.install_driver(monkeypatch, paths=frozenset({"/proc/driver/nvidia"}), tools=frozenset({"nvidia-smi"}))


# --- a fake nvidia-ml-py ---------------------------------------------------------------------------------------


def h100_gpu(failing: Iterable[str] = (), **figures: object) -> FakeGpu:
    """The H100 as NVML sees it while training: 80 % busy at 300 W, with neither an energy counter nor a utilisation
    buffer (the monitor polls); `failing` NVML functions answer Not Supported."""
    unsupported = ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetSamples", *failing)
    return FakeGpu(
        **{"utilization_percent": 80, "power_w": 300, **figures}, failing=dict.fromkeys(unsupported, FakeNotSupported)
    )


@pytest.fixture
def nvidia(h100_machine, monkeypatch) -> Callable[[FakeGpu], None]:
    """Installs a fake nvidia-ml-py over the H100, and a fake clock under the monitor."""
    monitor_clock = [0.0]
    monkeypatch.setattr(monitor_module, "host_seconds", lambda: monitor_clock[0])

    def install(gpu: FakeGpu) -> list[float]:
        fakes.install_nvml(monkeypatch, [gpu], monitor_clock)
        return monitor_clock

    return install


# --- software --------------------------------------------------------------------------------------------------


def test_a_cpu_only_build_beside_an_nvidia_driver_fails(cpu_machine, monkeypatch):
    fakes.install_driver(monkeypatch, paths=frozenset({"/proc/driver/nvidia"}))
    found = check_software.pytorch_build_check()
    assert found.status == FAIL
    assert "CPU-only build" in found.measured and "NVIDIA GPU driver is present (/proc/driver/nvidia)" in found.measured
    assert "Install a CUDA build" in found.advice and "pytorch.org" in found.advice


def test_a_cpu_only_build_beside_an_amd_driver_fails_asking_for_rocm(cpu_machine, monkeypatch):
    fakes.install_driver(monkeypatch, tools=frozenset({"rocm-smi"}))
    found = check_software.pytorch_build_check()
    assert found.status == FAIL and "AMD GPU driver is present (/usr/bin/rocm-smi)" in found.measured
    assert "Install a ROCm build" in found.advice


def test_a_cuda_build_that_sees_no_gpu_beside_its_driver_fails_saying_why(cpu_machine, monkeypatch):
    cpu_machine(cuda_build="12.4")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    fakes.install_driver(monkeypatch, paths=frozenset({"/proc/driver/nvidia"}))
    found = check_software.pytorch_build_check()
    assert found.status == FAIL and "a CUDA 12.4 build" in found.measured and "sees no GPU" in found.measured
    assert "no GPU is visible (CUDA_VISIBLE_DEVICES='')" in found.advice


def test_a_cpu_machine_passes_and_says_why_there_is_no_gpu(cpu_machine):
    found = check_software.pytorch_build_check()
    assert found.status == PASS and found.advice is None
    assert "a CPU-only build; no GPU driver either (looked for /proc/driver/nvidia, nvidia-smi" in found.measured


def installed(monkeypatch, *distributions: tuple[str, int]) -> None:
    """importlib.metadata lists these (name, bytes) distributions, in this order, each as a single file."""
    listed = [
        types.SimpleNamespace(metadata={"Name": name}, files=[types.SimpleNamespace(size=size)])
        for name, size in distributions
    ]
    monkeypatch.setattr(check_software.importlib.metadata, "distributions", lambda: listed)


@pytest.mark.parametrize(
    "build, library, name", [("cuda", "nvidia-cudnn-cu12", "CUDA 12.4"), ("hip", "pytorch-triton-rocm", "ROCm 6.1")]
)
def test_a_gpu_build_on_a_machine_without_a_driver_warns_that_it_is_gigabytes_for_nothing(
    cpu_machine, monkeypatch, build, library, name
):
    cpu_machine(**{f"{build}_build": name.split()[1]})
    installed(
        monkeypatch,
        ("torch", 1_200_000_000),
        (library, 2_000_000_000),
        ("triton", 900_000_000),
        ("numpy", 10**12),
        ("torch", 10**12),
    )  # numpy is no GPU library; the second torch is shadowed
    found = check_software.pytorch_build_check()
    assert found.status == WARN
    assert found.measured.startswith(
        f"torch {torch.__version__}, a {name} build, 4.1 GB on disk with its GPU "
        "libraries; no GPU driver either (looked for /proc/driver/nvidia, nvidia-smi"
    )
    assert f"A {name.split()[0]} build is gigabytes for nothing on a machine without a GPU" in found.advice
    assert "`pip install torch --index-url https://download.pytorch.org/whl/cpu` before installing" in found.advice


def test_a_build_that_sees_its_gpu_passes_and_names_it(h100_machine):
    found = check_software.pytorch_build_check()
    assert found.status == PASS and f"a CUDA 12.4 build; it sees cuda:0 ({H100})" in found.measured


def test_driver_and_toolkit_versions_are_shown(h100_machine, nvidia):
    nvidia(h100_gpu())
    found = check_software.driver_check()
    assert (found.status, found.measured) == (PASS, "NVIDIA driver 550.54.15, PyTorch's CUDA 12.4, cuDNN 9.1.0")


def test_hidden_devices_warn_and_none_hidden_pass(h100_machine, monkeypatch):
    assert check_software.visible_devices_check().status == PASS
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    found = check_software.visible_devices_check()
    assert found.status == WARN and found.measured == "CUDA_VISIBLE_DEVICES='1' is set; PyTorch sees cuda:0"
    assert "Unset it" in found.advice


def test_nvidia_ml_py_is_needed_only_beside_an_nvidia_gpu(cpu_machine, h100_machine, nvidia, monkeypatch):
    nvidia(h100_gpu())
    assert check_software.nvml_module_check().measured == "installed; NVML answers (driver 550.54.15)"
    nvml.driver_version.cache_clear()
    monkeypatch.setattr(sys.modules["pynvml"], "nvmlInit", lambda: (_ for _ in ()).throw(FakeNvmlError()))
    assert check_software.nvml_module_check().status == WARN  # installed, but NVML does not start
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` makes an ImportError
    missing = check_software.nvml_module_check()
    assert missing.status == WARN and "pip install nvidia-ml-py" in missing.advice
    install_h100(monkeypatch, visible=False)
    assert check_software.nvml_module_check().status == PASS  # no NVIDIA GPU: nothing to sample


def fake_xgboost(with_cuda: bool | None) -> types.ModuleType:
    module = types.ModuleType("xgboost")
    module.__version__ = "3.0.0"
    module.build_info = (
        (lambda: {"USE_CUDA": with_cuda})
        if with_cuda is not None
        else (lambda: (_ for _ in ()).throw(OSError("libxgboost.so: cannot open shared object file")))
    )
    return module


@pytest.mark.parametrize(
    "xgboost, gpu, status",
    [
        (fake_xgboost(True), True, PASS),
        (fake_xgboost(False), True, WARN),  # gbdt would train on the CPU even on --devices cuda
        (None, True, WARN),  # not installed
        (None, False, PASS),  # not installed, and nothing to run it on
        (fake_xgboost(False), False, PASS),
    ],
)
def test_xgboost_needs_cuda_only_beside_a_gpu(h100_machine, monkeypatch, xgboost, gpu, status):
    install_h100(monkeypatch, visible=gpu)
    monkeypatch.setitem(sys.modules, "xgboost", xgboost)
    assert check_software.xgboost_check().status == status


# --- the CPU ---------------------------------------------------------------------------------------------------


def cores(monkeypatch, physical: int, logical: int, allowed: int | None = None) -> None:
    """A CPU of these cores, `allowed` of them (default: all) to this process."""
    counts = {True: logical, False: physical}
    monkeypatch.setattr(psutil, "cpu_count", lambda logical=True: counts[logical])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(allowed or logical)), raising=False)


def test_more_threads_than_physical_cores_warn(monkeypatch):
    cores(monkeypatch, physical=8, logical=16)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 16)
    found = check_cpu.threads_check()
    assert found.status == WARN and found.measured == "torch uses 16 threads; 8 physical cores (16 logical)"
    assert "--threads 8" in found.advice
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    assert check_cpu.threads_check().status == PASS


def test_threads_count_against_the_cores_this_process_may_use(monkeypatch):
    cores(monkeypatch, physical=8, logical=16, allowed=4)  # taskset, or a container's cpuset
    monkeypatch.setattr(torch, "get_num_threads", lambda: 8)
    found = check_cpu.threads_check()
    assert found.status == WARN and "4 of them allowed to this process" in found.measured
    assert "--threads 4" in found.advice


@pytest.mark.parametrize(
    "cpu_flags, capability, status",
    [
        ("avx2,avx512f", "AVX2", WARN),  # AVX-512 left unused
        ("avx2,avx512f", "AVX512", PASS),
        ("avx2", "AVX2", PASS),
        ("avx2", "DEFAULT", WARN),  # not even AVX2
        ("", "DEFAULT", PASS),  # an ARM CPU: neither ISA to miss
    ],
)
def test_torch_kernels_narrower_than_the_cpu_warn(force_cpu_isa, monkeypatch, cpu_flags, capability, status):
    force_cpu_isa(cpu_flags)
    fakes.install_machine(monkeypatch, fakes.machine(cpu_capability=capability))
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    found = check_cpu.isa_check()
    assert found.status == status and f"torch's kernels use {capability}" in found.measured


def test_a_lowered_aten_cpu_capability_is_named_as_the_cause(force_cpu_isa, monkeypatch):
    force_cpu_isa("avx2,avx512f")
    fakes.install_machine(monkeypatch, fakes.machine(cpu_capability="AVX2"))
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert check_cpu.isa_check().advice == "ATEN_CPU_CAPABILITY=avx2 lowers it: unset it."


@pytest.mark.parametrize("cpu_flags, says", [("avx2", "not native"), ("avx2,avx512f,amx_bf16,amx_tile", "native")])
def test_bf16_is_information_that_passes_either_way(force_cpu_isa, cpu_flags, says):
    force_cpu_isa(cpu_flags)
    found = check_cpu.bf16_check()
    assert found.status == PASS and found.measured.startswith(f"{says} (")


@pytest.mark.parametrize("load, status", [(6.0, WARN), (3.9, PASS)])
def test_other_processes_keeping_half_the_cores_busy_warn(monkeypatch, load, status):
    cores(monkeypatch, physical=4, logical=8)
    monkeypatch.setattr(psutil, "getloadavg", lambda: (load, 1.0, 1.0))
    found = check_cpu.load_check()
    assert found.status == status and f"1-minute load average {load:.2f} on 8 logical cores" in found.measured
    if status == WARN:
        assert "other processes keep about 6 of them busy" in found.measured


# --- work lands on the device ----------------------------------------------------------------------------------


def gpu_training(monitor_clock: list[float], parameter_device: torch.device = CUDA0) -> Callable[..., TrainingRun]:
    """Training that lasts 1.5 s on the monitor's clock and leaves the parameters on `parameter_device`."""

    def train(device: torch.device) -> TrainingRun:
        monitor_clock[0] += 1.5
        return TrainingRun(parameter_device, steps=600, seconds=1.5)

    return train


def test_a_gpu_that_stayed_idle_and_lacks_the_process_fails(nvidia):
    clock = nvidia(h100_gpu(utilization_percent=1, pids=(OTHER_PID,)))
    checks = check_work.work_checks(CUDA0, train=gpu_training(clock))
    assert [(entry.name, entry.status) for entry in checks] == [
        ("model on the device", PASS),
        ("device busy", FAIL),
        ("process on the device", FAIL),
    ]
    assert find(checks, "device busy").measured == "1% busy while training: the work stayed off the GPU"
    assert f"this process ({os.getpid()}) is not in the device's list ({OTHER_PID})" in checks[2].measured


def test_a_busy_gpu_listing_this_process_alone_passes(nvidia):
    clock = nvidia(h100_gpu(utilization_percent=80, pids=(os.getpid(),)))
    checks = check_work.work_checks(CUDA0, train=gpu_training(clock))
    assert [entry.status for entry in checks] == [PASS, PASS, PASS]
    assert find(checks, "device busy").measured == "80% busy while training"


@pytest.mark.parametrize(
    "pids, says",
    [
        ((OTHER_PID,), "is not in the device's list"),  # a container's PID namespace: busy, so not a fail
        ((), "is not in the device's list (empty)"),
        ((os.getpid(), OTHER_PID), "and 1 other(s) compute on it"),  # shared: figures vary
    ],
)
def test_a_busy_gpu_whose_list_hides_this_process_or_shares_it_warns(nvidia, pids, says):
    clock = nvidia(h100_gpu(utilization_percent=80, pids=pids))
    found = find(check_work.work_checks(CUDA0, train=gpu_training(clock)), "process on the device")
    assert found.status == WARN and says in found.measured


def test_without_nvml_the_gpu_checks_warn_that_they_cannot_tell(nvidia, monkeypatch):
    clock = nvidia(h100_gpu())
    monkeypatch.setitem(sys.modules, "pynvml", None)
    checks = check_work.work_checks(CUDA0, train=gpu_training(clock))
    assert [entry.status for entry in checks] == [PASS, WARN, WARN]
    assert find(checks, "device busy").measured == f"cannot tell: {nvml.NVML_MISSING_NOTE}"


def test_an_nvml_error_listing_processes_warns(nvidia):
    clock = nvidia(h100_gpu(failing={"nvmlDeviceGetComputeRunningProcesses"}))
    found = find(check_work.work_checks(CUDA0, train=gpu_training(clock)), "process on the device")
    assert found.status == WARN and found.measured == "cannot tell: NVML cannot list its processes: Not Supported"


def test_parameters_left_off_the_device_fail(nvidia):
    clock = nvidia(h100_gpu(pids=(os.getpid(),)))
    found = find(check_work.work_checks(CUDA0, train=gpu_training(clock, CPU_DEVICE)), "model on the device")
    assert found.status == FAIL and found.measured.startswith("the parameters are on cpu")


def test_a_cpu_that_stayed_idle_fails():
    def idle(device: torch.device) -> TrainingRun:
        threading.Event().wait(0.3)  # seconds: three times the shortest window the monitor can tell
        return TrainingRun(device, steps=0, seconds=0.3)

    found = find(check_work.work_checks(CPU_DEVICE, train=idle), "CPU busy")
    assert found.status == FAIL and "the CPU stayed idle" in found.measured


# --- timing ----------------------------------------------------------------------------------------------------


@dataclass
class FakeAccelerator:
    """An asynchronous device on a fake clock: a product takes `queue_s` of the host's time to queue and `product_s`
    of the device's, which runs the queue in order. A working synchronize waits for the queue to empty; a broken
    one returns at once. With `launches_block`, queueing a product waits for it (CUDA_LAUNCH_BLOCKING=1)."""

    product_s: float
    queue_s: float = 10e-6
    synchronize_works: bool = True
    launches_block: bool = False
    host_s: float = 0.0
    queue_empty_at_s: float = 0.0

    def product(self) -> None:
        self.host_s += self.queue_s
        self.queue_empty_at_s = max(self.queue_empty_at_s, self.host_s) + self.product_s
        if self.launches_block:
            self.host_s = self.queue_empty_at_s

    def synchronize(self, device: torch.device) -> None:
        if self.synchronize_works:
            self.host_s = max(self.host_s, self.queue_empty_at_s)

    def watch(self, device: torch.device) -> Stopwatch:
        return Stopwatch(
            device, clock=lambda: self.host_s, synchronize=self.synchronize, host_clock=lambda: self.host_s
        )


def product_seconds(tflops: float) -> float:
    """How long one timing product takes at `tflops`."""
    return 2 * TIMING_SIZE_ACCELERATOR**3 / (tflops * 1e12)


def timed(device: torch.device, accelerator: FakeAccelerator) -> Check:
    return check_work.timing_check(device, watch=accelerator.watch(device), product=accelerator.product)


@pytest.fixture(params=[torch.device("mps"), torch.device("xpu", 0)], ids=str)
def accelerator(request, monkeypatch) -> torch.device:
    """An Apple or an Intel GPU, neither of which has a datasheet here."""
    intel = Accelerator(torch.device("xpu", 0), "Intel(R) Data Center GPU Max 1100", 64 * 2**30)
    fakes.install_machine(monkeypatch, fakes.machine(mps_available=True, xpu_devices=1), [intel])
    return request.param


def test_a_working_synchronize_passes_on_any_accelerator(accelerator):
    device = accelerator
    found = timed(device, FakeAccelerator(product_s=product_seconds(10)))
    assert found.status == PASS
    assert found.measured == (
        f"{TIMING_PRODUCTS} fp32 products of 4096x4096: synchronized 219.9 ms, unsynchronized "
        "0.2 ms (10.00 TFLOP/s): the device's work outlasts its queueing"
    )


def test_a_synchronize_that_returns_at_once_fails_on_any_accelerator(accelerator):
    device = accelerator
    found = timed(device, FakeAccelerator(product_s=product_seconds(10), synchronize_works=False))
    assert found.status == FAIL and "synchronized 0.2 ms, unsynchronized 0.2 ms" in found.measured
    assert "no longer than queueing the work" in found.measured and "did not wait" in found.advice


def test_a_synchronize_that_returns_at_once_fails_against_the_datasheet(h100_machine):
    found = timed(CUDA0, FakeAccelerator(product_s=product_seconds(50), synchronize_works=False))
    assert found.status == FAIL and "above the datasheet's 494.7 TFLOP/s" in found.measured


def test_a_rate_above_the_datasheets_peak_fails_even_when_synchronized(h100_machine):
    found = timed(CUDA0, FakeAccelerator(product_s=product_seconds(600)))
    assert found.status == FAIL and "(598.37 TFLOP/s): above the datasheet's 494.7 TFLOP/s" in found.measured


def test_a_gpu_within_its_datasheet_passes(h100_machine):
    found = timed(CUDA0, FakeAccelerator(product_s=product_seconds(50)))
    assert found.status == PASS and found.measured.endswith("within the datasheet's 494.7 TFLOP/s")


def test_launches_that_wait_for_the_work_warn_when_the_datasheet_vouches_for_the_time(h100_machine):
    found = timed(CUDA0, FakeAccelerator(product_s=product_seconds(50), launches_block=True))
    assert found.status == WARN and "the host waited for the work while queueing it" in found.measured
    assert "CUDA_LAUNCH_BLOCKING" in found.advice


# --- ceilings --------------------------------------------------------------------------------------------------


def measurement(rate: float, size: int) -> Measurement:
    return Measurement(rate=rate, size=size, stretch_s=(0.2, 0.2, 0.2), stretch_rates=(rate, rate, rate))


def fake_calibration(
    device_name: str, matmul_tflops: dict[str, float], copy_gb_s: float, host_gb_s: dict[str, float]
) -> Callable[..., DeviceCeilings]:
    """measure_ceilings on a device of these figures; it announces three measurements, as the real one does."""

    def measure(device: torch.device, *, plan, progress) -> DeviceCeilings:
        assert plan == (CPU_CHECK_PLAN if device.type == "cpu" else ACCELERATOR_CHECK_PLAN)
        for step in ("fp32 matmul", "memory copy", "host-to-device copy"):
            progress(step)
        return DeviceCeilings(
            device=str(device),
            device_name=device_name,
            matmul={precision: measurement(rate, 8192) for precision, rate in matmul_tflops.items()},
            not_native=(),
            memory_copy=measurement(copy_gb_s, 2**30),
            host_to_device={kind: measurement(rate, 2**28) for kind, rate in host_gb_s.items()},
            plan=plan,
        )

    return measure


HEALTHY_H100 = {"fp32": 55.0, "tf32": 400.0, "bf16": 750.0}  # 82%, 81%, 76% of the datasheet


def h100_ceilings(fp32: float = 55.0, pinned: float = 25.0, pageable: float = 10.0) -> Callable[..., DeviceCeilings]:
    return fake_calibration(H100, {**HEALTHY_H100, "fp32": fp32}, 2800.0, {"pinned": pinned, "pageable": pageable})


@pytest.mark.parametrize(
    "fp32, status, says",
    [
        (55.0, PASS, "82% of the H100 SXM datasheet's 67 TFLOP/s"),
        (33.5, WARN, "50% of the H100 SXM datasheet's 67 TFLOP/s"),  # throttled, capped, shared, sliced
        (80.4, FAIL, "120% of the H100 SXM datasheet's 67 TFLOP/s"),  # faster than the hardware: a timing defect
    ],
)
def test_ceilings_are_judged_against_the_datasheet(h100_machine, nvidia, fp32, status, says):
    nvidia(h100_gpu())
    checks = check_ceilings.ceiling_checks(CUDA0, measure=h100_ceilings(fp32=fp32))
    fp32_row = find(checks, "matmul fp32")
    assert fp32_row.status == status and fp32_row.measured == f"{fp32:,.2f} TFLOP/s (8192x8192), {says}"
    others = [entry.status for entry in checks if entry.name != "matmul fp32"]
    assert others == [PASS] * 8  # tf32, bf16, copy, host to device, SM clock, temperature, power, PCIe


def test_the_cpu_has_no_datasheet_and_no_host_to_device_copy():
    checks = check_ceilings.ceiling_checks(
        CPU_DEVICE, measure=fake_calibration("AMD EPYC 7B13", {"fp32": 0.1}, 12.5, {})
    )
    assert [(entry.name, entry.status, entry.measured) for entry in checks] == [
        ("matmul fp32", PASS, "0.10 TFLOP/s (8192x8192); no datasheet to compare"),
        ("memory copy", PASS, "12.50 GB/s (1,024 MiB); no datasheet to compare"),
    ]


def test_pinned_copies_no_faster_than_pageable_warn(h100_machine, nvidia):
    nvidia(h100_gpu())
    found = find(check_ceilings.ceiling_checks(CUDA0, measure=h100_ceilings(pinned=9.0)), "host to device")
    assert found.status == WARN and found.measured == "pinned 9.0 GB/s, pageable 10.0 GB/s: pinned memory is no faster"


def test_nvml_figures_of_a_healthy_gpu_pass_with_the_highest_readings_under_load(h100_machine, nvidia):
    nvidia(h100_gpu(sm_clocks_mhz=[345, 1980, 1950, 1200]))  # idle before the first measurement, busy after
    checks = check_ceilings.ceiling_checks(CUDA0, measure=h100_ceilings())
    assert [(entry.name, entry.status, entry.measured) for entry in checks[-4:]] == [
        ("SM clock", PASS, "1980 MHz under load, of 1980 MHz at most"),
        ("temperature", PASS, "62 °C under load, slowdown at 90 °C"),
        ("power limit", PASS, "700 W, default 700 W"),
        ("PCIe link", PASS, "gen 5 of 5, x16 of x16"),
    ]


def test_throttled_clocks_heat_a_lowered_power_cap_and_a_narrow_link_warn(h100_machine, nvidia):
    nvidia(h100_gpu(sm_clocks_mhz=[345, 1100, 1000], temperature_c=87, power_limit_mw=450_000, pcie_width=8))
    checks = check_ceilings.ceiling_checks(CUDA0, measure=h100_ceilings())
    assert [(entry.name, entry.status) for entry in checks[-4:]] == [
        ("SM clock", WARN),
        ("temperature", WARN),
        ("power limit", WARN),
        ("PCIe link", WARN),
    ]
    assert find(checks, "power limit").measured == "450 W, default 700 W"
    assert "nvidia-smi -pl 700" in find(checks, "power limit").advice
    assert find(checks, "PCIe link").measured == "gen 5 of 5, x8 of x16"


def test_each_nvml_figure_is_read_on_its_own_and_a_missing_one_is_left_out(h100_machine, nvidia):
    nvidia(h100_gpu(failing={"nvmlDeviceGetClockInfo", "nvmlDeviceGetTemperatureThreshold"}))
    checks = check_ceilings.ceiling_checks(CUDA0, measure=h100_ceilings())
    assert [entry.name for entry in checks[-3:]] == ["temperature", "power limit", "PCIe link"]
    assert find(checks, "temperature").measured == "62 °C under load"


# --- the whole: rows, failures of the checks themselves, the document ------------------------------------------


def test_a_check_that_raises_becomes_a_row_and_the_others_still_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "xgboost", fake_xgboost(with_cuda=None))  # its build_info raises OSError
    monkeypatch.setattr(check_work, "work_checks", lambda device: [])
    monkeypatch.setattr(
        check_work,
        "timing_check",
        lambda device: (_ for _ in ()).throw(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")),
    )
    monkeypatch.setattr(
        check_ceilings, "ceiling_checks", lambda device, progress: (_ for _ in ()).throw(RuntimeError("boom"))
    )
    checks = check.run_checks([CPU_DEVICE])
    failures = [
        (entry.device, entry.group, entry.status, entry.measured) for entry in checks if entry.name == "could not run"
    ]
    assert failures == [
        (None, SOFTWARE, WARN, "the xgboost check stopped: OSError: libxgboost.so: cannot open shared object file"),
        ("cpu", TIMING, FAIL, "the timing check stopped: the device ran out of memory"),
        ("cpu", CEILINGS, FAIL, "the ceilings check stopped: RuntimeError: boom"),
    ]
    assert {entry.group for entry in checks} == {SOFTWARE, CPU, TIMING, CEILINGS, NOISE}
    assert len([entry for entry in checks if entry.group in (SOFTWARE, CPU)]) == 9  # every machine-wide check


def test_every_warn_and_fail_says_what_to_do_and_no_pass_does():
    with pytest.raises(ValueError, match="advice exactly when it is not a pass"):
        Check(None, CPU, "threads", WARN, "16 threads on 8 cores")
    with pytest.raises(ValueError, match="advice exactly when it is not a pass"):
        Check(None, CPU, "threads", PASS, "8 threads on 8 cores", "nothing")
    with pytest.raises(ValueError, match="is not one of pass, warn, fail"):
        Check(None, CPU, "threads", "ok", "8 threads on 8 cores")


def test_the_document_counts_each_status():
    checks = [
        Check(None, CPU, "a", PASS, "1"),
        Check("cpu", TIMING, "b", WARN, "2", "do"),
        Check("cpu", WORK, "c", FAIL, "3", "do"),
        Check("cpu", WORK, "d", PASS, "4"),
    ]
    found = check.document(checks)
    assert (found["failed"], found["warned"], found["passed"]) == (1, 1, 2)
    assert found["checks"][1] == {
        "device": "cpu",
        "group": TIMING,
        "name": "b",
        "status": WARN,
        "measured": "2",
        "advice": "do",
    }


# --- the command -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_cpu_check(tmp_path_factory) -> dict:
    """`devicebench check --devices cpu --json`, run for real once on this machine: its JSON. Its calibration
    folder is an empty one of its own, which must stay so."""
    calibration_folder = tmp_path_factory.mktemp("check") / "calibration"
    with pytest.MonkeyPatch.context() as monkeypatch:
        monkeypatch.setenv(CALIBRATION_DIR_VARIABLE, str(calibration_folder))
        monkeypatch.setattr(check_noise, "measure_run_to_run", processes_of_known_rates)
        result = cli.invoke(app, ["check", "--devices", "cpu", "--json"])
        stored = load_calibration(machine_fingerprint()["machine_id"])
    assert result.exit_code == 0, result.output
    assert stored["devices"] == {}  # the short calibration is never stored; the run-to-run variation is
    assert set(stored["run_to_run"]) == {"cpu"}
    return json.loads(result.stdout)


@pytest.mark.slow
def test_the_real_cpu_check_passes_with_the_documented_shape(real_cpu_check):
    assert set(real_cpu_check) == {"checks", "failed", "warned", "passed"}
    rows = real_cpu_check["checks"]
    assert all(set(row) == CHECK_KEYS for row in rows)
    assert all(row["status"] in STATUSES and row["group"] in GROUPS and row["device"] in (None, "cpu") for row in rows)
    assert all((row["advice"] is None) == (row["status"] == PASS) for row in rows)
    counts = [sum(row["status"] == status for row in rows) for status in (FAIL, WARN, PASS)]
    assert counts == [real_cpu_check["failed"], real_cpu_check["warned"], real_cpu_check["passed"]]
    assert real_cpu_check["failed"] == 0, [row for row in rows if row["status"] == FAIL]


def test_the_real_cpu_check_measures_work_timing_and_ceilings(real_cpu_check):
    rows = {(row["device"], row["name"]): row for row in real_cpu_check["checks"]}
    model = rows["cpu", "model on the device"]
    assert model["status"] == PASS and model["measured"].startswith("the parameters are on cpu after ")
    trained_s = float(model["measured"].split(" steps in ")[1].removesuffix(" s"))
    assert trained_s >= monitor_module.UTILIZATION_RATES_PERIOD_S  # long enough for NVML to tell how busy a GPU was
    busy = rows["cpu", "CPU busy"]  # warns, not fails, when a loaded machine starves the run
    percent = float(busy["measured"].split("this process used ")[1].split("%")[0])
    assert busy["status"] in (PASS, WARN) and percent >= check_work.CPU_IDLE_MAX_PERCENT
    timing = rows["cpu", "synchronized clock"]
    synchronized, unsynchronized = (
        float(timing["measured"].split(f"{word} ")[1].split(" ms")[0]) for word in ("synchronized", "unsynchronized")
    )
    assert timing["status"] == PASS and synchronized >= unsynchronized > 0  # the CPU's kernels finish as they return
    matmul = re.fullmatch(
        r"([\d.,]+) TFLOP/s \((\d+)x\2\); no datasheet to compare", rows["cpu", "matmul fp32"]["measured"]
    )
    assert matmul and int(matmul[2]) <= CPU_CHECK_PLAN.matmul_size  # the largest size that fits a 0.3 s stretch
    copy = re.fullmatch(r"([\d.,]+) GB/s \(256 MiB\); no datasheet to compare", rows["cpu", "memory copy"]["measured"])
    assert copy and float(copy[1].replace(",", "")) > 0
    gpu_build_without_gpu = bool(torch.version.cuda or torch.version.hip) and not torch.cuda.is_available()
    assert rows[None, "PyTorch build"]["status"] == (WARN if gpu_build_without_gpu else PASS)
    assert rows[None, "load from other processes"]["status"] in (PASS, WARN)


@pytest.fixture
def wide_console(monkeypatch) -> None:
    """200 columns, whatever $COLUMNS says: no check's name or short advice wraps onto a second line."""
    monkeypatch.setattr(check_command.console, "width", 200)


def as_checks(document: dict) -> list[Check]:
    return [Check(**row) for row in document["checks"]]


def test_the_table_shows_every_check_by_device(real_cpu_check, wide_console, monkeypatch):
    monkeypatch.setattr(check_command, "run_checks", lambda chosen, progress: as_checks(real_cpu_check))
    result = cli.invoke(app, ["check", "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in lines if line.startswith("│")]
    named = [(row[0], row[2], row[3]) for row in rows if row[2]]  # a check's first line names it
    build_status = next(row["status"] for row in real_cpu_check["checks"] if row["name"] == "PyTorch build")
    assert named[:2] == [("machine", "PyTorch build", build_status), ("", "driver and toolkit", PASS)]
    assert ("cpu", "model on the device", PASS) in named and ("", "matmul fp32", PASS) in named
    assert len(named) == len(real_cpu_check["checks"])
    counts = f"{real_cpu_check['failed']} failed, {real_cpu_check['warned']} warned, {real_cpu_check['passed']} passed"
    assert counts in result.stdout


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_failed_check_exits_1_and_still_reports(wide_console, monkeypatch, flags):
    failed = [Check("cpu", TIMING, "synchronized clock", FAIL, "0.1 ms for 2 TFLOP", "fix synchronize")]
    monkeypatch.setattr(check_command, "run_checks", lambda chosen, progress: failed)
    result = cli.invoke(app, ["check", "--devices", "cpu", *flags])
    assert result.exit_code == 1
    assert "fix synchronize" in result.stdout
    if flags:
        assert json.loads(result.stdout)["failed"] == 1
    else:  # what to do, under the figure
        assert "│ 0.1 ms for 2 TFLOP" in result.stdout and "│ → fix synchronize" in result.stdout


def test_an_unknown_or_missing_device_is_refused_before_any_check(cpu_machine):
    unknown = cli.invoke(app, ["check", "--devices", "tpu"])
    missing = cli.invoke(app, ["check", "--devices", "cuda:0"])
    assert unknown.exit_code == missing.exit_code == EXIT_USAGE
    assert "unknown device 'tpu'" in unknown.stderr
    assert "device 'cuda:0' is not available on this machine" in missing.stderr


def test_the_run_to_run_check_stores_the_figure_and_warns_above_the_noisy_flag_s_five_percent(monkeypatch):
    (found,) = [entry for entry in check.run_checks([CPU_DEVICE]) if entry.group == NOISE]
    measured = between_process_cv([[100, 101, 99], [102, 103, 101], [98, 99, 97], [100, 99, 101]])
    assert found.status == PASS and found.measured.startswith(f"{measured.cv:.1%} between 4 fresh processes")
    stored = load_calibration(machine_fingerprint()["machine_id"])["run_to_run"]["cpu"]
    assert stored["cv"] == pytest.approx(measured.cv)
    noisy = iter([[100.0, 101.0, 99.0], [120.0, 121.0, 119.0], [85.0, 86.0, 84.0]])  # 17% apart
    monkeypatch.setattr(
        check_noise,
        "measure_run_to_run",
        lambda device: run_to_run.measure_run_to_run(device, processes=3, launch=lambda name: next(noisy)),
    )
    warned = check_noise.run_to_run_check(CPU_DEVICE)
    assert warned.status == WARN and "--repeats 3 or more" in warned.advice
