"""Each device's ceilings, measured: matmul TFLOP/s per native precision, memory and host-to-device bandwidth.

A training run's achieved TFLOP/s means little alone; against what this very device reaches on a dense square
matmul it becomes a utilisation. Every figure is sustained work, not a burst: after an untimed warm-up, the
operation is repeated for several timed stretches of at least `stretch_s` each (a second at the default plans) and
the figure is the median stretch's rate. A precision the device only emulates (bf16 on a CPU without AVX-512 BF16
or AMX, on a GPU before Ampere) is recorded as not native and never run: its rate would describe the emulation,
and it takes minutes. Each measurement keeps within its plan's `cap_s` whatever the device's speed, because an
operation too long for a stretch is measured at a smaller size (halving down a ladder), and no stretch starts that
would end past the cap. engine/calibration_store.py keeps the ceilings, one JSON file per machine. Every clock
reading goes through engine.timing's Stopwatch: synchronized, and replaceable by a fake clock in tests.

    devicebench calibrate --devices cpu
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from devicebench import machine
from devicebench.choices import MATMUL_PRECISIONS
from devicebench.devices import device_name, native_bf16
from devicebench.engine.timing import Stopwatch
from devicebench.host import BYTES_PER_MIB

HOST_MEMORY_KINDS = ("pinned", "pageable")

BYTES_PER_GB = 1e9  # GB/s as datasheets count it: decimal gigabytes
FLOPS_PER_TFLOP = 1e12
SMALLEST_MATMUL_SIZE = 128  # the size ladder's lowest rung: 4 MFLOPs a product, milliseconds on any CPU
SMALLEST_COPY_BYTES = BYTES_PER_MIB
CLOCK_READINGS_PER_STRETCH = 8  # synchronizing this rarely keeps a GPU's queue full; a stretch overshoots by 1/8

Operation = Callable[[], object]  # one product or copy, on tensors made beforehand
OperationOfSize = Callable[[int], Operation]  # makes the operation of a size: n of a product, bytes of a copy


@dataclass(frozen=True)
class CalibrationPlan:
    """How big each operation is at most and how long each measurement runs; tests shrink it to milliseconds."""

    matmul_size: int  # the largest n of the n x n matrices; one product costs 2 n^3 FLOPs
    memory_copy_bytes: int  # the largest size of each of the two device buffers of the on-device copy
    host_to_device_bytes: int  # the largest size of the host buffer copied to the device
    warmup_s: float  # untimed work first: kernel selection, allocator growth, clocks ramping up
    stretch_s: float  # each timed stretch is at least this much sustained work
    stretches: int  # timed stretches per figure; the figure is their median
    cap_s: float  # a measurement starts no stretch that would end later than this after it began


# Five one-second stretches after a second of warm-up: the rate a GPU sustains under load, not its boost-clock burst;
# the median drops a stretch slowed by a neighbour as well as one run before the clocks settled. About 7 s a figure
GPU_PLAN = CalibrationPlan(
    matmul_size=8192,
    memory_copy_bytes=2048 * BYTES_PER_MIB,
    host_to_device_bytes=256 * BYTES_PER_MIB,
    warmup_s=1.0,
    stretch_s=1.0,
    stretches=5,
    cap_s=15.0,
)
# At most three figures (fp32, native bf16, the copy) of at most 8 s each: under a minute on any CPU
CPU_PLAN = CalibrationPlan(
    matmul_size=2048,
    memory_copy_bytes=256 * BYTES_PER_MIB,
    host_to_device_bytes=256 * BYTES_PER_MIB,
    warmup_s=0.5,
    stretch_s=1.0,
    stretches=3,
    cap_s=8.0,
)
# A check in seconds on any device; small products, copies and stretches understate the ceilings, most on a GPU
QUICK_PLAN = CalibrationPlan(
    matmul_size=512,
    memory_copy_bytes=16 * BYTES_PER_MIB,
    host_to_device_bytes=16 * BYTES_PER_MIB,
    warmup_s=0.05,
    stretch_s=0.1,
    stretches=3,
    cap_s=1.0,
)


def default_plan(device: torch.device) -> CalibrationPlan:
    """The plan that reaches a device's sustained ceilings without taking minutes: CPU_PLAN on the CPU, else
    GPU_PLAN."""
    return CPU_PLAN if device.type == "cpu" else GPU_PLAN


@dataclass(frozen=True)
class Measurement:
    """One sustained figure and how it was taken."""

    rate: float  # TFLOP/s of a product, GB/s of a copy: the median of stretch_rates
    size: int  # n of the n x n products, or bytes per copy
    stretch_s: tuple[float, ...]  # how long each timed stretch of work lasted
    stretch_rates: tuple[float, ...]  # the rate in each stretch

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Measurement:
        """The measurement to_dict() wrote: finite positive figures; KeyError, TypeError or ValueError else."""
        return cls(
            rate=_positive(data["rate"], "rate"),
            size=_positive(data["size"], "size", whole=True),
            stretch_s=tuple(_positive(seconds, "stretch_s") for seconds in _list(data["stretch_s"])),
            stretch_rates=tuple(_positive(rate, "stretch_rates") for rate in _list(data["stretch_rates"])),
        )


def _positive(value: Any, name: str, *, whole: bool = False, zero: bool = False) -> Any:
    """`value` when it is a finite number > 0 (≥ 0 with `zero`; a whole one with `whole`; never a bool or a
    string), else ValueError."""
    kind = int if whole else (int, float)
    if (
        isinstance(value, bool)
        or not isinstance(value, kind)
        or not math.isfinite(value)
        or not (value > 0 or (zero and value == 0))
    ):
        raise ValueError(
            f"{name}: expected a finite {'whole ' if whole else ''}number {'≥' if zero else '>'} 0, got {value!r:.60}"
        )
    return value if whole else float(value)


def _list(value: Any) -> list | tuple:
    if not isinstance(value, (list, tuple)):  # a list in JSON, a tuple from to_dict()
        raise TypeError(f"expected a list, got {value!r:.60}")
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}: expected a non-empty string, got {value!r:.60}")
    return value


@dataclass(frozen=True)
class DeviceCeilings:
    """What one device sustained on dense matmuls and large copies."""

    device: str  # as str(torch.device) writes it: "cpu", "cuda:0"
    device_name: str  # the CPU model or the GPU's product name, as devices.device_name gives it
    matmul: dict[str, Measurement]  # precision ("fp32", "tf32", "bf16") → TFLOP/s; tf32 only on CUDA
    not_native: tuple[str, ...]  # precisions the device only emulates: not measured, so no peak to divide by
    memory_copy: Measurement  # an on-device copy: bytes read + bytes written, per second, in 1e9 bytes
    host_to_device: dict[str, Measurement]  # "pinned" / "pageable" host memory → GB/s; empty for the CPU
    plan: CalibrationPlan  # what was asked for: QUICK_PLAN's small sizes and short stretches understate the ceilings

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeviceCeilings:
        """The ceilings to_dict() wrote; KeyError, TypeError or ValueError for anything else."""
        matmul, host_to_device, plan = data["matmul"], data["host_to_device"], data["plan"]
        if not isinstance(matmul, dict) or not isinstance(host_to_device, dict) or not isinstance(plan, dict):
            raise TypeError("matmul, host_to_device and plan must be objects")
        fields = {item.name: item.type for item in dataclasses.fields(CalibrationPlan)}
        if set(plan) != set(fields):
            raise ValueError(f"plan: expected the fields {', '.join(fields)}")
        return cls(
            device=_text(data["device"], "device"),
            device_name=_text(data["device_name"], "device_name"),
            matmul={_precision(precision): Measurement.from_dict(taken) for precision, taken in matmul.items()},
            not_native=tuple(_precision(precision) for precision in _list(data["not_native"])),
            memory_copy=Measurement.from_dict(data["memory_copy"]),
            host_to_device={_memory_kind(kind): Measurement.from_dict(taken) for kind, taken in host_to_device.items()},
            plan=CalibrationPlan(
                **{
                    name: _positive(plan[name], name, whole=kind == "int", zero=name == "warmup_s")
                    for name, kind in fields.items()
                }
            ),
        )


def _precision(value: Any) -> str:
    if value not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown precision {value!r:.60}")
    return value


def _memory_kind(value: Any) -> str:
    if value not in HOST_MEMORY_KINDS:
        raise ValueError(f"unknown host memory kind {value!r:.60}")
    return value


def measure_ceilings(
    device: torch.device,
    *,
    plan: CalibrationPlan | None = None,
    watch: Stopwatch | None = None,
    progress: Callable[[str], None] | None = None,
) -> DeviceCeilings:
    """Measure `device`'s matmul TFLOP/s in each precision it computes natively (fp32; bf16 with AVX-512 BF16 or
    AMX on a CPU, from Ampere on an NVIDIA GPU, which also gets tf32), its memory bandwidth and, for an accelerator,
    host-to-device bandwidth. `plan` defaults to default_plan(device); `progress` hears the name of each
    measurement as it starts (under a minute on a CPU, about 7 s a figure on a GPU)."""
    plan = plan or default_plan(device)
    watch = watch or Stopwatch(device)
    announce = progress or (lambda step: None)
    matmul = {}
    for precision in _precisions(device):
        if _native(device, precision):
            announce(f"{precision} matmul, up to {plan.matmul_size}x{plan.matmul_size}")
            matmul[precision] = _matmul(device, precision, plan, watch)
    announce(f"memory copy, up to {plan.memory_copy_bytes / BYTES_PER_MIB:,.0f} MiB")
    memory_copy = _memory_copy(device, plan, watch)
    host_to_device = {}
    for memory_kind in _host_memory_kinds(device):
        announce(f"host-to-device copy, {memory_kind}, up to {plan.host_to_device_bytes / BYTES_PER_MIB:,.0f} MiB")
        host_to_device[memory_kind] = _host_to_device(device, memory_kind == "pinned", plan, watch)
    return DeviceCeilings(
        device=str(device),
        device_name=device_name(device),
        matmul=matmul,
        not_native=tuple(precision for precision in _precisions(device) if precision not in matmul),
        memory_copy=memory_copy,
        host_to_device=host_to_device,
        plan=plan,
    )


# --- the measurements ------------------------------------------------------------------------------------------


def _precisions(device: torch.device) -> tuple[str, ...]:
    return (
        MATMUL_PRECISIONS if device.type == "cuda" else tuple(p for p in MATMUL_PRECISIONS if p != "tf32")
    )  # NVIDIA's alone


def _native(device: torch.device, precision: str) -> bool:
    if precision == "bf16":
        return native_bf16(device)
    if precision == "tf32":
        # TF32 tensor cores came with Ampere (8.0): before it the TF32 flag does nothing and fp32 runs
        return (machine.accelerator(device).compute_capability or (0, 0)) >= (8, 0)
    return True


def _matmul(device: torch.device, precision: str, plan: CalibrationPlan, watch: Stopwatch) -> Measurement:
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def product(n: int) -> Operation:
        generator = torch.Generator(device).manual_seed(0)  # the same operands every time: values can change speed
        left, right = (torch.randn(n, n, device=device, dtype=dtype, generator=generator) for _ in range(2))
        result = torch.empty(n, n, device=device, dtype=dtype)
        return lambda: torch.matmul(left, right, out=result)

    def tflop(n: int) -> float:
        return 2 * n**3 / FLOPS_PER_TFLOP  # n^2 outputs, each n multiplies and n adds

    with _cuda_tf32_matmuls(precision == "tf32"):
        return _sustained(product, _ladder(plan.matmul_size, SMALLEST_MATMUL_SIZE), tflop, plan, watch)


def _memory_copy(device: torch.device, plan: CalibrationPlan, watch: Stopwatch) -> Measurement:
    def copy(size_bytes: int) -> Operation:
        source = torch.ones(size_bytes, dtype=torch.uint8, device=device)  # ones: every page touched now
        destination = torch.empty_like(source)
        return lambda: destination.copy_(source)

    def gigabytes(size_bytes: int) -> float:
        return 2 * size_bytes / BYTES_PER_GB  # each byte read once and written once

    return _sustained(copy, _ladder(plan.memory_copy_bytes, SMALLEST_COPY_BYTES), gigabytes, plan, watch)


def _host_memory_kinds(device: torch.device) -> tuple[str, ...]:
    if device.type == "cpu":
        return ()  # the CPU's memory is the host's: there is nothing to cross
    # page-locked (pinned) host memory is what CUDA's DMA engines read directly; MPS shares memory with the host
    return HOST_MEMORY_KINDS if device.type == "cuda" else ("pageable",)


def _host_to_device(device: torch.device, pinned: bool, plan: CalibrationPlan, watch: Stopwatch) -> Measurement:
    def copy(size_bytes: int) -> Operation:
        host = torch.ones(size_bytes, dtype=torch.uint8)
        if pinned:
            host = host.pin_memory()
        on_device = torch.empty(size_bytes, dtype=torch.uint8, device=device)
        return lambda: on_device.copy_(host, non_blocking=pinned)

    def gigabytes(size_bytes: int) -> float:
        return size_bytes / BYTES_PER_GB

    return _sustained(copy, _ladder(plan.host_to_device_bytes, SMALLEST_COPY_BYTES), gigabytes, plan, watch)


def _ladder(largest: int, smallest: int) -> list[int]:
    """The sizes from `largest` halved down to no less than `smallest`, ascending; [largest] if it is smaller."""
    sizes = [largest]
    while sizes[-1] // 2 >= smallest:
        sizes.append(sizes[-1] // 2)
    return sizes[::-1]


def _sustained(
    build: OperationOfSize, ladder: list[int], work: Callable[[int], float], plan: CalibrationPlan, watch: Stopwatch
) -> Measurement:
    """The rate of the operation build(size) makes, `work(size)` (TFLOP, GB) a run: at the largest size of `ladder`
    whose operation fits into a stretch, warmed up, then the median of up to plan.stretches timed stretches of at
    least plan.stretch_s each. No stretch starts that would end past plan.cap_s; the first always runs, so a figure
    is never less than one stretch of work."""
    deadline = watch.now() + plan.cap_s
    size, operation = _affordable(build, ladder, work, plan.stretch_s, watch)
    operation_s = _warm_up(operation, plan.warmup_s, watch)
    batch = max(1, math.floor(plan.stretch_s / CLOCK_READINGS_PER_STRETCH / operation_s))  # operations per reading
    expected_stretch_s = math.ceil(plan.stretch_s / (batch * operation_s)) * batch * operation_s
    stretch_s: list[float] = []
    stretch_rates: list[float] = []
    while len(stretch_s) < plan.stretches and (not stretch_s or watch.now() + expected_stretch_s <= deadline):
        operations, seconds = _timed_stretch(operation, batch, plan.stretch_s, watch)
        stretch_s.append(seconds)
        stretch_rates.append(work(size) * operations / seconds)
    return Measurement(
        rate=statistics.median(stretch_rates), size=size, stretch_s=tuple(stretch_s), stretch_rates=tuple(stretch_rates)
    )


def _affordable(
    build: OperationOfSize, ladder: list[int], work: Callable[[int], float], longest_s: float, watch: Stopwatch
) -> tuple[int, Operation]:
    """The largest size of `ladder` whose operation should take at most `longest_s`, judged from the size below it
    as if the rate stayed the same (it only rises with size), and that operation. The smallest is taken whatever
    it takes."""
    size, operation = ladder[0], build(ladder[0])
    for larger in ladder[1:]:
        seconds = min(_seconds_of(operation, watch) for _ in range(2))  # the first run carries one-time set-up
        if seconds * work(larger) / work(size) > longest_s:
            break
        size, operation = larger, build(larger)
    return size, operation


def _seconds_of(operation: Operation, watch: Stopwatch) -> float:
    start = watch.now()
    operation()
    return watch.now() - start


def _warm_up(operation: Operation, seconds: float, watch: Stopwatch) -> float:
    """Run `operation` untimed for at least `seconds`, at least once; the fastest run's seconds, to size batches by."""
    fastest = math.inf
    start = previous = watch.now()
    while True:
        operation()
        now = watch.now()
        fastest = min(fastest, now - previous)
        if now - start >= seconds:
            return fastest
        previous = now


def _timed_stretch(operation: Operation, batch: int, seconds: float, watch: Stopwatch) -> tuple[int, float]:
    """Run `operation` in batches of `batch` until at least `seconds` have passed: (operations, seconds taken). The
    clock is read only between batches, so an accelerator's queue stays full within each."""
    operations = 0
    start = watch.now()
    while True:
        for _ in range(batch):
            operation()
        operations += batch
        elapsed = watch.now() - start
        if elapsed >= seconds:
            return operations, elapsed


@contextlib.contextmanager
def _cuda_tf32_matmuls(enabled: bool) -> Iterator[None]:
    """fp32 CUDA matmuls on TF32 tensor cores or not, whatever the user set, and the user's setting back after."""
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
