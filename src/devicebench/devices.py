"""Find the devices this machine can train on, turn a user's device spec into torch.devices, and wait on them.

The device-kind-specific calls the training engine needs (synchronize, peak memory, names) live here, so the
engine stays the same code on CPU, CUDA (NVIDIA and AMD ROCm), Apple MPS and Intel XPU. A device that is asked for
and missing is an error that says why, never a silent fall-back to the CPU.

    python -c "from devicebench import devices as d; print([(str(x), d.device_name(x)) for x in d.local_devices()])"
"""

from __future__ import annotations

import re
from types import ModuleType

import torch

from devicebench import host, machine
from devicebench.errors import DevicebenchError

SPEC_HELP = (
    "auto, cpu, cuda, cuda:N, mps, xpu, xpu:N, or a comma list such as 'cpu,cuda' "
    "(an NVIDIA or AMD GPU is 'cuda', an Apple GPU 'mps', an Intel GPU 'xpu')"
)
_DEVICE_PATTERN = re.compile(r"(?P<kind>cpu|cuda|mps|xpu)(?::(?P<index>\d+))?")
_SINGLE_DEVICE_KINDS = ("cpu", "mps")  # PyTorch exposes one CPU device and one MPS device, written without an index


class DeviceError(DevicebenchError, ValueError):
    """A device spec that names no usable device; the message lists what is present and how to get the rest."""


def local_devices() -> list[torch.device]:
    """Every device usable now: cpu first, then cuda:0..n-1, then mps, then xpu:0..n-1."""
    return machine.snapshot().devices()


def resolve_devices(spec: str) -> list[torch.device]:
    """The devices a spec such as "auto", "cuda:1" or "cpu, cuda" names, deduplicated in the order given.

    "cuda" and "xpu" mean device 0, as they do in PyTorch. Raises DeviceError for a name devicebench does not
    know or a device this machine does not have.
    """
    present = local_devices()
    resolved: list[torch.device] = []
    for name in _split_spec(spec):
        for device in present if name == "auto" else [_present_device(name, spec, present)]:
            if device not in resolved:
                resolved.append(device)
    return resolved


# What running out of memory says where PyTorch raises no OutOfMemoryError: the CPU allocator's RuntimeError (Linux,
# Windows), and on a GPU an allocation that fails inside a library or a kernel launch ("CUDA error: out of memory",
# HIP's and MPS's own wording) or inside cuBLAS, cuDNN or MIOpen, which report it as a status code
_HOST_OUT_OF_MEMORY = ("can't allocate memory", "not enough memory")
_DEVICE_OUT_OF_MEMORY = (
    "out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUDNN_STATUS_ALLOC_FAILED",
    "miopenStatusAllocFailed",
)


def out_of_memory(error: BaseException) -> str | None:
    """ "device" or "host" when `error` is that running out of memory, else None. Looks through the chain of causes,
    because torch.compile wraps an error raised while compiling (Dynamo's BackendCompilerFailed, say) around it."""
    seen: set[int] = set()
    link: BaseException | None = error
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        if isinstance(link, torch.OutOfMemoryError):
            return "device"
        text = str(link)
        if any(words in text for words in _HOST_OUT_OF_MEMORY):
            return "host"
        if any(words in text for words in _DEVICE_OUT_OF_MEMORY):
            return "device"
        link = link.__cause__ or link.__context__
    return None


def is_out_of_memory(error: BaseException) -> bool:
    """Whether `error` is a device or the host running out of memory, in any of the forms `out_of_memory` knows."""
    return out_of_memory(error) is not None


def native_bf16(device: torch.device) -> bool:
    """Whether `device` computes bf16 matmuls in hardware (otherwise bf16 is emulated and only slower): AVX-512 BF16
    or AMX on a CPU, Ampere or later on an NVIDIA GPU."""
    if device.type == "cpu":
        isa = host.cpu_isa()
        return isa["avx512_bf16"] or isa["amx_bf16"]
    if device.type == "cuda":
        with torch.cuda.device(device):  # is_bf16_supported asks about the current device, not a given one
            return torch.cuda.is_bf16_supported(including_emulation=False)
    return False


def synchronize(device: torch.device) -> None:
    """Wait until all work queued on the device has finished, so a clock read afterwards measures it."""
    kind = device.type
    if kind == "cpu":
        return  # eager CPU kernels finish before they return, so there is no queue to wait on
    if kind == "cuda":
        torch.cuda.synchronize(device)
    elif kind == "mps":
        torch.mps.synchronize()  # MPS has a single device, so its synchronize takes none
    elif kind == "xpu":
        torch.xpu.synchronize(device)
    else:
        _synchronize_other_kind(device)


def device_name(device: torch.device) -> str:
    """A human name: the CPU model for cpu, the product name for a GPU."""
    kind = device.type
    if kind == "cpu":
        return host.cpu_model()
    if kind == "mps":
        return f"{host.cpu_model()} GPU"  # Apple's GPU is part of the chip, so the chip names it
    if kind in ("cuda", "xpu"):
        return machine.accelerator(device).name or str(device)  # torch names every CUDA and XPU device
    return str(device)


