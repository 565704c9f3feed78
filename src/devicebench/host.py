"""This machine as the operating system and the PyTorch build see it, before any device is opened: the CPU's name and
instruction sets, and why a GPU that is not usable is not.

Near the bottom of devicebench: `devices` names the CPU and explains a missing GPU with it, and the machine
fingerprint records it, so it imports neither; what the PyTorch build is, it asks devicebench.machine.

    python -c "from devicebench import host; print(host.cpu_model(), host.cpu_isa(), host.unavailable_reason('cuda'))"
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
from pathlib import Path

from devicebench import machine

BYTES_PER_MIB = 2**20
INSTALL_URL = "https://pytorch.org/get-started/locally/"
CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"  # PyTorch's CPU wheels: no CUDA
# The /proc/cpuinfo flags that decide which of PyTorch's CPU kernels run: AVX2 and AVX-512 vector units, bfloat16
# dot products, and the AMX matrix tiles of Sapphire Rapids and later
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# What torch.backends.cpu.get_cpu_capability() implies: it names only the widest vector ISA its kernels use
_ISA_OF_TORCH_CAPABILITY = {"AVX2": {"avx2"}, "AVX512": {"avx2", "avx512f"}}
# Where each GPU vendor's driver shows itself without PyTorch: (kernel interfaces, management tools)
GPU_DRIVERS = {"NVIDIA": (("/proc/driver/nvidia",), ("nvidia-smi",)), "AMD": (("/dev/kfd",), ("rocm-smi", "amd-smi"))}
_NVIDIA_HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES",)
_ROCM_HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_XPU_HIDING_VARIABLES = ("ZE_AFFINITY_MASK",)


def unavailable_reason(kind: str) -> str | None:
    """Why PyTorch cannot use a device of this kind ("cuda", "mps", "xpu") here, or None when it can."""
    reasons = {"cuda": _cuda_unavailable_reason, "mps": _mps_unavailable_reason, "xpu": _xpu_unavailable_reason}
    return reasons[kind]() if kind in reasons else None


def device_hiding_settings(kind: str) -> str:
    """The environment variables set now that hide devices of this kind from PyTorch, as "NAME='value'" text."""
    variables: tuple[str, ...]
    if kind == "cuda":
        variables = _ROCM_HIDING_VARIABLES if machine.snapshot().hip_build else _NVIDIA_HIDING_VARIABLES
    else:
        variables = _XPU_HIDING_VARIABLES if kind == "xpu" else ()
    return ", ".join(f"{name}={os.environ[name]!r}" for name in variables if name in os.environ)


@functools.cache
def cpu_model() -> str:
    """The CPU's marketing name, such as "Intel(R) Xeon(R) Platinum 8480+" or "Apple M2 Pro"."""
    return (
        _cpuinfo_value(_cpuinfo_text(), "model name")
        or _macos_cpu_brand()
        or platform.processor()
        or platform.machine()
    )


def isa_from_cpuinfo(cpuinfo_text: str) -> dict[str, bool]:
    """Which of ISA_FLAGS the CPU has, from the text of Linux's /proc/cpuinfo."""
    flags = set((_cpuinfo_value(cpuinfo_text, "flags") or "").split())
    return {flag: flag in flags for flag in ISA_FLAGS}


def isa_from_names(names: str) -> dict[str, bool]:
    """Which of ISA_FLAGS a comma list names; ValueError for a name that is not one of them."""
    chosen = {name.strip().lower() for name in names.split(",") if name.strip()}
    unknown = chosen - set(ISA_FLAGS)
    if unknown:
        raise ValueError(
            f"${ISA_VARIABLE} names {', '.join(sorted(unknown))}; the flags it knows are {', '.join(ISA_FLAGS)}"
        )
    return {flag: flag in chosen for flag in ISA_FLAGS}


def isa_from_torch_capability(capability: str) -> dict[str, bool]:
    """Which of ISA_FLAGS PyTorch's CPU capability ("DEFAULT", "AVX2", "AVX512", ...) implies; it never shows AMX."""
    implied = _ISA_OF_TORCH_CAPABILITY.get(capability, set())
    return {flag: flag in implied for flag in ISA_FLAGS}


ISA_VARIABLE = "DEVICEBENCH_CPU_ISA"  # e.g. "avx2": take the CPU to have only these flags (tests, what-ifs)


