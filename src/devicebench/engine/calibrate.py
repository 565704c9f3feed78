"""Each device's ceilings, measured: matmul TFLOP/s per precision, memory and host-to-device bandwidth.

A training run's achieved TFLOP/s means little alone; against what this very device reaches on a dense square
matmul it becomes a utilisation. The ceilings are measured once per machine and kept in one JSON file per machine
(`calibration_path`), merged device by device, so calibrating cuda:1 later keeps the CPU's figures. Every clock
reading goes through engine.timing's Stopwatch: synchronized, and replaceable by a fake clock in tests.

    devicebench calibrate --devices cpu
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs
import torch

import devicebench
from devicebench.devices import device_name
from devicebench.engine.timing import Stopwatch, wall_clock_utc
from devicebench.results.schema import write_atomically

CALIBRATION_SCHEMA = 1  # the version of the stored file's layout
CALIBRATION_DIR_VARIABLE = "DEVICEBENCH_CALIBRATION_DIR"
PRECISIONS = ("fp32", "tf32", "bf16")  # tf32: fp32 tensors, multiplied on TF32 tensor cores (CUDA only)
HOST_MEMORY_KINDS = ("pinned", "pageable")
BYTES_PER_MIB = 2**20
BYTES_PER_GB = 1e9  # GB/s as datasheets count it: decimal gigabytes
FLOPS_PER_TFLOP = 1e12

logger = logging.getLogger(__name__)


class CalibrationError(ValueError):
    """A stored calibration that cannot be read; the message names the file and how to replace it."""


@dataclass(frozen=True)
class CalibrationSizes:
    """How big and how long each measurement is; tests shrink it to run in milliseconds."""

    matmul_size: int  # n of the n x n matrices; one product costs 2 n^3 FLOPs
    memory_copy_bytes: int  # size of each of the two device buffers of the on-device copy
    host_to_device_bytes: int  # size of the host buffer copied to the device
    warmup_rounds: int = 2  # untimed operations first: kernel selection, allocator growth, clocks ramping up
    operations_per_repeat: int = 5  # products or copies between two clock readings, to dwarf the clock's overhead
    repeats: int = 3  # timed repeats; the fastest counts, since interference only ever slows a repeat down


CPU_SIZES = CalibrationSizes(matmul_size=2048, memory_copy_bytes=256 * BYTES_PER_MIB,
                             host_to_device_bytes=256 * BYTES_PER_MIB)
# A GPU reaches its peak only on large products and copies; more operations per repeat because each is short
# (an 8192 bf16 product takes about 1 ms on an H100)
GPU_SIZES = CalibrationSizes(matmul_size=8192, memory_copy_bytes=2048 * BYTES_PER_MIB,
                             host_to_device_bytes=256 * BYTES_PER_MIB, operations_per_repeat=10)
# A check in seconds on any device; small products and copies understate the ceilings, most of all on a GPU
QUICK_SIZES = CalibrationSizes(matmul_size=512, memory_copy_bytes=16 * BYTES_PER_MIB,
                               host_to_device_bytes=16 * BYTES_PER_MIB, warmup_rounds=1, repeats=2)


def default_sizes(device: torch.device) -> CalibrationSizes:
    """The sizes that reach a device's ceilings without taking minutes: CPU_SIZES on the CPU, else GPU_SIZES."""
    return CPU_SIZES if device.type == "cpu" else GPU_SIZES


@dataclass(frozen=True)
class DeviceCeilings:
    """What one device reached on dense matmuls and large copies: the best of a few repeats of each."""

    device: str  # as str(torch.device) writes it: "cpu", "cuda:0"
    device_name: str  # the CPU model or the GPU's product name, as devices.device_name gives it
    matmul_tflops: dict[str, float]  # precision ("fp32", "tf32", "bf16") → TFLOP/s; tf32 only on CUDA
    memory_gb_s: float  # an on-device copy: bytes read + bytes written, per second, in 1e9 bytes
    host_to_device_gb_s: dict[str, float]  # "pinned" / "pageable" host memory → GB/s; empty for the CPU
    sizes: CalibrationSizes  # what was measured: small sizes (--quick) understate the ceilings

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceCeilings:
        """The ceilings to_dict() wrote; KeyError, TypeError or ValueError for anything else."""
        return cls(
            device=str(data["device"]),
            device_name=str(data["device_name"]),
            matmul_tflops={str(precision): float(rate) for precision, rate in data["matmul_tflops"].items()},
            memory_gb_s=float(data["memory_gb_s"]),
            host_to_device_gb_s={str(kind): float(rate) for kind, rate in data["host_to_device_gb_s"].items()},
            sizes=CalibrationSizes(**data["sizes"]),
        )


