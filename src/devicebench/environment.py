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
import socket
from collections.abc import Iterable

import numpy
import psutil
import torch

from devicebench import devices, host, machine, nvml
from devicebench.version import __version__


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
        "memory_total_mib": psutil.virtual_memory().total // host.BYTES_PER_MIB,
        "accelerators": accelerators,
        "no_accelerator_reason": no_accelerator_reason(),
        "machine_id": machine_id(name, host.cpu_model(), [entry["name"] for entry in accelerators]),
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
    return host.unavailable_reason(host.expected_accelerator_kind())


def format_cudnn_version(raw: int, rocm: bool = False) -> str:
    """torch.backends.cudnn.version()'s integer as text: 90100 -> "9.1.0", 8902 -> "8.9.2"."""
    if rocm:  # a ROCm build reports MIOpen instead, as MAJOR*1000000 + MINOR*1000 + PATCH
        return f"MIOpen {raw // 1_000_000}.{raw // 1000 % 1000}.{raw % 1000}"
    if raw >= 90000:  # cuDNN 9 changed the encoding to MAJOR*10000 + MINOR*100 + PATCH
        return f"{raw // 10000}.{raw // 100 % 100}.{raw % 100}"
    return f"{raw // 1000}.{raw // 100 % 10}.{raw % 100}"  # cuDNN 8 and older: MAJOR*1000 + MINOR*100 + PATCH


@functools.cache
def _software_versions() -> dict:
    build = machine.snapshot()
    return {
        "os": platform.platform(),
        "python": platform.python_version(),
        "torch": build.torch_version,
        "torch_cuda_build": build.cuda_build,
        "torch_hip_build": build.hip_build,
        "cudnn": _cudnn_version(),
        "numpy": numpy.__version__,
        "devicebench": __version__,
    }


def _cpu_description() -> dict:
    return {
        "model": host.cpu_model(),
        "architecture": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),  # None where the OS will not tell
        "logical_cores": psutil.cpu_count(logical=True),
        "torch_threads": torch.get_num_threads(),  # read on every call: torch.set_num_threads() changes it
        "torch_interop_threads": torch.get_num_interop_threads(),
        "isa": dict(host.cpu_isa()),
        "torch_cpu_capability": machine.snapshot().cpu_capability,
    }


@functools.cache
def _cudnn_version() -> str | None:
    build = machine.snapshot()
    raw = build.cudnn_version  # None on a build without cuDNN or MIOpen
    return None if raw is None else format_cudnn_version(raw, rocm=bool(build.hip_build))


@functools.cache
def _accelerator_descriptions() -> tuple[dict, ...]:
    describers = {"cuda": _describe_cuda, "mps": _describe_mps, "xpu": _describe_xpu}
    return tuple(describers[device.type](device) for device in devices.local_devices() if device.type != "cpu")


def _describe_cuda(device: torch.device) -> dict:
    described = machine.accelerator(device)
    major, minor = described.compute_capability or (None, None)  # every CUDA device has one
    return {
        **_describe_common(device, described.memory_total_bytes),
        "compute_capability": f"{major}.{minor}",
        "multiprocessors": described.multiprocessors,
        "driver": nvml.driver_version(),
        "cuda_runtime": machine.snapshot().cuda_build,  # None on ROCm, whose version is torch_hip_build
        "cudnn": _cudnn_version(),
        "power_limit_w": nvml.power_limit_w(device),  # a cap set below the default slows the GPU
    }


def _describe_mps(device: torch.device) -> dict:
    return _describe_common(device, machine.accelerator(device).memory_total_bytes)  # what Metal lets the GPU use


def _describe_xpu(device: torch.device) -> dict:
    described = machine.accelerator(device)
    return {**_describe_common(device, described.memory_total_bytes), "driver": described.driver}


def _describe_common(device: torch.device, memory_total_bytes: int | None) -> dict:
    return {
        "device": str(device),
        "kind": device.type,
        "name": devices.device_name(device),
        "memory_total_mib": None if memory_total_bytes is None else memory_total_bytes // host.BYTES_PER_MIB,
    }
