"""Device discovery, spec resolution, synchronization and memory, checked against faked GPUs on a CPU-only machine."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys

import fakes
import pytest
import torch

from devicebench import devices, environment, host
from devicebench.devices import DeviceError, resolve_devices
from devicebench.machine import Accelerator

CPU = torch.device("cpu")
CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)
HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "ZE_AFFINITY_MASK")


@pytest.fixture
def fake_machine(monkeypatch):
    """A machine whose PyTorch sees the given numbers of CUDA and XPU devices and MPS or not; `changes` to its build
    (any devicebench.machine.Machine field) go with them."""

    def install(cuda: int = 0, mps: bool = False, xpu: int = 0, **changes: object) -> None:
        fakes.install_machine(
            monkeypatch, fakes.machine(cuda_devices=cuda, mps_available=mps, xpu_devices=xpu, **changes)
        )
        for variable in HIDING_VARIABLES:
            monkeypatch.delenv(variable, raising=False)

    return install


@pytest.fixture
def calls(monkeypatch):
    """Replace torch functions by recorders: calls.record(module, "name", returns=...) then calls.log."""

    class Recorder:
        def __init__(self) -> None:
            self.log: list[tuple[str, tuple]] = []

        def record(self, module, name: str, returns=None) -> None:
            def recorder(*args):
                self.log.append((name, args))
                return returns

            monkeypatch.setattr(module, name, recorder)

    return Recorder()


@pytest.fixture
def fake_hpu_accelerator(monkeypatch):
    """A torch.accelerator that drives "hpu", standing for any kind devicebench has no branch for."""
    monkeypatch.setattr(torch.accelerator, "is_available", lambda: True)
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda: torch.device("hpu"))
    return torch.device("hpu", 0)


@pytest.mark.parametrize(
    ("cuda", "expected"),
    [(0, [CPU]), (1, [CPU, CUDA0]), (2, [CPU, CUDA0, CUDA1])],
)
def test_local_devices_lists_cpu_then_each_cuda_device(fake_machine, cuda, expected):
    fake_machine(cuda=cuda)
    assert devices.local_devices() == expected
    assert resolve_devices("auto") == expected


def test_local_devices_orders_cpu_cuda_mps_xpu(fake_machine):
    fake_machine(cuda=2, mps=True, xpu=1)
    assert devices.local_devices() == [CPU, CUDA0, CUDA1, torch.device("mps"), torch.device("xpu", 0)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("cpu", [CPU]),
        ("cuda", [CUDA0]),  # PyTorch's meaning of a bare "cuda"
        ("cuda:1", [CUDA1]),
        ("cuda,cuda:0", [CUDA0]),
        ("  CPU , Cuda: 1 ,cuda, cpu ", [CPU, CUDA1, CUDA0]),
        ("cuda:1,auto", [CUDA1, CPU, CUDA0, torch.device("mps"), torch.device("xpu", 0)]),
        ("cpu:0", [CPU]),
        ("mps:0,mps", [torch.device("mps")]),
        ("xpu", [torch.device("xpu", 0)]),
    ],
)
def test_resolve_devices_normalises_deduplicates_and_keeps_order(fake_machine, spec, expected):
    fake_machine(cuda=2, mps=True, xpu=1)
    assert resolve_devices(spec) == expected


def test_device_error_is_a_value_error():
    assert issubclass(DeviceError, ValueError)


@pytest.mark.parametrize("name", ["gpu", "tpu", "cuda:x", "cuda:-1", "cuda1", "cpu;cuda"])
def test_unknown_device_names_are_refused_with_the_names_known(fake_machine, name):
    fake_machine(cuda=1)
    with pytest.raises(DeviceError) as error:
        resolve_devices(f"cpu,{name}")
    message = str(error.value)
    assert f"unknown device {name!r} (in 'cpu,{name}')" in message
    assert "auto, cpu, cuda, cuda:N, mps, xpu, xpu:N" in message
    assert "an NVIDIA or AMD GPU is 'cuda'" in message
    assert message.endswith("Devices present: cpu, cuda:0.")


@pytest.mark.parametrize("spec", ["", "  ", "cpu,,cuda", "cpu,"])
def test_empty_names_are_refused(fake_machine, spec):
    fake_machine(cuda=0)
    with pytest.raises(DeviceError, match="has an empty name") as error:
        resolve_devices(spec)
    assert str(error.value).endswith("Devices present: cpu.")


def test_cuda_on_a_cpu_only_build_says_the_build_has_no_cuda(fake_machine, monkeypatch):
    fake_machine(cuda=0)  # a CPU-only build
    monkeypatch.setattr(host.platform, "system", lambda: "Linux")
    with pytest.raises(DeviceError) as error:
        resolve_devices("cpu,cuda")
    assert str(error.value) == (
        "device 'cuda' (in 'cpu,cuda') is not available on this machine. Devices present: cpu. "
        f"This PyTorch ({torch.__version__}) is a CPU-only build: it cannot use a GPU even if one is present. "
        "Install a CUDA build from https://pytorch.org/get-started/locally/"
    )
    assert environment.no_accelerator_reason()[1:] in str(error.value)


def test_cuda_on_a_cuda_build_without_driver_says_no_driver(fake_machine, monkeypatch):
    fake_machine(cuda=0, cuda_build="12.4")
    fakes.install_driver(monkeypatch)  # none
    with pytest.raises(DeviceError) as error:
        resolve_devices("cuda:0")
    assert "device 'cuda:0' is not available on this machine. Devices present: cpu." in str(error.value)
    assert "This PyTorch has CUDA 12.4 but no NVIDIA driver was found (no /proc/driver/nvidia, no nvidia-smi)" in str(
        error.value
    )


@pytest.mark.parametrize(
    ("cuda", "count"), [(1, "1 CUDA device here: cuda:0."), (2, "2 CUDA devices here: cuda:0, cuda:1.")]
)
def test_a_cuda_index_past_the_last_device_says_how_many_there_are(fake_machine, cuda, count):
    fake_machine(cuda=cuda)
    with pytest.raises(DeviceError) as error:
        resolve_devices("cuda:2")
    assert "device 'cuda:2' is not available on this machine." in str(error.value)
    assert str(error.value).endswith(f"PyTorch sees {count}")


def test_a_missing_cuda_index_names_the_variable_that_hides_devices(fake_machine, monkeypatch):
    fake_machine(cuda=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(DeviceError) as error:
        resolve_devices("cuda:1")
    assert str(error.value).endswith(
        "PyTorch sees 1 CUDA device here: cuda:0. CUDA_VISIBLE_DEVICES='3' may hide the others."
    )


def test_mps_off_macos_says_it_is_apple_only(fake_machine, monkeypatch):
    fake_machine(cuda=1)
    monkeypatch.setattr(host.platform, "system", lambda: "Linux")
    with pytest.raises(DeviceError) as error:
        resolve_devices("mps")
    assert str(error.value) == (
        "device 'mps' is not available on this machine. Devices present: cpu, cuda:0. "
        "MPS is the GPU backend of Apple's macOS; this machine runs Linux."
    )


def test_a_second_cpu_is_refused(fake_machine):
    fake_machine(cuda=0)
    with pytest.raises(DeviceError, match="PyTorch has one cpu device, written 'cpu'"):
        resolve_devices("cpu:1")


def test_xpu_on_a_build_without_xpu_says_so(fake_machine, monkeypatch):
    fake_machine(cuda=0, xpu_build=None)
    with pytest.raises(DeviceError, match=r"has no Intel XPU support\. Install an XPU build"):
        resolve_devices("xpu")


def test_this_machine_resolves_auto_to_its_own_devices_cpu_first():
    assert resolve_devices("auto") == devices.local_devices()
    assert devices.local_devices()[0] == CPU
    assert resolve_devices("CPU") == [CPU]


@pytest.mark.parametrize(
    ("device", "module", "function", "expected_args"),
    [
        (CUDA1, torch.cuda, "synchronize", (CUDA1,)),
        (torch.device("xpu", 0), torch.xpu, "synchronize", (torch.device("xpu", 0),)),
        (torch.device("mps"), torch.mps, "synchronize", ()),
    ],
)
def test_synchronize_waits_on_the_right_device(calls, device, module, function, expected_args):
    calls.record(module, function)
    devices.synchronize(device)
    assert calls.log == [(function, expected_args)]


def test_synchronize_on_cpu_waits_on_no_accelerator(calls):
    for module in (torch.cuda, torch.mps, torch.xpu, torch.accelerator):
        calls.record(module, "synchronize")
    devices.synchronize(CPU)
    assert calls.log == []


def test_synchronize_on_another_kind_goes_through_torch_accelerator(calls, fake_hpu_accelerator):
    calls.record(torch.accelerator, "synchronize")
    devices.synchronize(fake_hpu_accelerator)
    assert calls.log == [("synchronize", (fake_hpu_accelerator,))]


def test_synchronize_on_another_kind_without_torch_accelerator_is_an_error(monkeypatch):
    monkeypatch.delattr(torch, "accelerator")
    with pytest.raises(DeviceError, match="devicebench cannot synchronize a 'hpu' device: this PyTorch"):
        devices.synchronize(torch.device("hpu", 0))


def test_device_names(monkeypatch):
    monkeypatch.setattr(host, "cpu_model", lambda: "Apple M2 Pro")
    intel = Accelerator(torch.device("xpu", 0), "Intel(R) Data Center GPU Max 1550", 64 * 2**30)
    asked = fakes.install_machine(
        monkeypatch,
        fakes.machine(cuda_devices=2, xpu_devices=1, mps_available=True),
        [*fakes.h100s(1), dataclasses.replace(fakes.H100, device=CUDA1, name="NVIDIA H100 PCIe"), intel],
    )
    assert devices.device_name(CPU) == "Apple M2 Pro"
    assert devices.device_name(torch.device("mps")) == "Apple M2 Pro GPU"
    assert devices.device_name(CUDA1) == "NVIDIA H100 PCIe"
    assert devices.device_name(torch.device("xpu", 0)) == "Intel(R) Data Center GPU Max 1550"
    assert asked == [CUDA1, torch.device("xpu", 0)]


def test_cpu_name_is_the_cpu_model():
    assert devices.device_name(CPU) == host.cpu_model()
    assert devices.device_name(CPU).strip() != ""


@pytest.mark.parametrize(
    ("device", "module", "reset", "peak"),
    [
        (CUDA1, torch.cuda, "reset_peak_memory_stats", "max_memory_allocated"),
        (torch.device("xpu", 0), torch.xpu, "reset_peak_memory_stats", "max_memory_allocated"),
    ],
)
def test_peak_memory_reads_the_device_counter_in_mib(calls, device, module, reset, peak):
    calls.record(module, reset)
    calls.record(module, peak, returns=3 * 2**20 + 2**19)  # 3.5 MiB in bytes
    devices.reset_peak_memory(device)
    assert devices.peak_memory_mib(device) == 3.5
    assert calls.log == [(reset, (device,)), (peak, (device,))]


def test_peak_memory_on_mps_is_the_driver_allocation_after_emptying_the_cache(calls):
    calls.record(torch.mps, "empty_cache")
    calls.record(torch.mps, "driver_allocated_memory", returns=2**30)
    devices.reset_peak_memory(torch.device("mps"))
    assert devices.peak_memory_mib(torch.device("mps")) == 1024.0
    assert calls.log == [("empty_cache", ()), ("driver_allocated_memory", ())]


def test_cpu_has_no_device_peak_memory(calls):
    for module in (torch.cuda, torch.xpu, torch.accelerator):
        calls.record(module, "reset_peak_memory_stats")
        calls.record(module, "max_memory_allocated", returns=1)
    devices.reset_peak_memory(CPU)
    assert devices.peak_memory_mib(CPU) is None
    assert calls.log == []


def test_peak_memory_on_another_kind_goes_through_torch_accelerator(calls, fake_hpu_accelerator):
    calls.record(torch.accelerator, "reset_peak_memory_stats")
    calls.record(torch.accelerator, "max_memory_allocated", returns=2**21)
    devices.reset_peak_memory(fake_hpu_accelerator)
    assert devices.peak_memory_mib(fake_hpu_accelerator) == 2.0
    assert calls.log == [
        ("reset_peak_memory_stats", (fake_hpu_accelerator,)),
        ("max_memory_allocated", (fake_hpu_accelerator,)),
    ]


def test_peak_memory_on_a_kind_nothing_drives_is_unknown(monkeypatch):
    monkeypatch.delattr(torch, "accelerator")
    devices.reset_peak_memory(torch.device("hpu", 0))  # nothing to reset, and no error: memory is reported, not needed
    assert devices.peak_memory_mib(torch.device("hpu", 0)) is None


@pytest.mark.parametrize("module", ["devicebench.devices", "devicebench.environment"])
def test_either_module_imports_first(module):
    """devices and environment use each other; each must import cleanly on its own."""
    completed = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr


def test_native_bf16_asks_about_the_gpu_it_is_given_not_the_current_one(monkeypatch):
    """torch.cuda.is_bf16_supported() answers for the current device: on a machine with a T4 as cuda:0 and an A100
    as cuda:1, cuda:1 must not be judged by the T4."""
    current = [0]

    @contextlib.contextmanager
    def current_device(device):
        before, current[0] = current[0], device.index
        yield
        current[0] = before

    monkeypatch.setattr(torch.cuda, "device", current_device)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: current[0] == 1)
    assert devices.native_bf16(torch.device("cuda", 1)) and not devices.native_bf16(torch.device("cuda", 0))


def test_native_bf16_on_a_cpu_follows_its_isa(force_cpu_isa):
    force_cpu_isa("avx2,avx512f")
    assert not devices.native_bf16(torch.device("cpu"))
    force_cpu_isa("avx2,amx_bf16,amx_tile")
    assert devices.native_bf16(torch.device("cpu"))