@functools.cache
def cpu_isa() -> dict[str, bool]:
    """Which of ISA_FLAGS this CPU has: what decides whether bf16 runs natively.

    $DEVICEBENCH_CPU_ISA, a comma list of ISA_FLAGS ("avx2", or "avx2,avx512f,avx512_bf16,amx_bf16,amx_tile"),
    overrides the detection: the test suite uses it to behave as on an AVX2-only CPU or an AMX one, whichever it
    runs on (set it before the first call: the answer is cached).
    """
    forced = os.environ.get(ISA_VARIABLE)
    if forced is not None:
        return isa_from_names(forced)
    cpuinfo = _cpuinfo_text()
    if cpuinfo:
        return isa_from_cpuinfo(cpuinfo)
    return isa_from_torch_capability(machine.snapshot().cpu_capability)  # no /proc/cpuinfo off Linux


@functools.cache
def _cpuinfo_text() -> str:
    try:
        return Path("/proc/cpuinfo").read_text()
    except OSError:  # not Linux
        return ""


def _cpuinfo_value(cpuinfo_text: str, key: str) -> str | None:
    """The value of the first "key : value" line for this key (the first CPU's; all CPUs of a socket agree)."""
    for line in cpuinfo_text.splitlines():
        name, separator, value = line.partition(":")
        if separator and name.strip() == key:
            return value.strip()
    return None


def _macos_cpu_brand() -> str | None:
    if platform.system() != "Darwin":
        return None
    # platform.processor() says only "arm" on Apple silicon; sysctl names the chip
    try:
        completed = subprocess.run(
            ["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return completed.stdout.strip() or None


def gpu_driver() -> tuple[str, str] | None:
    """The GPU vendor whose driver is installed and where it shows ("NVIDIA", "/proc/driver/nvidia"), or None."""
    for vendor in GPU_DRIVERS:
        place = _driver_place(vendor)
        if place:
            return vendor, place
    return None


def _driver_place(vendor: str) -> str | None:
    paths, tools = GPU_DRIVERS[vendor]
    return next((path for path in paths if os.path.exists(path)), None) or next(
        filter(None, map(shutil.which, tools)), None
    )


def expected_accelerator_kind() -> str:
    """The accelerator this machine and this PyTorch build would have, to explain its absence."""
    if platform.system() == "Darwin":
        return "mps"
    if machine.snapshot().xpu_build:
        return "xpu"
    return "cuda"


def _cuda_unavailable_reason() -> str | None:
    build = machine.snapshot()
    if build.cuda_devices:
        return None
    if build.hip_build:  # ROCm builds drive AMD GPUs through torch.cuda
        return _gpu_stack_reason(f"ROCm {build.hip_build}", "AMD", "AMD GPU")
    if build.cuda_build:
        return _gpu_stack_reason(f"CUDA {build.cuda_build}", "NVIDIA", "NVIDIA")
    if platform.system() == "Darwin":
        return "PyTorch has no CUDA on macOS: the Apple GPU is the device 'mps'."
    return (
        f"this PyTorch ({build.torch_version}) is a CPU-only build: it cannot use a GPU even if one is present. "
        f"Install a CUDA build from {INSTALL_URL}"
    )


def _gpu_stack_reason(toolkit: str, vendor: str, vendor_words: str) -> str:
    """Why a GPU build of PyTorch (CUDA or ROCm) sees no GPU: no driver, devices hidden, or a driver it cannot use."""
    driver_paths, driver_tools = GPU_DRIVERS[vendor]
    if _driver_place(vendor) is None:
        looked = ", ".join(f"no {place}" for place in (*driver_paths, *driver_tools))
        return f"this PyTorch has {toolkit} but no {vendor_words} driver was found ({looked})"
    hiding = device_hiding_settings("cuda")
    if hiding:
        return f"this PyTorch has {toolkit} and a driver is present, but no GPU is visible ({hiding})"
    return (
        f"this PyTorch has {toolkit} and a driver is present, but it finds no usable GPU: the driver may "
        f"be too old for {toolkit}, or the GPU in a bad state; {driver_tools[0]} shows the driver and its devices"
    )


def _mps_unavailable_reason() -> str | None:
    build = machine.snapshot()
    if build.mps_available:
        return None
    if platform.system() != "Darwin":
        return f"MPS is the GPU backend of Apple's macOS; this machine runs {platform.system()}."
    if not build.mps_built:
        return f"this PyTorch ({build.torch_version}) was built without MPS. Install a macOS build from {INSTALL_URL}"
    return "this PyTorch has MPS, but macOS offers it no GPU: MPS needs macOS 12.3 or later on Apple silicon"


def _xpu_unavailable_reason() -> str | None:
    build = machine.snapshot()
    if build.xpu_devices:
        return None
    xpu_build = build.xpu_build
    if not xpu_build:
        return f"this PyTorch ({build.torch_version}) has no Intel XPU support. Install an XPU build from {INSTALL_URL}"
    return (
        f"this PyTorch has XPU ({xpu_build}) but finds no Intel GPU: check the Intel GPU driver "
        f"and that ZE_AFFINITY_MASK does not hide the devices"
    )
