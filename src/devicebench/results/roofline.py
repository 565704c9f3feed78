"""How long a training step would take on a GPU that is not here: a roofline per kernel, fitted on measured points.

Each kernel of one step (engine/opcount.py counts them) takes the longer of its FLOPs at the GPU's datasheet peak
and its bytes at the datasheet memory bandwidth, each scaled by an efficiency, and the GPU runs them one after
another; the batch's copy to the device comes on top, at the datasheet host-link rate. Meanwhile the host launches
the kernels, a fixed time each (PyTorch launches without waiting for the GPU), and the input pipeline prepares the
next batch: in worker processes beside the loop, or in the loop itself when there are none. The step lasts as long
as the slowest of the three, and that one is what bounds it.

The three efficiencies are never guessed: they are fitted on measured points (published figures on named GPUs, runs
committed under results/, GPU runs in the user's database), over a grid, by least squares on log times. The interval
of an estimate is the range of the errors the points get when each is predicted by a fit made without it (leave one
out): with n points, a new one falls inside that range with chance (n - 1) / (n + 1) if it is like them.

    python -m devicebench estimate cifar10-mlp --on t4,h100-sxm
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import numpy as np

from devicebench.results.datasheets import Datasheet

if TYPE_CHECKING:
    from devicebench.engine.opcount import StepProfile

# The grids the efficiencies are fitted on: shares of the datasheet peaks, seconds per kernel launch.
COMPUTE_GRID = np.geomspace(0.02, 1.0, 40)  # share of the peak FLOP/s a matrix kernel reaches
MEMORY_GRID = np.geomspace(0.05, 1.0, 30)  # share of the memory bandwidth a kernel's traffic reaches
LAUNCH_GRID = np.geomspace(1e-6, 2e-3, 45)  # s of host time per kernel: CUDA's launch and the framework around it
NEAR_BEST = 0.01  # cells within 1% of the least squared error fit equally well; the middle of them is taken
FEWEST_POINTS_FOR_AN_INTERVAL = 2  # below this, leave-one-out errors span no range at all

ObservedKind = Literal["step", "busy"]


@dataclass(frozen=True)
class StepShape:
    """A step's kernels as arrays, the part of a profile the roofline reads."""

    batch_size: int
    flops: np.ndarray  # per kernel
    bytes: np.ndarray  # per kernel, read + written
    low_precision: np.ndarray  # per kernel: a bf16/fp16 matrix kernel, read against the bf16 peak
    host_to_device_bytes: float
    notes: tuple[str, ...] = ()  # how the profile departs from the plain step (opcount.StepProfile.notes)

    @classmethod
    def of(cls, profile: StepProfile) -> StepShape:
        kernels = profile.kernels
        return cls(
            batch_size=profile.batch_size,
            flops=np.array([kernel.flops for kernel in kernels], dtype=float),
            bytes=np.array([kernel.bytes_read + kernel.bytes_written for kernel in kernels], dtype=float),
            low_precision=np.array([kernel.matrix and kernel.dtype in ("bfloat16", "float16") for kernel in kernels],
                                   dtype=bool),
            host_to_device_bytes=float(profile.host_to_device_bytes),
            notes=profile.notes,
        )

    @property
    def kernels(self) -> int:
        return len(self.flops)


@dataclass(frozen=True)
class Efficiency:
    compute: float  # share of the datasheet's peak FLOP/s a matrix kernel reaches
    memory: float  # share of the datasheet's memory bandwidth a kernel's traffic reaches
    launch_s: float  # host seconds per kernel launched


@dataclass(frozen=True)
class StepTime:
    """One step on one GPU, term by term, in seconds."""

    compute_s: float  # GPU time of the kernels bound by arithmetic
    memory_s: float  # GPU time of the kernels bound by memory traffic
    copy_s: float  # the batch's host-to-device copy
    launch_s: float  # host time launching the kernels
    input_s: float  # the input pipeline's time per batch, measured on this machine; 0 when not known
    serial_input: bool  # no loader workers: the loop prepares each batch itself, between launches

    @property
    def device_s(self) -> float:
        return self.compute_s + self.memory_s + self.copy_s

    @property
    def host_s(self) -> float:
        return _host_s(self.launch_s, self.input_s, self.serial_input)

    @property
    def seconds(self) -> float:
        return float(_slowest(self.device_s, self.launch_s, self.input_s, self.serial_input))

    @property
    def bound(self) -> str:
        """What the step waits on: "compute", "memory traffic", "host-to-device copy", "kernel launches" or "input
        pipeline"."""
        if self.seconds == self.device_s:
            return max((self.compute_s, "compute"), (self.memory_s, "memory traffic"),
                       (self.copy_s, "host-to-device copy"))[1]
        if self.serial_input:
            return "input pipeline" if self.input_s >= self.launch_s else "kernel launches"
        return "kernel launches" if self.launch_s >= self.input_s else "input pipeline"