def reset_peak_memory(device: torch.device) -> None:
    """Start counting peak device memory afresh, so peak_memory_mib() afterwards covers only what follows."""
    kind = device.type
    if kind == "cpu":
        return  # no device counter to reset: peak_memory_mib() is None for cpu
    if kind == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    elif kind == "mps":
        # MPS keeps no peak counter; emptying its cache makes the driver's allocation start from the live tensors
        torch.mps.empty_cache()
    elif kind == "xpu":
        torch.xpu.reset_peak_memory_stats(device)
    else:
        accelerator = _generic_memory_statistics(device)
        if accelerator is not None:
            accelerator.reset_peak_memory_stats(device)


def peak_memory_mib(device: torch.device) -> float | None:
    """Peak device memory allocated since reset_peak_memory(), in MiB; None where it cannot be measured (cpu).

    On MPS this is the memory the Metal driver holds now: PyTorch's caching allocator keeps freed blocks, so after
    reset_peak_memory() it grows to the run's high-water mark of reserved memory, an upper bound on the peak.
    """
    kind = device.type
    if kind == "cpu":
        return None  # the process's RSS, the CPU's counterpart, is engine.monitor's to sample
    if kind == "cuda":
        peak_bytes = torch.cuda.max_memory_allocated(device)
    elif kind == "mps":
        peak_bytes = torch.mps.driver_allocated_memory()
    elif kind == "xpu":
        peak_bytes = torch.xpu.max_memory_allocated(device)
    else:
        accelerator = _generic_memory_statistics(device)
        if accelerator is None:
            return None
        peak_bytes = accelerator.max_memory_allocated(device)
    return peak_bytes / host.BYTES_PER_MIB


def _synchronize_other_kind(device: torch.device) -> None:
    accelerator = _generic_accelerator(device)
    if accelerator is None:
        raise DeviceError(
            f"devicebench cannot synchronize a {device.type!r} device: this PyTorch ({machine.snapshot().torch_version}) offers no "
            f"torch.accelerator for it. Devices present: {_listing(local_devices())}."
        )
    accelerator.synchronize(device)


def _split_spec(spec: str) -> list[str]:
    names = "".join(spec.split()).lower().split(",")  # spaces anywhere are tolerated: "cpu, CUDA: 1"
    if "" in names:
        raise DeviceError(
            f"device spec {spec!r} has an empty name. Use {SPEC_HELP}. Devices present: {_listing(local_devices())}."
        )
    return names


def _present_device(name: str, spec: str, present: list[torch.device]) -> torch.device:
    asked = f"{name!r}" if "," not in spec else f"{name!r} (in {spec!r})"
    match = _DEVICE_PATTERN.fullmatch(name)
    if match is None:
        raise DeviceError(
            f"unknown device {asked}. devicebench knows {SPEC_HELP}. Devices present: {_listing(present)}."
        )
    kind, index = match["kind"], int(match["index"] or 0)
    # looked up among the present devices, never built: torch.device() overflows on an index such as cuda:10**20
    device = next((device for device in present if (device.type, device.index or 0) == (kind, index)), None)
    if device is None:
        reason = _why_missing(kind, present)
        raise DeviceError(
            f"device {asked} is not available on this machine. Devices present: {_listing(present)}. "
            f"{reason[:1].upper()}{reason[1:]}"  # the reasons start in lower case, to read well inside other text
        )
    return device


def _why_missing(kind: str, present: list[torch.device]) -> str:
    """Why no device of this kind and index is present, and how to get one."""
    of_kind = [device for device in present if device.type == kind]
    if not of_kind:
        return host.unavailable_reason(kind) or f"PyTorch reports no {kind} device."
    if kind in _SINGLE_DEVICE_KINDS:
        return f"PyTorch has one {kind} device, written {kind!r}."
    count = f"{len(of_kind)} {kind.upper()} device{'s' if len(of_kind) > 1 else ''}"
    reason = f"PyTorch sees {count} here: {_listing(of_kind)}."
    hiding = host.device_hiding_settings(kind)
    if hiding:
        reason += f" {hiding} may hide the others."
    return reason


def _listing(devices: list[torch.device]) -> str:
    return ", ".join(str(device) for device in devices)


def _generic_accelerator(device: torch.device) -> ModuleType | None:
    """torch.accelerator (PyTorch 2.6 and later) when it drives this device's kind, else None."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is None or not accelerator.is_available():
        return None
    current = accelerator.current_accelerator()
    return accelerator if current is not None and current.type == device.type else None


def _generic_memory_statistics(device: torch.device) -> ModuleType | None:
    accelerator = _generic_accelerator(device)
    if accelerator is None or not hasattr(accelerator, "max_memory_allocated"):
        return None  # torch.accelerator gained memory statistics only after 2.6
    return accelerator
