"""The machine fingerprint: everything about this machine and its software that changes benchmark numbers.

Every stored result carries a fingerprint, so two runs are compared only when they ran on the same hardware and
software, and a reader sees why two machines differ (CPU model and ISA, threads, GPUs, driver, CUDA, cuDNN, torch).
It also says in plain words why no GPU is usable, when none is.

    python -c "from devicebench.environment import machine_fingerprint as f; import json; print(json.dumps(f(), indent=2))"
"""

from __future__ import annotations

import functools
import hashlib
import os
import platform
import shutil
import socket
import subprocess
from collections.abc import Iterable
from pathlib import Path

import numpy
import psutil
import torch

from devicebench import devices
from devicebench.version import __version__

BYTES_PER_MIB = 2**20
INSTALL_URL = "https://pytorch.org/get-started/locally/"
# The /proc/cpuinfo flags that decide which of PyTorch's CPU kernels run: AVX2 and AVX-512 vector units, bfloat16
# dot products, and the AMX matrix tiles of Sapphire Rapids and later
ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
# What torch.backends.cpu.get_cpu_capability() implies: it names only the widest vector ISA its kernels use
_ISA_OF_TORCH_CAPABILITY = {"AVX2": {"avx2"}, "AVX512": {"avx2", "avx512f"}}
_NVIDIA_HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES",)
_ROCM_HIDING_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
_XPU_HIDING_VARIABLES = ("ZE_AFFINITY_MASK",)


def machine_fingerprint() -> dict:
    """Everything that changes the numbers, as JSON-ready data with a stable set of keys.

    Built afresh on each call from cached slow parts, so a thread count set since the last call is reported.
    """
    hostname = socket.gethostname()
    name = machine_name()
    accelerators = [dict(entry) for entry in _accelerator_descriptions()]  # copies: the cached entries stay intact
    return {
        "hostname": hostname,
        "machine_name": name,
        **_software_versions(),
        "cpu": _cpu_description(),
        "memory_total_mib": psutil.virtual_memory().total // BYTES_PER_MIB,
        "accelerators": accelerators,
        "no_accelerator_reason": no_accelerator_reason(),
        "machine_id": machine_id(name, cpu_model(), [entry["name"] for entry in accelerators]),
    }


MACHINE_NAME_VARIABLE = "DEVICEBENCH_MACHINE"


def machine_name() -> str:
    """What tables call this machine: $DEVICEBENCH_MACHINE ("laptop", "vm", "a100-box"), else the hostname.

    Cloud machines get random hostnames; a chosen name keeps their results together and readable.
    """
    return os.environ.get(MACHINE_NAME_VARIABLE, "").strip() or socket.gethostname()


def machine_id(hostname: str, cpu_name: str, accelerator_names: Iterable[str]) -> str:
    """A short id that stays the same for one machine: 12 hex digits of a SHA-256 of what identifies it."""
    identity = "\n".join([hostname, cpu_name, *sorted(accelerator_names)])
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


def no_accelerator_reason() -> str | None:
    """None when some accelerator is usable; otherwise why not, in plain words, and what to do about it."""
    if any(device.type != "cpu" for device in devices.local_devices()):
        return None
    return unavailable_reason(_expected_accelerator_kind())


def unavailable_reason(kind: str) -> str | None:
    """Why PyTorch cannot use a device of this kind ("cuda", "mps", "xpu") here, or None when it can."""
    reasons = {"cuda": _cuda_unavailable_reason, "mps": _mps_unavailable_reason, "xpu": _xpu_unavailable_reason}
    return reasons[kind]() if kind in reasons else None


def device_hiding_settings(kind: str) -> str:
    """The environment variables set now that hide devices of this kind from PyTorch, as "NAME='value'" text."""
    if kind == "cuda":
        variables = _ROCM_HIDING_VARIABLES if torch.version.hip else _NVIDIA_HIDING_VARIABLES
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
        raise ValueError(f"${ISA_VARIABLE} names {', '.join(sorted(unknown))}; the flags it knows are "
                         f"{', '.join(ISA_FLAGS)}")
    return {flag: flag in chosen for flag in ISA_FLAGS}


