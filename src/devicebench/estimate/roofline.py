"""How long a training step would take on a GPU that is not here: a roofline per kernel whose efficiencies are fitted
on published and measured points, and an interval with a stated level.

Each kernel of one step (engine/opcount.py counts them) takes the longer of its FLOPs at a share of the GPU's
datasheet peak and its bytes at a share of the datasheet memory bandwidth, plus a fixed time of its own; the GPU runs
them one after another, and the batch's copy to the device comes on top at the host link's rate. Which peak a matrix
kernel (a matmul, a convolution, a fused recurrent layer) runs at depends on the precision: fp32 on the CUDA cores,
TF32 on the tensor cores, fp16 or bf16 on the tensor cores under mixed precision (whose kernels also move half the
bytes, and which casts the weights once a step). Meanwhile the input pipeline prepares the next batch, in worker
processes beside the loop or in the loop itself: the step lasts as long as the slower of the GPU and the pipeline.

The efficiencies are shares, one per kind of work: compute for each peak (fp32, TF32, half), memory traffic for each
kernel class (matrix, element-wise, normalisation and reductions, the optimizer's step), and the seconds each kernel
costs whatever its size (the launch, the ramp up and down of a short kernel). A kernel is bound by its compute or by
its memory traffic, whichever takes longer at the fitted shares; once that is decided for every kernel, a step's
time is linear in the inverse shares, so they are fitted by bounded linear least squares on relative errors (no
share above the datasheet's peak), the bounds re-decided and the fit repeated until they hold still. A share no point
depends on stays at its prior (PRIOR), and `pinned` says how many points each one rests on.

How sure an estimate is, from the errors of points predicted by fits made without them, is estimate/validation.py's.

    python -m devicebench estimate resnet50 --on v100-sxm2,h100-sxm
    python -m devicebench estimate --validate
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np

from devicebench.choices import KernelPrecision
from devicebench.estimate.host import HOST_PRIOR_S, HOST_TERMS, fit_host, host_work, is_convolution, with_workers
from devicebench.estimate.robust import reweighted_fit
from devicebench.results.datasheets import Datasheet
from devicebench.results.schema import RunSettings

if TYPE_CHECKING:
    from devicebench.engine.opcount import StepProfile

ObservedKind = Literal["step", "busy"]

PEAKS = ("fp32", "tf32", "half")  # the datasheet peak a matrix kernel runs at
# The shares of a peak that kernels' arithmetic reaches: one per peak, and one for cuDNN's recurrent layers at
# whichever peak they run at (a step's small matrix products, one after another, reach far less)
COMPUTE_SHARES = (*PEAKS, "recurrent")
KERNEL_CLASSES = ("matrix", "element-wise", "normalisation", "optimizer", "recurrent")  # kinds of memory traffic
PARAMETERS = (
    *(f"compute {share}" for share in COMPUTE_SHARES),
    *(f"memory {kind}" for kind in KERNEL_CLASSES),
    "per kernel",
)
PER_KERNEL = len(PARAMETERS) - 1  # the column of the fixed cost of a kernel, in microseconds
MICROSECOND = 1e-6
# Where the points do not pin a share, it stays here: inverse shares of the peak (3: a third of the peak), and
# microseconds a kernel. A weak pull (PRIOR_WEIGHT, in the fit's relative-error units) that a single point outweighs
PRIOR = np.array([3.0] * len(COMPUTE_SHARES) + [2.0] * len(KERNEL_CLASSES) + [5.0])
PRIOR_WEIGHT = 1e-3
LOWEST = np.array([1.0] * PER_KERNEL + [0.0])  # no kernel beats the datasheet's peak; no kernel costs below nothing
HIGHEST = np.array([1000.0] * PER_KERNEL + [1000.0])  # a share of at least 0.1%, at most 1 ms a kernel
MOST_REFITS = 12
# Huber's loss: a point whose relative error is beyond this weighs less the further it is (the fit's robustness)
HUBER_RELATIVE = 0.5
MOST_ROBUST_REFITS = 30  # reweightings and re-decided bounds before a fit keeps the last
AMP_BYTES = 0.5  # under mixed precision the forward and backward kernels read and write fp16/bf16 activations
AMP_CAST_BYTES = 1.5  # and the fp32 weights are cast to half once a step: 4 bytes read, 2 written a weight
PINNED_SHARE = 0.1  # a point rests on a parameter whose term is at least a tenth of its predicted step

_FP32, _TF32, _HALF = range(3)
_OPTIMIZER = KERNEL_CLASSES.index("optimizer")
_RECURRENT = KERNEL_CLASSES.index("recurrent")
_MEMORY = len(COMPUTE_SHARES)  # the first memory column
_NORMALISATION_WORDS = (
    "norm",
    "softmax",
    "sum",
    "mean",
    "var",
    "std",
    "max",
    "min",
    "nll_loss",
    "cross_entropy",
    "logsumexp",
    "cumsum",
    "prod",
    "embedding_dense_backward",
)


def kernel_class(operator: str, flops: float) -> int:
    """The index in KERNEL_CLASSES of a kernel by its aten operator ("aten.addmm.default") and FLOPs."""
    if operator.startswith("cudnn_rnn."):
        return _RECURRENT
    if flops > 0:
        return 0
    name = operator.split(".")[1] if operator.startswith("aten.") else operator
    if name.startswith("_foreach_") or name.startswith("_fused_"):
        return _OPTIMIZER
    if any(word in name for word in _NORMALISATION_WORDS):
        return KERNEL_CLASSES.index("normalisation")
    return KERNEL_CLASSES.index("element-wise")


@dataclass(frozen=True)
class StepShape:
    """A step's kernels as arrays, the part of a profile the roofline reads."""

    batch_size: int
    flops: np.ndarray  # per kernel
    bytes: np.ndarray  # per kernel, read + written, as profiled (in the model's own dtypes, fp32 for every seed)
    classes: np.ndarray  # per kernel: its index in KERNEL_CLASSES
    half: np.ndarray  # per kernel: it computes in bf16 or fp16 already (a model built in half precision)
    parameter_bytes: float
    host_to_device_bytes: float
    notes: tuple[str, ...] = ()  # how the profile departs from the plain step (opcount.StepProfile.notes)
    convolutions: int = 0  # of the calls, those of a convolution, forward or backward (cuDNN's: host.py)

    @classmethod
    def of(cls, profile: StepProfile) -> StepShape:
        kernels = profile.kernels
        return cls(
            batch_size=profile.batch_size,
            flops=np.array([kernel.flops for kernel in kernels], dtype=float),
            bytes=np.array([kernel.bytes_read + kernel.bytes_written for kernel in kernels], dtype=float),
            classes=np.array([kernel_class(kernel.operator, kernel.flops) for kernel in kernels], dtype=int),
            half=np.array([kernel.dtype in ("bfloat16", "float16") for kernel in kernels], dtype=bool),
            parameter_bytes=float(profile.parameter_bytes),
            host_to_device_bytes=float(profile.host_to_device_bytes),
            notes=profile.notes,
            convolutions=sum(is_convolution(kernel.operator) for kernel in kernels),
        )

    @property
    def kernels(self) -> int:
        return len(self.flops)

    def at_batch(self, other: StepShape, batch_size: int) -> StepShape:
        """The step at `batch_size`, from this one and `other` (the same kernels at another batch size): every
        kernel's FLOPs and bytes are a fixed part (the weights) plus a part per sample (the activations)."""
        if other.kernels != self.kernels or other.batch_size == self.batch_size:
            raise ValueError("two profiles of the same kernels at two batch sizes are needed")
        scale = (batch_size - self.batch_size) / (other.batch_size - self.batch_size)
        return StepShape(
            batch_size=batch_size,
            flops=np.maximum(0.0, self.flops + (other.flops - self.flops) * scale),
            bytes=np.maximum(0.0, self.bytes + (other.bytes - self.bytes) * scale),
            classes=self.classes,
            half=self.half,
            parameter_bytes=self.parameter_bytes,
            host_to_device_bytes=max(
                0.0, self.host_to_device_bytes + (other.host_to_device_bytes - self.host_to_device_bytes) * scale
            ),
            notes=self.notes,
            convolutions=self.convolutions,
        )


