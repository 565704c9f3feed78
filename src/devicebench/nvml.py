"""NVML, the NVIDIA driver's management library, opened for one CUDA device: the driver's version and its power cap
for the machine fingerprint, and the handle the monitor samples utilisation and energy through.

nvidia-ml-py is optional (the `gpu` extra); without it every answer here is None or NvmlUnavailable saying so.

    python -c "from devicebench import nvml; print(nvml.driver_version())"
"""

from __future__ import annotations

import contextlib
import functools
from types import ModuleType
from typing import Any

import torch

from devicebench import machine

NVML_MISSING_NOTE = "install nvidia-ml-py for GPU utilisation and energy"


class NvmlUnavailable(Exception):
    """Why NVML cannot watch a device; the message becomes `Usage.device_note`."""


def open_nvml(device: torch.device) -> tuple[ModuleType, Any]:
    """Initialises NVML and finds CUDA `device` in it: the module and the device's handle. Raises NvmlUnavailable
    saying why it cannot; otherwise the caller shuts NVML down."""
    try:
        import pynvml
    except ImportError as error:
        raise NvmlUnavailable(NVML_MISSING_NOTE) from error
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        raise NvmlUnavailable(f"NVML failed to initialise: {error}") from error
    try:
        return pynvml, _handle_by_uuid(pynvml, _cuda_uuid(device))
    except NvmlUnavailable:
        shut_down(pynvml)
        raise


def _cuda_uuid(device: torch.device) -> str:
    """The UUID CUDA gives `device`: NVML numbers GPUs by PCI bus, CUDA fastest first and through
    CUDA_VISIBLE_DEVICES, so the UUID is all the two share."""
    uuid = machine.accelerator(device).uuid  # absent from some builds (fbcode's)
    if uuid is None:
        raise NvmlUnavailable("this PyTorch build gives CUDA devices no UUID, which NVML needs to find the GPU")
    return uuid


def _handle_by_uuid(nvml: ModuleType, cuda_uuid: str) -> Any:
    """NVML's handle for the device CUDA names `cuda_uuid`.

    CUDA gives the bare UUID; NVML prefixes it with "GPU-" for a whole GPU and "MIG-" for a MIG slice, whose CUDA
    UUID is the slice's own. The UUID alone does not say which, so both are tried.
    """
    failures = []
    for nvml_uuid in (f"GPU-{cuda_uuid}", f"MIG-{cuda_uuid}"):
        try:
            return nvml.nvmlDeviceGetHandleByUUID(nvml_uuid)
        except nvml.NVMLError as error:
            failures.append(f"{nvml_uuid}: {error}")
    raise NvmlUnavailable(f"NVML has no device with CUDA's UUID ({'; '.join(failures)})")


def shut_down(nvml: ModuleType) -> None:
    with contextlib.suppress(nvml.NVMLError):  # the figures are already taken; a failed shutdown changes none of them
        nvml.nvmlShutdown()


def power_limit_w(device: torch.device) -> float | None:
    """The power cap NVML says the driver enforces on CUDA `device`, in watts (a lowered cap slows the GPU); None
    where NVML cannot tell."""
    try:
        nvml, handle = open_nvml(device)
    except NvmlUnavailable:
        return None
    try:
        return nvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000  # milliwatts
    except nvml.NVMLError:
        return None
    finally:
        shut_down(nvml)


@functools.cache
def driver_version() -> str | None:
    """The NVIDIA driver's version, such as "550.54.15"; None without NVML or an NVIDIA driver."""
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