def isa_from_torch_capability(capability: str) -> dict[str, bool]:
    """Which of ISA_FLAGS PyTorch's CPU capability ("DEFAULT", "AVX2", "AVX512", ...) implies; it never shows AMX."""
    implied = _ISA_OF_TORCH_CAPABILITY.get(capability, set())
    return {flag: flag in implied for flag in ISA_FLAGS}


def format_cudnn_version(raw: int, rocm: bool = False) -> str:
    """torch.backends.cudnn.version()'s integer as text: 90100 -> "9.1.0", 8902 -> "8.9.2"."""
    if rocm:  # a ROCm build reports MIOpen instead, as MAJOR*1000000 + MINOR*1000 + PATCH
        return f"MIOpen {raw // 1_000_000}.{raw // 1000 % 1000}.{raw % 1000}"
    if raw >= 90000:  # cuDNN 9 changed the encoding to MAJOR*10000 + MINOR*100 + PATCH
        return f"{raw // 10000}.{raw // 100 % 100}.{raw % 100}"
    return f"{raw // 1000}.{raw // 100 % 10}.{raw % 100}"  # cuDNN 8 and older: MAJOR*1000 + MINOR*100 + PATCH


@functools.cache
def _software_versions() -> dict:
    return {
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda_build": torch.version.cuda,
        "torch_hip_build": torch.version.hip,
        "cudnn": _cudnn_version(),
        "numpy": numpy.__version__,
        "devicebench": __version__,
    }


def _cpu_description() -> dict:
    return {
        "model": cpu_model(),
        "architecture": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),  # None where the OS will not tell
        "logical_cores": psutil.cpu_count(logical=True),
        "torch_threads": torch.get_num_threads(),  # read on every call: torch.set_num_threads() changes it
        "torch_interop_threads": torch.get_num_interop_threads(),
        "isa": dict(cpu_isa()),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


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
    return isa_from_torch_capability(torch.backends.cpu.get_cpu_capability())  # no /proc/cpuinfo off Linux


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


@functools.cache
def _cudnn_version() -> str | None:
    raw = torch.backends.cudnn.version()  # None on a build without cuDNN or MIOpen
    return None if raw is None else format_cudnn_version(raw, rocm=bool(torch.version.hip))


@functools.cache
def _accelerator_descriptions() -> tuple[dict, ...]:
    describers = {"cuda": _describe_cuda, "mps": _describe_mps, "xpu": _describe_xpu}
    return tuple(describers[device.type](device) for device in devices.local_devices() if device.type != "cpu")


def _describe_cuda(device: torch.device) -> dict:
    # imported here: the engine imports devices, which imports this module
    from devicebench.engine.monitor import power_limit_w

    properties = torch.cuda.get_device_properties(device)
    return {
        **_describe_common(device, properties.total_memory),
        "compute_capability": f"{properties.major}.{properties.minor}",
        "multiprocessors": properties.multi_processor_count,
        "driver": _nvidia_driver_version(),
        "cuda_runtime": torch.version.cuda,  # None on ROCm, whose version is torch_hip_build
        "cudnn": _cudnn_version(),
        "power_limit_w": power_limit_w(device),  # a cap set below the default slows the GPU
    }


def _describe_mps(device: torch.device) -> dict:
    # Apple GPUs share the machine's memory; this is how much of it Metal lets the GPU use
    recommended_max_memory = getattr(torch.mps, "recommended_max_memory", None)  # missing from older PyTorch
    return _describe_common(device, recommended_max_memory() if recommended_max_memory else None)


def _describe_xpu(device: torch.device) -> dict:
    properties = torch.xpu.get_device_properties(device)
    return {
        **_describe_common(device, properties.total_memory),
        "driver": getattr(properties, "driver_version", None),
    }