def run_precision(settings: RunSettings) -> KernelPrecision | str:
    """The precision `settings` ran its matrix kernels at, as the roofline names it (one of KERNEL_PRECISIONS), or
    why it cannot be told: seed mode is strict fp32 (engine/tuning_applied.process_settings turns TF32 off); tuned
    mode records its choice."""
    if settings.mode == "seed":
        return "fp32"
    if settings.mode != "tuned":
        return f"mode {settings.mode!r} is neither seed nor tuned: its precision is not known"
    if settings.precision == "bf16":
        return "amp-bf16"
    if settings.precision != "fp32":
        return f"precision {settings.precision!r} is not one the roofline estimates"
    if settings.tf32_matmul != settings.tf32_cudnn:
        return (
            "TF32 was on for matrix products or for convolutions, not for both: the roofline runs every matrix "
            "kernel at one precision"
        )
    return "tf32" if settings.tf32_matmul else "fp32"


class PrecisionError(ValueError):
    """A precision the GPU cannot run (bf16 on a GPU without bf16); the message says which runs instead."""


def half_peak_tflops(sheet: Datasheet, precision: KernelPrecision) -> float | None:
    """The peak a matrix kernel reaches under mixed precision: fp16 tensor cores (with fp32 accumulation) for fp16,
    bf16 ones for bf16; None where the datasheet gives none."""
    if precision == "amp-bf16":
        return sheet.bf16_tflops
    return sheet.fp16_tflops or sheet.bf16_tflops  # from Ampere on, fp16 and bf16 tensor cores run at one rate