def peaks_flop_s(shape: StepShape, sheet: Datasheet) -> np.ndarray:
    """Each kernel's datasheet peak in FLOP/s: fp32 on the CUDA cores (seed mode turns TF32 off), bf16 and fp16
    matrix kernels on the bf16 tensor cores where the GPU has them."""
    low = sheet.bf16_tflops or sheet.fp32_tflops
    return np.where(shape.low_precision, low, sheet.fp32_tflops) * 1e12


def _kernel_seconds(shape: StepShape, sheet: Datasheet, compute: float | np.ndarray,
                    memory: float | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each kernel's seconds at `compute` times the peak FLOP/s, and at `memory` times the bandwidth: for one
    efficiency, or for a column of them (shape (n, 1)) at once."""
    return (shape.flops / (compute * peaks_flop_s(shape, sheet)),
            shape.bytes / (memory * sheet.memory_gb_s * 1e9))


def _copy_s(shape: StepShape, sheet: Datasheet) -> float:
    return shape.host_to_device_bytes / (sheet.host_link_gb_s * 1e9)


def _host_s(launch_s: float | np.ndarray, input_s: float, serial_input: bool) -> float | np.ndarray:
    """The host's share: launching, and loading too when it has no loader workers."""
    return launch_s + (input_s if serial_input else 0.0)


def _slowest(device_s: float | np.ndarray, launch_s: float | np.ndarray, input_s: float,
             serial_input: bool) -> float | np.ndarray:
    """The step: the slowest of the GPU, the host and the loader workers (arrays broadcast)."""
    return np.maximum(np.maximum(device_s, _host_s(launch_s, input_s, serial_input)),
                      0.0 if serial_input else input_s)


def predict(shape: StepShape, sheet: Datasheet, efficiency: Efficiency, *, input_s: float = 0.0,
            serial_input: bool = False) -> StepTime:
    compute_side, memory_side = _kernel_seconds(shape, sheet, efficiency.compute, efficiency.memory)
    by_compute = compute_side >= memory_side
    return StepTime(
        compute_s=float(compute_side[by_compute].sum()),
        memory_s=float(memory_side[~by_compute].sum()),
        copy_s=_copy_s(shape, sheet),
        launch_s=shape.kernels * efficiency.launch_s,
        input_s=input_s,
        serial_input=serial_input,
    )


@dataclass(frozen=True)
class Point:
    """A step time measured on a GPU of the catalog, to fit the efficiencies on and to score them against."""

    label: str  # "cifar10-cnn on the V100 SXM2, batch 512"
    source: str  # where the figure comes from
    shape: StepShape
    sheet: Datasheet
    observed_s: float  # seconds per step, of the kind below
    kind: ObservedKind  # "step": the whole step, waits for data left out; "busy": the GPU's busy share of it
    input_s: float = 0.0  # the input pipeline's time per batch, where known ("step" points only)
    serial_input: bool = False
    caveat: str = ""  # what makes the figure uncertain

    def predicted_s(self, efficiency: Efficiency) -> float:
        step = predict(self.shape, self.sheet, efficiency, input_s=self.input_s, serial_input=self.serial_input)
        return step.device_s if self.kind == "busy" else step.seconds


@dataclass(frozen=True)
class Unscored:
    """A published figure that cannot be predicted and checked, and why: shown by `estimate --validate`."""

    label: str
    source: str
    why: str


def _log_error_grid(point: Point) -> np.ndarray:
    """log(predicted / observed) at every cell of the grid, shape (compute, memory, launch)."""
    compute_side, memory_side = _kernel_seconds(point.shape, point.sheet, COMPUTE_GRID[:, None],
                                                MEMORY_GRID[:, None])  # (compute, kernels), (memory, kernels)
    device = np.maximum(compute_side[:, None, :], memory_side[None, :, :]).sum(axis=2)  # (compute, memory)
    device = device + _copy_s(point.shape, point.sheet)
    predicted = np.broadcast_to(device[:, :, None], (len(COMPUTE_GRID), len(MEMORY_GRID), len(LAUNCH_GRID)))
    if point.kind == "step":
        launches = point.shape.kernels * LAUNCH_GRID[None, None, :]
        predicted = _slowest(predicted, launches, point.input_s, point.serial_input)
    return np.log(predicted / point.observed_s)


@dataclass
class Fitter:
    """Fits on any subset of `points` at the cost of a sum: each point's error grid is computed once."""

    points: Sequence[Point]
    _grids: list[np.ndarray] = field(init=False)

    def __post_init__(self) -> None:
        self._grids = [_log_error_grid(point) for point in self.points]

    def fit(self, without: Sequence[int] = ()) -> Efficiency:
        """The efficiencies of least squared log error over every point but those `without`; where the points
        cannot tell values apart (a parameter no point depends on), the middle of the equally good range."""
        kept = [grid for index, grid in enumerate(self._grids) if index not in without]
        if not kept:
            raise ValueError("no measured points to fit on")
        loss = sum(grid ** 2 for grid in kept)
        best = float(loss.min())
        near = np.argwhere(loss <= best + NEAR_BEST * max(best, 1e-12))
        middle = np.median(near, axis=0)
        cell = near[np.argmin(((near - middle) ** 2).sum(axis=1))]
        return Efficiency(compute=float(COMPUTE_GRID[cell[0]]), memory=float(MEMORY_GRID[cell[1]]),
                          launch_s=float(LAUNCH_GRID[cell[2]]))

    def held_out_ratios(self, without: Sequence[int] = ()) -> list[float]:
        """observed / predicted of each point (but those `without`), predicted by a fit made without it too."""
        ratios = []
        if len(self.points) - len(set(without)) < 2:  # a point alone cannot be predicted without itself
            return ratios
        for index, point in enumerate(self.points):
            if index not in without:
                efficiency = self.fit([*without, index])
                ratios.append(point.observed_s / point.predicted_s(efficiency))
        return ratios


@dataclass(frozen=True)
class Interval:
    """Seconds an estimate may be off by, as measured/predicted ratios, from leave-one-out errors."""

    low_ratio: float
    high_ratio: float
    points: int  # the errors it spans

    @property
    def coverage(self) -> float:
        """The chance a new point like the fitted ones falls inside the range of `points` of them."""
        return (self.points - 1) / (self.points + 1)

    def seconds(self, predicted_s: float) -> tuple[float, float]:
        return predicted_s * self.low_ratio, predicted_s * self.high_ratio

    @property
    def note(self) -> str:
        return (f"range of the leave-one-out errors of {self.points} measured points: a new point like them falls "
                f"inside with chance {self.coverage:.0%}")


def interval_from(ratios: Sequence[float]) -> Interval | None:
    """The range of the ratios, always holding 1 (the estimate itself); None below FEWEST_POINTS_FOR_AN_INTERVAL."""
    if len(ratios) < FEWEST_POINTS_FOR_AN_INTERVAL:
        return None
    return Interval(min(1.0, *ratios), max(1.0, *ratios), len(ratios))


@dataclass(frozen=True)
class Validation:
    """One point predicted by a fit made without it, with the interval made without it too."""

    point: Point
    predicted_s: float
    interval: Interval | None

    @property
    def error(self) -> float:
        """Relative error of the predicted rate: predicted samples/s over measured, minus one."""
        return self.point.observed_s / self.predicted_s - 1.0

    @property
    def inside(self) -> bool | None:
        if self.interval is None:
            return None
        low, high = self.interval.seconds(self.predicted_s)
        return low <= self.point.observed_s <= high


def validate(points: Sequence[Point]) -> list[Validation]:
    """Every point predicted without it, and checked against the interval its absence would have stated: the
    interval comes from the leave-one-out errors of the other points (each fitted without both)."""
    fitter = Fitter(points)
    validations = []
    for index, point in enumerate(points):
        others = [other for other in range(len(points)) if other != index]
        predicted = point.predicted_s(fitter.fit([index])) if others else math.nan
        interval = interval_from(fitter.held_out_ratios([index])) if others else None
        validations.append(Validation(point, predicted, interval))
    return validations


def median_absolute_error(validations: Sequence[Validation]) -> float | None:
    errors = [abs(validation.error) for validation in validations if math.isfinite(validation.predicted_s)]
    return float(np.median(errors)) if errors else None


def coverage(validations: Sequence[Validation]) -> tuple[int, int]:
    """(points inside their interval, points that had one)."""
    judged = [validation.inside for validation in validations if validation.inside is not None]
    return sum(judged), len(judged)