def measure_ceilings(
    device: torch.device,
    *,
    sizes: CalibrationSizes | None = None,
    watch: Stopwatch | None = None,
    progress: Callable[[str], None] | None = None,
) -> DeviceCeilings:
    """Measure `device`'s matmul TFLOP/s (fp32, bf16, and tf32 on NVIDIA GPUs; one before Ampere gets fp32 alone), its
    memory bandwidth and, for an accelerator, host-to-device bandwidth. `sizes` defaults to default_sizes(device);
    `progress` hears the name of each measurement as it starts (tens of seconds in all at the default sizes)."""
    sizes = sizes or default_sizes(device)
    watch = watch or Stopwatch(device)
    announce = progress or (lambda step: None)
    matmul_tflops = {}
    for precision in PRECISIONS:
        if _supports(device, precision):
            announce(f"{precision} matmul, {sizes.matmul_size}x{sizes.matmul_size}")
            matmul_tflops[precision] = _matmul_tflops(device, precision, sizes, watch)
    announce(f"memory copy, {sizes.memory_copy_bytes / BYTES_PER_MIB:,.0f} MiB")
    memory_gb_s = _memory_copy_gb_s(device, sizes, watch)
    host_to_device_gb_s = {}
    for memory_kind in _host_memory_kinds(device):
        announce(f"host-to-device copy, {memory_kind}, {sizes.host_to_device_bytes / BYTES_PER_MIB:,.0f} MiB")
        host_to_device_gb_s[memory_kind] = _host_to_device_gb_s(device, memory_kind == "pinned", sizes, watch)
    return DeviceCeilings(
        device=str(device),
        device_name=device_name(device),
        matmul_tflops=matmul_tflops,
        memory_gb_s=memory_gb_s,
        host_to_device_gb_s=host_to_device_gb_s,
        sizes=sizes,
    )


# --- the measurements ------------------------------------------------------------------------------------------


def _supports(device: torch.device, precision: str) -> bool:
    if precision == "fp32":
        return True
    if device.type == "cuda":
        # TF32 and bf16 tensor cores came with Ampere (8.0): before it the TF32 flag does nothing and bf16 is
        # emulated, so their rates would describe fp32 and the emulation, not the hardware
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return precision == "bf16"  # TF32 is NVIDIA's alone


def _matmul_tflops(device: torch.device, precision: str, sizes: CalibrationSizes, watch: Stopwatch) -> float:
    n = sizes.matmul_size
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    generator = torch.Generator(device).manual_seed(0)  # the same operands every time: values can change speed
    left, right = (torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2))
    product = torch.empty(n, n, device=device, dtype=dtype)
    with _cuda_tf32_matmuls(precision == "tf32"):
        seconds = _best_seconds(lambda: torch.matmul(left, right, out=product), sizes, watch)
    flops_per_repeat = 2 * n**3 * sizes.operations_per_repeat  # n^2 outputs, each n multiplies and n adds
    return flops_per_repeat / seconds / FLOPS_PER_TFLOP


def _memory_copy_gb_s(device: torch.device, sizes: CalibrationSizes, watch: Stopwatch) -> float:
    source = torch.ones(sizes.memory_copy_bytes, dtype=torch.uint8, device=device)  # ones: every page touched now
    destination = torch.empty_like(source)
    seconds = _best_seconds(lambda: destination.copy_(source), sizes, watch)
    bytes_per_repeat = 2 * sizes.memory_copy_bytes * sizes.operations_per_repeat  # each byte read once, written once
    return bytes_per_repeat / seconds / BYTES_PER_GB


def _host_memory_kinds(device: torch.device) -> tuple[str, ...]:
    if device.type == "cpu":
        return ()  # the CPU's memory is the host's: there is nothing to cross
    # page-locked (pinned) host memory is what CUDA's DMA engines read directly; MPS shares memory with the host
    return HOST_MEMORY_KINDS if device.type == "cuda" else ("pageable",)