def check_precision(sheet: Datasheet, precision: KernelPrecision) -> None:
    if precision == "amp-bf16" and sheet.bf16_tflops is None:
        raise PrecisionError(f"the {sheet.product} has no bf16 arithmetic in its datasheet: estimate amp-fp16 or fp32")


@dataclass(frozen=True)
class Resolved:
    """A step on one GPU at one precision, kernel by kernel, in seconds at the datasheet's peaks: what a fit and a
    prediction multiply by the inverse shares."""

    compute_s: np.ndarray  # FLOPs over the peak the kernel runs at
    memory_s: np.ndarray  # bytes over the memory bandwidth
    peaks: np.ndarray  # index in PEAKS of the peak each kernel runs at
    shares: np.ndarray  # index in COMPUTE_SHARES of the share of it each kernel's arithmetic reaches
    classes: np.ndarray  # index in KERNEL_CLASSES
    copy_s: float  # the batch over the host link
    # the host's counts of HOST_TERMS (host.py): calls, convolutions, a step, a batch from loader workers (none
    # unless the run has workers: Point and estimate say)
    host_work: np.ndarray = field(default_factory=lambda: host_work(0, 0))

    @classmethod
    def of(cls, shape: StepShape, sheet: Datasheet, precision: KernelPrecision) -> Resolved:
        if sheet.fp32_tflops is None:
            raise PrecisionError(f"no citable source gives the {sheet.product}'s compute peaks ({sheet.source})")
        check_precision(sheet, precision)
        matrix = shape.flops > 0
        half_tflops = half_peak_tflops(sheet, precision if precision.startswith("amp") else "amp-fp16")
        peaks = np.full(shape.kernels, _FP32)
        if precision == "tf32" and sheet.tf32_tflops is not None:
            peaks[matrix] = _TF32
        if precision.startswith("amp") or shape.half.any():
            halved = matrix & (shape.half | precision.startswith("amp"))
            peaks[halved] = _HALF if half_tflops is not None else _FP32  # no fast half arithmetic: fp32's pace
        tflops = np.array([sheet.fp32_tflops, sheet.tf32_tflops or sheet.fp32_tflops, half_tflops or sheet.fp32_tflops])
        flops, moved, classes = shape.flops, shape.bytes, shape.classes
        if precision.startswith("amp"):  # activations in half precision; the optimizer's state stays fp32
            moved = np.where(classes == _OPTIMIZER, moved, moved * AMP_BYTES)
            # the weights' cast to half, one element-wise kernel a step
            flops = np.append(flops, 0.0)
            moved = np.append(moved, shape.parameter_bytes * AMP_CAST_BYTES)
            classes = np.append(classes, KERNEL_CLASSES.index("element-wise"))
            peaks = np.append(peaks, _FP32)
        shares = np.where(classes == _RECURRENT, COMPUTE_SHARES.index("recurrent"), peaks)
        return cls(
            compute_s=flops / (tflops[peaks] * 1e12),
            memory_s=moved / (sheet.memory_gb_s * 1e9),
            peaks=peaks,
            shares=shares,
            classes=classes,
            copy_s=shape.host_to_device_bytes / (sheet.host_link_gb_s * 1e9),
            host_work=host_work(len(flops), shape.convolutions),
        )

    @property
    def kernels(self) -> int:
        return len(self.compute_s)

    def as_ran(self, settings: RunSettings) -> Resolved:
        """This step as a run with `settings` took it: no batch copied where its data was held on the device, and
        each batch received from loader workers where it had them."""
        copy_s = 0.0 if settings.device_resident else self.copy_s
        return replace(self, copy_s=copy_s, host_work=with_workers(self.host_work, bool(settings.workers)))