def _describe_common(device: torch.device, memory_total_bytes: int | None) -> dict:
    return {
        "device": str(device),
        "kind": device.type,
        "name": devices.device_name(device),
        "memory_total_mib": None if memory_total_bytes is None else memory_total_bytes // BYTES_PER_MIB,
    }


@functools.cache
def _nvidia_driver_version() -> str | None:
    try:
        import pynvml  # nvidia-ml-py is optional (the gpu extra)
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:  # no NVIDIA driver, or an AMD GPU
        return None
    try:
        version = pynvml.nvmlSystemGetDriverVersion()
    finally:
        pynvml.nvmlShutdown()
    return version.decode() if isinstance(version, bytes) else version  # nvidia-ml-py before 11.5 gave bytes


def _expected_accelerator_kind() -> str:
    """The accelerator this machine and this PyTorch build would have, to explain its absence."""
    if platform.system() == "Darwin":
        return "mps"
    if getattr(torch.version, "xpu", None):
        return "xpu"
    return "cuda"


def _cuda_unavailable_reason() -> str | None:
    if torch.cuda.is_available():
        return None
    if torch.version.hip:  # ROCm builds drive AMD GPUs through torch.cuda
        return _gpu_stack_reason(
            f"ROCm {torch.version.hip}",
            "AMD GPU",
            driver_paths=("/dev/kfd",),
            driver_tools=("rocm-smi", "amd-smi"),
        )
    if torch.version.cuda:
        return _gpu_stack_reason(
            f"CUDA {torch.version.cuda}",
            "NVIDIA",
            driver_paths=("/proc/driver/nvidia",),
            driver_tools=("nvidia-smi",),
        )
    if platform.system() == "Darwin":
        return "PyTorch has no CUDA on macOS: the Apple GPU is the device 'mps'."
    return (
        f"this PyTorch ({torch.__version__}) is a CPU-only build: it cannot use a GPU even if one is present. "
        f"Install a CUDA build from {INSTALL_URL}"
    )


def _gpu_stack_reason(toolkit: str, vendor: str, driver_paths: tuple[str, ...], driver_tools: tuple[str, ...]) -> str:
    """Why a GPU build of PyTorch (CUDA or ROCm) sees no GPU: no driver, devices hidden, or a driver it cannot use."""
    driver_found = any(os.path.exists(path) for path in driver_paths) or any(map(shutil.which, driver_tools))
    if not driver_found:
        looked = ", ".join(f"no {place}" for place in (*driver_paths, *driver_tools))
        return f"this PyTorch has {toolkit} but no {vendor} driver was found ({looked})"
    hiding = device_hiding_settings("cuda")
    if hiding:
        return f"this PyTorch has {toolkit} and a driver is present, but no GPU is visible ({hiding})"
    return (
        f"this PyTorch has {toolkit} and a driver is present, but it finds no usable GPU: the driver may "
        f"be too old for {toolkit}, or the GPU in a bad state; {driver_tools[0]} shows the driver and its devices"
    )


def _mps_unavailable_reason() -> str | None:
    if torch.backends.mps.is_available():
        return None
    if platform.system() != "Darwin":
        return f"MPS is the GPU backend of Apple's macOS; this machine runs {platform.system()}."
    if not torch.backends.mps.is_built():
        return f"this PyTorch ({torch.__version__}) was built without MPS. Install a macOS build from {INSTALL_URL}"
    return "this PyTorch has MPS, but macOS offers it no GPU: MPS needs macOS 12.3 or later on Apple silicon"


def _xpu_unavailable_reason() -> str | None:
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        return None
    xpu_build = getattr(torch.version, "xpu", None)
    if not xpu_build:
        return f"this PyTorch ({torch.__version__}) has no Intel XPU support. Install an XPU build from {INSTALL_URL}"
    return (
        f"this PyTorch has XPU ({xpu_build}) but finds no Intel GPU: check the Intel GPU driver "
        f"and that ZE_AFFINITY_MASK does not hide the devices"
    )
