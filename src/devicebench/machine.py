"""The machine as this PyTorch build sees it, read once: the build (CUDA, ROCm, XPU, MPS, cuDNN), the CPU capability
torch's kernels use, the accelerators present and each one's name, capability and memory.

The one place devicebench asks torch what the machine is: everything else asks the snapshot, so a test fakes a
machine by handing in a snapshot (tests/fakes.py) instead of patching torch's internals. What changes while a run
goes (free and peak memory, the current device) and what acts on a device (synchronize, set_device) are not here:
devices and the engine ask torch for those when they need them.

    python -c "from devicebench import machine; print(machine.snapshot()); print(machine.accelerators())"
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Accelerator:
    """One accelerator as torch describes it; a figure torch does not give for its kind is None."""

    device: torch.device
    name: str | None  # torch's product name; None for the Apple GPU, which torch does not name (its chip does)
    memory_total_bytes: int | None  # on MPS, what Metal lets the GPU use of the shared memory
    compute_capability: tuple[int, int] | None = None  # CUDA's (major, minor): (9, 0) for an H100
    multiprocessors: int | None = None  # CUDA's streaming multiprocessors (AMD's compute units)
    uuid: str | None = None  # CUDA's bare UUID, all NVML and CUDA share; None where the build gives none (fbcode's)
    driver: str | None = None  # the XPU driver's version; CUDA's is NVML's to say


@dataclass(frozen=True)
class Machine:
    """The PyTorch build and what it can use here, as torch reports them when first asked."""

    torch_version: str  # torch.__version__: "2.13.0+cu124"
    cuda_build: str | None  # the CUDA version torch was built with; None on a CPU, ROCm or XPU build
    hip_build: str | None  # the ROCm version of a ROCm build, which drives AMD GPUs as "cuda" devices
    xpu_build: str | None  # the oneAPI version of an Intel XPU build
    mps_built: bool  # whether this build has Apple's MPS backend, usable or not
    cudnn_version: int | None  # torch.backends.cudnn.version()'s integer (MIOpen's on ROCm); None without either
    cpu_capability: str  # the widest vector ISA torch's CPU kernels use: "DEFAULT", "AVX2", "AVX512", ...
    cuda_devices: int  # CUDA (or ROCm) devices usable now; 0 where torch.cuda is not available
    mps_available: bool
    xpu_devices: int  # Intel GPUs usable now; 0 where torch.xpu is missing or not available

    def devices(self) -> list[torch.device]:
        """Every device usable: cpu first, then cuda:0..n-1, then mps, then xpu:0..n-1."""
        found = [torch.device("cpu")]
        found += [torch.device("cuda", index) for index in range(self.cuda_devices)]
        if self.mps_available:
            found.append(torch.device("mps"))
        found += [torch.device("xpu", index) for index in range(self.xpu_devices)]
        return found


def snapshot() -> Machine:
    """This machine, read from torch on the first call and the same object after (forget() reads it afresh)."""
    return _read_machine()


def accelerator(device: torch.device) -> Accelerator:
    """What torch says of accelerator `device` (a cuda, mps or xpu one), read on the first call for that device:
    reading a GPU's properties starts CUDA, so a device no one asks about is never read."""
    return _read_accelerator(device)


def accelerators() -> list[Accelerator]:
    """Every accelerator in snapshot().devices(), described."""
    return [accelerator(device) for device in snapshot().devices() if device.type != "cpu"]


def forget() -> None:
    """Drop what was read, so the next question reads torch again (tests that change torch itself use it)."""
    _read_machine.cache_clear()
    _read_accelerator.cache_clear()


@functools.cache
def _read_machine() -> Machine:
    xpu = getattr(torch, "xpu", None)  # torch.xpu is missing from some older builds
    return Machine(
        torch_version=torch.__version__,
        cuda_build=torch.version.cuda,
        hip_build=torch.version.hip,
        xpu_build=getattr(torch.version, "xpu", None),  # absent from builds older than XPU support
        mps_built=torch.backends.mps.is_built(),
        cudnn_version=torch.backends.cudnn.version(),
        cpu_capability=torch.backends.cpu.get_cpu_capability(),
        cuda_devices=torch.cuda.device_count() if torch.cuda.is_available() else 0,
        mps_available=torch.backends.mps.is_available(),
        xpu_devices=xpu.device_count() if xpu is not None and xpu.is_available() else 0,
    )


@functools.cache
def _read_accelerator(device: torch.device) -> Accelerator:
    if device.type == "cuda":
        properties = torch.cuda.get_device_properties(device)
        uuid = getattr(properties, "uuid", None)  # a _CUuuid, whose str() is the bare UUID
        return Accelerator(
            device=device,
            name=properties.name,
            memory_total_bytes=properties.total_memory,
            compute_capability=(properties.major, properties.minor),
            multiprocessors=properties.multi_processor_count,
            uuid=None if uuid is None else str(uuid),
        )
    if device.type == "xpu":
        xpu_properties = torch.xpu.get_device_properties(device)
        return Accelerator(
            device=device,
            name=xpu_properties.name,
            memory_total_bytes=xpu_properties.total_memory,
            driver=getattr(xpu_properties, "driver_version", None),
        )
    if device.type == "mps":
        # Apple GPUs share the machine's memory; this is how much of it Metal lets the GPU use
        recommended_max_memory = getattr(torch.mps, "recommended_max_memory", None)  # missing from older PyTorch
        return Accelerator(
            device=device, name=None, memory_total_bytes=recommended_max_memory() if recommended_max_memory else None
        )
    raise ValueError(f"{device} is not an accelerator devicebench describes (cuda, mps or xpu)")