@dataclass(frozen=True)
class Efficiency:
    """The fitted inverse shares, in PARAMETERS' order: 2.0 for compute fp32 is half the fp32 peak; the last is
    microseconds a kernel. And the host's seconds of each of HOST_TERMS (host.py) in devicebench's eager loop, which
    overlap the GPU's work (all 0: the host never bounds the step)."""

    inverse: np.ndarray
    host: np.ndarray = field(default_factory=lambda: np.zeros(len(HOST_TERMS)))

    def share(self, name: str) -> float:
        return 1.0 / float(self.inverse[PARAMETERS.index(name)])

    @property
    def kernel_s(self) -> float:
        return float(self.inverse[PER_KERNEL]) * MICROSECOND

    def describe(self) -> str:
        compute = ", ".join(f"{share} {self.share(f'compute {share}'):.0%}" for share in COMPUTE_SHARES)
        memory = ", ".join(f"{kind} {self.share(f'memory {kind}'):.0%}" for kind in KERNEL_CLASSES)
        return (
            f"compute at {compute} of the datasheet peaks; memory traffic at {memory} of the bandwidth; "
            f"{self.kernel_s * 1e6:.1f} µs a kernel on the GPU; on the host "
            + ", ".join(f"{seconds * 1e6:.0f} µs {term}" for term, seconds in zip(HOST_TERMS, self.host))
        )


@dataclass(frozen=True)
class PredictedStep:
    """One step on one GPU, term by term, in seconds: a prediction, never a measurement."""

    compute_s: float  # GPU time of the kernels bound by arithmetic
    memory_s: float  # GPU time of the kernels bound by memory traffic
    copy_s: float  # the batch's host-to-device copy
    launch_s: float  # the kernels' fixed costs
    input_s: float  # the input pipeline's time per batch on the target's host; 0 when not known
    serial_input: bool  # no loader workers: the loop prepares each batch itself, between steps
    host_s: float = 0.0  # the host's eager loop (host.py's terms), overlapping the GPU's time

    @property
    def device_s(self) -> float:
        return self.compute_s + self.memory_s + self.copy_s + self.launch_s

    @property
    def computing_s(self) -> float:
        """The step with no wait for data: the GPU's time or the host's launching it, whichever is longer (launches
        are asynchronous: the host queues kernels while the GPU runs those queued before)."""
        return max(self.device_s, self.host_s)

    @property
    def seconds(self) -> float:
        if self.serial_input:  # the loop launches a step's kernels, then prepares the next batch itself
            return max(self.device_s, max(self.host_s, self.launch_s) + self.input_s)
        return max(self.computing_s, self.input_s)

    @property
    def bound(self) -> str:
        """What the step waits on: "compute", "memory traffic", "host-to-device copy", "kernel launches" (the
        GPU's fixed time a kernel), "host (eager loop)" or "input pipeline"."""
        if self.seconds > self.device_s:  # the host's side: its launches, or the batches it prepares
            return "input pipeline" if self.input_s >= self.host_s else "host (eager loop)"
        return max(
            (self.compute_s, "compute"),
            (self.memory_s, "memory traffic"),
            (self.copy_s, "host-to-device copy"),
            (self.launch_s, "kernel launches"),
        )[1]