def _host_to_device_gb_s(device: torch.device, pinned: bool, sizes: CalibrationSizes, watch: Stopwatch) -> float:
    host = torch.ones(sizes.host_to_device_bytes, dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    on_device = torch.empty(sizes.host_to_device_bytes, dtype=torch.uint8, device=device)
    seconds = _best_seconds(lambda: on_device.copy_(host, non_blocking=pinned), sizes, watch)
    return sizes.host_to_device_bytes * sizes.operations_per_repeat / seconds / BYTES_PER_GB


def _best_seconds(operation: Callable[[], object], sizes: CalibrationSizes, watch: Stopwatch) -> float:
    """The shortest of `sizes.repeats` timed runs of `operations_per_repeat` operations, after the warm-up ones."""
    for _ in range(sizes.warmup_rounds):
        operation()
    best = math.inf
    for _ in range(sizes.repeats):
        start = watch.now()
        for _ in range(sizes.operations_per_repeat):
            operation()
        best = min(best, watch.now() - start)
    return best


@contextlib.contextmanager
def _cuda_tf32_matmuls(enabled: bool) -> Iterator[None]:
    """fp32 CUDA matmuls on TF32 tensor cores or not, whatever the user set, and the user's setting back after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


# --- the stored calibration ------------------------------------------------------------------------------------


def calibration_path(machine_id: str, folder: str | Path | None = None) -> Path:
    """Where this machine's calibration lives: `<folder>/<machine_id>.json`, the folder being `folder`, else
    $DEVICEBENCH_CALIBRATION_DIR, else `calibration` in the user data folder (next to results.sqlite)."""
    chosen = folder or os.environ.get(CALIBRATION_DIR_VARIABLE, "").strip()
    base = Path(chosen).expanduser() if chosen else Path(platformdirs.user_data_dir("devicebench")) / "calibration"
    return base / f"{machine_id}.json"


def save_calibration(
    machine_id: str, machine_name: str, ceilings: Iterable[DeviceCeilings], folder: str | Path | None = None
) -> Path:
    """Store `ceilings` for this machine, keeping the devices stored before that were not measured again; return
    the file's path. An unreadable file is replaced, with a warning."""
    path = calibration_path(machine_id, folder)
    try:
        stored = load_calibration(machine_id, folder)
    except CalibrationError as error:
        logger.warning("%s Replacing it.", error)
        stored = None
    devices = dict(stored["devices"]) if stored else {}
    devices.update({entry.device: entry.to_dict() for entry in ceilings})
    document = {
        "schema": CALIBRATION_SCHEMA,
        "machine_id": machine_id,
        "machine_name": machine_name,
        "created_utc": wall_clock_utc(),
        "devicebench_version": devicebench.__version__,
        "torch_version": torch.__version__,
        "devices": devices,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(document, indent=2) + "\n")
    return path


def load_calibration(machine_id: str, folder: str | Path | None = None) -> dict | None:
    """The stored calibration of this machine (see save_calibration), or None when it was never calibrated.

    Raises CalibrationError for a file that is not JSON, not a calibration, or another machine's.
    """
    path = calibration_path(machine_id, folder)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise _unreadable(path, str(error)) from None
    if not isinstance(document, dict) or document.get("schema") != CALIBRATION_SCHEMA:
        raise _unreadable(path, f"not a devicebench calibration of schema {CALIBRATION_SCHEMA}")
    if document.get("machine_id") != machine_id:
        raise _unreadable(path, f"it belongs to machine {document.get('machine_id')!r}, not {machine_id!r}")
    devices = document.get("devices")
    if not isinstance(devices, dict):
        raise _unreadable(path, "it has no 'devices' table")
    for device, entry in devices.items():
        try:
            readable = DeviceCeilings.from_dict(entry).device == device
        except (AttributeError, KeyError, TypeError, ValueError):
            readable = False
        if not readable:
            raise _unreadable(path, f"its entry for {device!r} is not a device's ceilings")
    return document


def peak_tflops(machine_id: str, device: str, precision: str, folder: str | Path | None = None) -> float | None:
    """The matmul TFLOP/s stored for `device` ("cpu", "cuda:0") of this machine at `precision` ("fp32", "tf32",
    "bf16"); None when it was not calibrated, or when the file cannot be read (a warning says so: a run must
    never fail because of its calibration)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; calibrated precisions are {', '.join(PRECISIONS)}")
    try:
        stored = load_calibration(machine_id, folder)
    except CalibrationError as error:
        logger.warning("%s Going on without it.", error)
        return None
    entry = stored["devices"].get(device) if stored else None
    return None if entry is None else entry["matmul_tflops"].get(precision)


def _unreadable(path: Path, reason: str) -> CalibrationError:
    return CalibrationError(
        f"{path} is not a readable devicebench calibration ({reason}). Run `devicebench calibrate` again: "
        "it will overwrite the file."
    )
