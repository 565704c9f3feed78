"""The machine snapshot: what torch says of this build and its accelerators, read once, and read again after forget().
The one test file that fakes torch's own functions: devicebench.machine is the one module that asks them.

    python -m pytest -q tests/test_machine.py
"""

from __future__ import annotations

import types

import pytest
import torch

from devicebench import machine
from devicebench.machine import Accelerator

CUDA0, CUDA1 = torch.device("cuda", 0), torch.device("cuda", 1)


@pytest.fixture(autouse=True)
def read_afresh():
    """Each test reads torch as it leaves it; the next test reads the real torch again."""
    machine.forget()
    yield
    machine.forget()


class TorchCudaUuid:
    """What torch's `get_device_properties(i).uuid` is: a `_CUuuid`, not a str, whose str() is the bare UUID."""

    def __init__(self, text: str) -> None:
        self._text = text

    def __str__(self) -> str:
        return self._text


def test_the_snapshot_is_what_this_torch_reports():
    found = machine.snapshot()
    assert found.torch_version == torch.__version__
    assert (found.cuda_build, found.hip_build) == (torch.version.cuda, torch.version.hip)
    assert found.cpu_capability == torch.backends.cpu.get_cpu_capability()
    assert found.cudnn_version == torch.backends.cudnn.version()
    assert found.mps_built == torch.backends.mps.is_built()
    assert found.cuda_devices == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    assert found.devices()[0] == torch.device("cpu")


def test_the_snapshot_is_read_once_and_again_after_forget(monkeypatch):
    first = machine.snapshot()
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.version, "hip", "6.1.40091")
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX512")
    assert machine.snapshot() is first
    machine.forget()
    again = machine.snapshot()
    assert (again.cuda_build, again.hip_build, again.cpu_capability) == ("12.4", "6.1.40091", "AVX512")


def test_the_devices_are_the_cpu_then_cuda_mps_and_xpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "is_available", lambda: True)
    monkeypatch.setattr(torch.xpu, "device_count", lambda: 1)
    assert machine.snapshot().devices() == [
        torch.device("cpu"),
        CUDA0,
        CUDA1,
        torch.device("mps"),
        torch.device("xpu", 0),
    ]


def test_a_build_whose_cuda_is_not_available_has_no_cuda_device_whatever_it_counts(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert machine.snapshot().cuda_devices == 0


def test_a_cuda_device_is_described_from_its_properties_read_once_per_device(monkeypatch):
    asked = []

    def properties(device: torch.device) -> types.SimpleNamespace:
        asked.append(device)
        return types.SimpleNamespace(
            name="NVIDIA H100 80GB HBM3" if device.index == 0 else "NVIDIA A100-SXM4-40GB",
            total_memory=81559 * 2**20,
            major=9 if device.index == 0 else 8,
            minor=0,
            multi_processor_count=132,
            uuid=TorchCudaUuid("8f3a1c2e-0000-4000-8000-00000000000a"),
        )

    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    assert machine.accelerator(CUDA0) == Accelerator(
        device=CUDA0,
        name="NVIDIA H100 80GB HBM3",
        memory_total_bytes=81559 * 2**20,
        compute_capability=(9, 0),
        multiprocessors=132,
        uuid="8f3a1c2e-0000-4000-8000-00000000000a",  # a str: NVML is asked by the text
    )
    assert machine.accelerator(CUDA1).compute_capability == (8, 0)
    assert machine.accelerator(CUDA0).name == "NVIDIA H100 80GB HBM3"
    assert asked == [CUDA0, CUDA1]


def test_a_build_that_gives_cuda_devices_no_uuid_describes_them_without_one(monkeypatch):
    no_uuid = types.SimpleNamespace(name="GPU", total_memory=2**30, major=7, minor=0, multi_processor_count=80)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device: no_uuid)
    assert machine.accelerator(CUDA0).uuid is None


def test_apple_and_intel_gpus_are_described(monkeypatch):
    monkeypatch.setattr(torch.mps, "recommended_max_memory", lambda: 21 * 2**30)
    xpu_properties = types.SimpleNamespace(
        name="Intel(R) Data Center GPU Max 1100", total_memory=64 * 2**30, driver_version="1.3.27642"
    )
    monkeypatch.setattr(torch.xpu, "get_device_properties", lambda device: xpu_properties)
    assert machine.accelerator(torch.device("mps")) == Accelerator(torch.device("mps"), None, 21 * 2**30)
    assert machine.accelerator(torch.device("xpu", 0)) == Accelerator(
        torch.device("xpu", 0), "Intel(R) Data Center GPU Max 1100", 64 * 2**30, driver="1.3.27642"
    )


def test_the_cpu_is_no_accelerator():
    with pytest.raises(ValueError, match="cpu is not an accelerator"):
        machine.accelerator(torch.device("cpu"))