def predict(
    resolved: Resolved, efficiency: Efficiency, *, input_s: float = 0.0, serial_input: bool = False
) -> PredictedStep:
    inverse = efficiency.inverse
    compute = inverse[resolved.shares] * resolved.compute_s
    memory = inverse[_MEMORY + resolved.classes] * resolved.memory_s
    by_compute = compute >= memory
    return PredictedStep(
        compute_s=float(compute[by_compute].sum()),
        memory_s=float(memory[~by_compute].sum()),
        copy_s=resolved.copy_s,
        launch_s=resolved.kernels * efficiency.kernel_s,
        input_s=input_s,
        serial_input=serial_input,
        host_s=float(resolved.host_work @ efficiency.host),
    )


@dataclass(frozen=True)
class Point:
    """A step time measured on a GPU of the catalog, to fit the efficiencies on and to score them against."""

    label: str  # "resnet50 on the V100 SXM2, amp-fp16, batch 256"
    source: str  # where the figure comes from
    workload: str  # what leave-one-model-out leaves out together
    sheet: Datasheet
    precision: KernelPrecision
    resolved: Resolved
    batch_size: int
    observed_s: float  # seconds per step, of the kind below
    kind: ObservedKind  # "step": the whole step, waits for data left out; "busy": the GPU's busy share of it
    caveat: str = ""  # what makes the figure uncertain
    host_launches: bool = False  # devicebench's own run: its eager loop's host time is in its step (host.py)
    model_kind: str = "reference"  # whose held-out errors its interval takes: "small" (the seeds') or "reference"

    def predicted_s(self, efficiency: Efficiency) -> float:
        step = predict(self.resolved, efficiency)  # a point's waits for data are never in its time
        return step.computing_s if self.host_launches else step.device_s


@dataclass(frozen=True)
class Unscored:
    """A published figure that cannot be predicted and checked, and why: shown by `estimate --validate`."""

    label: str
    source: str
    why: str


@dataclass
class Fitter:
    """Fits the shares on any subset of `points`: every kernel of every point in flat arrays, so that one fit is a
    few passes of array arithmetic and a small least-squares problem."""

    points: Sequence[Point]
    _owner: np.ndarray = field(init=False)  # the point each kernel belongs to
    _compute_s: np.ndarray = field(init=False)
    _memory_s: np.ndarray = field(init=False)
    _shares: np.ndarray = field(init=False)
    _classes: np.ndarray = field(init=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("no measured points to fit on")
        parts = [point.resolved for point in self.points]
        self._owner = np.concatenate([np.full(part.kernels, index) for index, part in enumerate(parts)])
        self._compute_s = np.concatenate([part.compute_s for part in parts])
        self._memory_s = np.concatenate([part.memory_s for part in parts])
        self._shares = np.concatenate([part.shares for part in parts])
        self._classes = np.concatenate([part.classes for part in parts]) + _MEMORY
        self._kernels = np.array([part.kernels for part in parts], dtype=float)
        self._copy_s = np.array([part.copy_s for part in parts])
        self._observed_s = np.array([point.observed_s for point in self.points])
        self._host_launches = np.array([point.host_launches for point in self.points], dtype=bool)
        self._host_work = np.vstack([part.host_work for part in parts])  # points × HOST_TERMS

    def _terms(self, inverse: np.ndarray, by_compute: np.ndarray | None = None) -> np.ndarray:
        """Each point's seconds per parameter at unit inverse shares, given which kernels are compute-bound
        (`by_compute`, or as `inverse` makes them): shape (points, parameters)."""
        by_compute = self._bounds(inverse) if by_compute is None else by_compute
        column = np.where(by_compute, self._shares, self._classes)
        seconds = np.where(by_compute, self._compute_s, self._memory_s)
        count = len(PARAMETERS)
        terms = np.bincount(self._owner * count + column, weights=seconds, minlength=len(self.points) * count).reshape(
            len(self.points), count
        )
        terms[:, PER_KERNEL] = self._kernels * MICROSECOND
        return terms

    def fit(self, without: Sequence[int] = (), start: Efficiency | None = None) -> Efficiency:
        """The inverse shares of least squared relative error over every point but those `without`, and the host's
        seconds of each of HOST_TERMS. devicebench's own steps (Point.host_launches) are taken as the host's at
        first; the GPU's shares are fitted on the points the GPU bounds, the host's costs on those it bounds
        (host.fit_host), and the two sets re-decided until they hold still."""
        kept = np.ones(len(self.points), dtype=bool)
        kept[list(without)] = False
        if not kept.any():
            raise ValueError("no measured points to fit on")
        inverse = PRIOR.copy() if start is None else start.inverse.copy()
        host_bound = self._host_launches.copy()
        host = HOST_PRIOR_S
        for _ in range(MOST_REFITS):
            inverse = self._fit_shares(kept & ~host_bound, inverse)
            fitted = kept & host_bound
            host = fit_host(self._host_work[fitted], self._observed_s[fitted])
            settled = host_bound
            host_bound = self._host_launches & (self._host_work @ host > self.device_s(Efficiency(inverse)))
            if np.array_equal(settled, host_bound):
                break
        return Efficiency(inverse, host)

    def _fit_shares(self, kept: np.ndarray, inverse: np.ndarray) -> np.ndarray:
        """The GPU's inverse shares fitted on the `kept` points, starting from `inverse`; the prior alone where none
        is kept. Robust: Huber's loss on the relative errors (iteratively reweighted least squares), so that a point
        off by more than HUBER_RELATIVE weighs in proportion to its error's square root, not its square, and a point
        far from the rest (a forged or mistaken run) cannot drag the shares after it."""
        prior_rows = math.sqrt(PRIOR_WEIGHT) * np.eye(len(PARAMETERS)) / PRIOR
        target = 1.0 - self._copy_s[kept] / self._observed_s[kept]
        by_compute = self._bounds(inverse)
        weights = np.ones(int(kept.sum()))
        for _ in range(MOST_ROBUST_REFITS):
            terms = self._terms(inverse, by_compute)[kept] / self._observed_s[kept, None]
            inverse, reweighted = reweighted_fit(
                terms, target, weights, prior_rows, PRIOR, (LOWEST, HIGHEST), HUBER_RELATIVE
            )
            settled, by_compute = by_compute, self._bounds(inverse)
            steady = np.allclose(reweighted, weights, rtol=0.0, atol=1e-3)
            weights = reweighted
            if np.array_equal(settled, by_compute) and steady:
                break
        return inverse

    def _bounds(self, inverse: np.ndarray) -> np.ndarray:
        return inverse[self._shares] * self._compute_s >= inverse[self._classes] * self._memory_s

    def pinned(self, efficiency: Efficiency) -> dict[str, int]:
        """How many points each parameter's term is at least PINNED_SHARE of the predicted step of, and how many
        steps the host bounds with a term of HOST_TERMS at least PINNED_SHARE of its time ("host per call"...)."""
        terms = self._terms(efficiency.inverse) * efficiency.inverse
        shares = terms / (terms.sum(axis=1, keepdims=True) + self._copy_s[:, None])
        pinned = {name: int((shares[:, column] >= PINNED_SHARE).sum()) for column, name in enumerate(PARAMETERS)}
        host_terms = self._host_work * efficiency.host
        bound = self._host_launches & (host_terms.sum(axis=1) > self.device_s(efficiency))
        host_shares = host_terms[bound] / np.maximum(host_terms[bound].sum(axis=1, keepdims=True), 1e-30)
        host = {
            f"host {term}": int((host_shares[:, column] >= PINNED_SHARE).sum())
            for column, term in enumerate(HOST_TERMS)
        }
        return {**pinned, **host}

    def device_s(self, efficiency: Efficiency) -> np.ndarray:
        """Every point's GPU seconds under `efficiency`."""
        return (self._terms(efficiency.inverse) * efficiency.inverse).sum(axis=1) + self._copy_s

    def predicted_s(self, efficiency: Efficiency) -> np.ndarray:
        """Every point's predicted seconds under `efficiency`: devicebench's own, the longer of the GPU's time and
        the host's eager loop."""
        device_s = self.device_s(efficiency)
        host_s = self._host_work @ efficiency.host
        return np.where(self._host_launches, np.maximum(device_s, host_s), device_s)
