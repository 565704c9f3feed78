"""The points `devicebench estimate` is fitted on and scored against, and the fit itself: every single-GPU row of the
public record (results/record/), the seeds' published figures on named GPUs (SEEDS.md), devicebench's GPU runs
committed under results/, and every GPU run in the user's database, each a step time measured on a catalogued GPU at
a known precision, with the step's kernels profiled on the meta device.

    python -c "from devicebench.estimate.points import record_points; print(len(record_points()[0]))"
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from devicebench.choices import KERNEL_PRECISIONS, KernelPrecision, narrowed
from devicebench.engine.kernel_recorder import ProfileError
from devicebench.engine.opcount import profile_training_step
from devicebench.errors import DevicebenchError
from devicebench.estimate import fit_cache
from devicebench.estimate.roofline import (
    KERNEL_CLASSES,
    Efficiency,
    Fitter,
    Point,
    PrecisionError,
    Resolved,
    StepShape,
    Unscored,
    run_precision,
)
from devicebench.estimate.validation import SCHEMES, Interval, held_out, kind_interval
from devicebench.results.datasheets import Datasheet, catalog_entry, datasheet_for
from devicebench.results.plausibility import run_flags
from devicebench.results.record import PublishedFigure as RecordFigure
from devicebench.results.record import published_figures
from devicebench.results.schema import Result, RunRecord
from devicebench.workloads import Workload, get_workload

PROFILED_BATCHES = (2, 4)  # a record row's step comes from profiles at these two batch sizes (StepShape.at_batch)
COMMITTED_RESULTS = Path(__file__).resolve().parents[3] / "results"  # devicebench's own runs, in a checkout


@dataclass(frozen=True)
class SeedFigure:
    """A seed's throughput on a GPU the post names, as SEEDS.md records it."""

    workload: str
    target: str  # the catalog key of the GPU
    samples_per_s: float
    busy: float | None  # the GPU utilisation the post gave, as a fraction: then the GPU's busy time is the point
    source: str
    overrides: dict[str, Any] = field(default_factory=dict)  # hyperparameters the figure had beyond the defaults
    caveat: str = ""


TENSORFLOW = "TensorFlow/Keras, not PyTorch: other kernels and another per-step overhead"
V100_FORM = "the post names a Tesla V100, not which form: the SXM2 part is assumed (the PCIe card: 11% less FP32)"
SEED_FIGURES = (  # only figures where the GPU itself set the pace: saturated, or with nothing else to wait on
    SeedFigure(
        "catdog-deep",
        "v100-sxm2",
        425.0,
        1.0,
        "S3: GPU 100% busy at about the improved net's 425 images/s",
        caveat=f"{TENSORFLOW}; {V100_FORM}; 'about the same speed' read as 425 images/s",
    ),
    SeedFigure(
        "cifar100-mlp",
        "t4",
        100 * 50_000 / 343.0,
        None,
        "S4: model creation and 100 epochs of 50,000 "
        "images in 5 min 43 s on a Tesla T4 (Azure NC4as T4 v3), the data in memory",
        caveat=f"{TENSORFLOW}; model creation inside the time",
    ),
)
HOST_BOUND = (
    "the GPU was {busy} busy, so the post's host (its input pipeline and framework, whose speed is not "
    "known) set the pace; a GPU's utilisation counts a moment busy when any kernel runs, so it does not "
    "give the kernels' time either"
)
UNSCORED = (
    Unscored("cifar10-cnn on the V100, batch 512", "S3: 15,000-17,000 examples/s", HOST_BOUND.format(busy="about 45%")),
    Unscored("catdog-improved on the V100", "S3: 425 images/s with augmentation", HOST_BOUND.format(busy="about 50%")),
    Unscored(
        "catdog-improved on the V100, no augmentation",
        "S3: 533 images/s",
        "no GPU utilisation given, and the post's input pipeline bounded the same network at 425 images/s",
    ),
    Unscored(
        "catdog-hires on the V100",
        "S3: 333 images/s",
        "no GPU utilisation given, and the post's input pipeline bounded its smaller sibling",
    ),
    Unscored(
        "mnist-cnn2 and mnist-cnn4 on the GeForce GTX 860M",
        "S1: about 8x an 8-thread laptop CPU",
        "a ratio to a CPU the post does not name: no throughput to predict",
    ),
    Unscored("cifar10-mlp on the post's GPU", "S2: 9 s a steady epoch", "the GPU is not named"),
    Unscored(
        "a text classifier on Colab's GPU", "S5: 14.4 s", "neither the GPU (a K80 or a T4) nor the model is named"
    ),
    Unscored("boosted trees on 4 GPUs", "S5: 23.2x", "not a torch model, and the GPUs are not named"),
)


class EstimateError(DevicebenchError, ValueError):
    """An estimate that cannot be made; the message says why."""


def shape_of(workload: Workload, hyperparameters: dict[str, Any]) -> StepShape:
    try:
        profile = profile_training_step(workload, hyperparameters)
    except ProfileError as error:
        raise EstimateError(str(error)) from None
    if profile is None:
        raise EstimateError(f"{workload.name} is not a torch model: it has no kernels to estimate")
    return StepShape.of(profile)


@functools.cache
def _profiled_pair(name: str, settings: tuple[tuple[str, Any], ...]) -> tuple[StepShape, StepShape]:
    workload = get_workload(name)
    hyperparameters = dict(settings)
    small, large = (shape_of(workload, {**hyperparameters, "batch_size": batch}) for batch in PROFILED_BATCHES)
    return small, large


def shape_at(workload: Workload, hyperparameters: dict[str, Any]) -> StepShape:
    """The step of a registered workload at any batch size from two profiles at PROFILED_BATCHES (made once a
    process): its kernels' FLOPs and bytes are a fixed part and a part per sample."""
    settings = tuple(sorted((key, value) for key, value in hyperparameters.items() if key != "batch_size"))
    small, large = _profiled_pair(workload.name, settings)
    return small.at_batch(large, int(hyperparameters["batch_size"]))


def record_precision(figure: RecordFigure, sheet: Datasheet) -> KernelPrecision:
    """The precision a record row ran its matrix kernels at. "fp32" with TF32 not stated on a GPU that has TF32 is
    taken as TF32: PyTorch runs convolutions in TF32 unless told not to, and NVIDIA's containers, which the
    record's PyTorch figures come from, turn it on for matrix products as well."""
    if figure.precision.startswith("amp"):
        return narrowed(figure.precision, KERNEL_PRECISIONS)  # the record's reader checked it is one
    if figure.precision == "tf32" or figure.tf32 == "on":
        return "tf32"
    if figure.tf32 == "n/a" and sheet.tf32_tflops is not None:
        return "tf32"
    return "fp32"


def record_points(figures: Sequence[RecordFigure] | None = None) -> tuple[list[Point], list[Unscored]]:
    """A point per single-GPU row of the public record whose workload devicebench can profile; the rest listed with
    why. A row's throughput is its step: its batch per GPU over its samples per second."""
    points, unscored = [], []
    for figure in published_figures() if figures is None else figures:
        label = (
            f"{figure.workload} on the {catalog_entry(figure.gpu).product}, {figure.precision}, "
            f"batch {figure.batch_per_gpu}" + (f" x {figure.sequence_length}" if figure.sequence_length else "")
        )
        point = _record_point(figure, label)
        if isinstance(point, str):
            unscored.append(Unscored(label, figure.source, point))
        else:
            points.append(point)
    return points, unscored


def _record_point(figure: RecordFigure, label: str) -> Point | str:
    if figure.gpus != 1:
        return f"measured on {figure.gpus} GPUs: their communication is not modelled"
    workload = registered(figure.workload)
    if workload is None:
        return "not a devicebench workload"
    sheet = catalog_entry(figure.gpu)
    hyperparameters = {**workload.defaults, "batch_size": figure.batch_per_gpu}
    if figure.sequence_length is not None and "sequence_length" in hyperparameters:
        hyperparameters["sequence_length"] = figure.sequence_length
    samples_per_s = figure.per_gpu_throughput
    if figure.unit == "tokens/s":
        if workload.tokens_per_sample is None:
            return "a figure in tokens/s for a workload whose samples are not counted in tokens"
        samples_per_s /= workload.tokens_per_sample(hyperparameters)
    precision = record_precision(figure, sheet)
    try:
        resolved = Resolved.of(shape_at(workload, hyperparameters), sheet, precision)
    except (PrecisionError, EstimateError) as error:
        return str(error)
    caveat = "" if figure.framework == "PyTorch" else f"{figure.framework}, not PyTorch: other kernels"
    return Point(
        label=label,
        source=figure.source,
        workload=workload.name,
        sheet=sheet,
        precision=precision,
        resolved=resolved,
        batch_size=figure.batch_per_gpu,
        observed_s=figure.batch_per_gpu / samples_per_s,
        kind="step",
        caveat=caveat,
        model_kind=model_kind(workload),
    )


def seed_points() -> list[Point]:
    """The seeds' own published figures on named GPUs (SEEDS.md)."""
    points = []
    for figure in SEED_FIGURES:
        workload = get_workload(figure.workload)
        shape = shape_of(workload, {**workload.defaults, **figure.overrides})
        step_s = shape.batch_size / figure.samples_per_s
        batch = f", batch {shape.batch_size}" if figure.overrides.get("batch_size") else ""
        sheet = catalog_entry(figure.target)
        points.append(
            Point(
                label=f"{figure.workload} on the {sheet.product}{batch}",
                source=figure.source,
                workload=workload.name,
                sheet=sheet,
                precision="fp32",
                resolved=Resolved.of(shape, sheet, "fp32"),
                batch_size=shape.batch_size,
                caveat=figure.caveat,
                observed_s=step_s * (figure.busy or 1.0),
                kind="step" if figure.busy is None else "busy",
                model_kind=model_kind(workload),
            )
        )
    return points


def measured_points(results: Iterable[Result], where: str) -> tuple[list[Point], list[Unscored]]:
    """A point per kind of finished single-process run on a catalogued GPU whose figures are plausible (one model,
    settings, GPU and precision): the median of its runs' median steady steps, waits for data left out, so that
    many copies of one run weigh as one point and cost one profile. Runs that cannot be one are listed with why. A
    stored run may come from anyone's export (`devicebench import`): every figure and setting a point is made of is
    checked before it is used, so that no row can move, crash or swell every later estimate."""
    alike: dict[tuple[object, ...], list[Point]] = {}
    unscored = []
    shapes: dict[tuple[object, ...], StepShape | str] = {}  # one profile a kind of run
    for result in results:
        for run in result.runs:
            if not run.device.startswith("cuda") or run.status != "ok" or not run.steady_epochs:
                continue
            label = f"{run.workload} on {run.device_name} ({where}, run {run.run_id[:8]})"
            point = _point_or_why(run, label, where, shapes)
            if isinstance(point, str):
                unscored.append(Unscored(label, where, point))
            else:
                kind = (point.workload, point.sheet.key, point.precision, repr(run.settings.hyperparameters))
                alike.setdefault((*kind, point.resolved.copy_s), []).append(point)
    return [_one_point(runs) for runs in alike.values()], unscored


def _one_point(runs: list[Point]) -> Point:
    if len(runs) == 1:
        return runs[0]
    return replace(
        runs[0],
        label=f"{runs[0].label} and {len(runs) - 1} more like it",
        observed_s=statistics.median(point.observed_s for point in runs),
    )


def _point_or_why(
    run: RunRecord, label: str, where: str, shapes: dict[tuple[object, ...], StepShape | str] | None = None
) -> Point | str:
    """The point `run` makes, or why it makes none; `shapes`: the steps profiled so far, by workload, settings and
    precision."""
    sheet = datasheet_for(run.device_name)
    if sheet is None:
        return "the GPU is not in the datasheet catalog"
    if sheet.fp32_tflops is None:
        return f"no citable source gives the {sheet.product}'s compute peaks"
    workload = registered(run.workload)
    if workload is None or workload.trainer is not None:
        return "not a registered torch workload (a model of your own cannot be rebuilt from its record)"
    if run.settings.world_size != 1:
        return f"trained in {run.settings.world_size} processes: their communication is not modelled"
    if run.settings.compiled:
        return "compiled: torch.compile fuses kernels, and the roofline counts them as eager mode launches them"
    precision = run_precision(run.settings)
    if precision not in KERNEL_PRECISIONS:
        return precision  # why it cannot be told
    steps = steady_steps_s(run)
    if isinstance(steps, str):
        return steps
    if run.plausibility_flags:  # flagged when it ran: by figures (a merged rank's) its record may no longer hold
        return f"flagged {run.plausibility_flags}: {run.plausibility_note}"
    try:
        hyperparameters = workload.typed_hyperparameters(run.settings.hyperparameters)
        if hyperparameters["batch_size"] < 1:
            raise ValueError(f"batch_size is {hyperparameters['batch_size']}, not a whole number of at least 1")
        parameters = workload.parameter_count(hyperparameters)  # its size bounds first: nothing is built past them
    except (ValueError, TypeError, KeyError, RuntimeError) as error:  # ModelTooLarge included
        return f"its settings cannot rebuild {workload.name}: {error}"
    shapes = {} if shapes is None else shapes
    profiled = (workload.name, repr(sorted(hyperparameters.items())), precision)
    if profiled not in shapes:  # a refusal is kept too: a thousand copies of a bad run cost one profile
        try:
            shapes[profiled] = precise_shape(workload, hyperparameters, narrowed(precision, KERNEL_PRECISIONS))
        except (ValueError, TypeError, KeyError, RuntimeError) as error:  # EstimateError included
            shapes[profiled] = f"its settings cannot rebuild {workload.name}: {error}"
    shape = shapes[profiled]
    if isinstance(shape, str):
        return shape
    # the very rates the point is made of, with the FLOPs and weights devicebench counts, not those the record gives
    # (a forged row may leave them out, or give a samples/s its times do not)
    counted = replace(
        run,
        flops_per_sample=float(shape.flops.sum()) / shape.batch_size,
        parameter_count=parameters,
        epochs=[
            replace(epoch, samples_per_s=shape.batch_size / step_s) for epoch, step_s in zip(run.steady_epochs, steps)
        ],
    )
    flags = run_flags(run) or run_flags(counted)  # the row's own flags first: those compare shows beside it
    if flags:
        return "implausible: " + "; ".join(f"{flag.code}: {flag.text}" for flag in flags)
    resolved = Resolved.of(shape, sheet, narrowed(precision, KERNEL_PRECISIONS)).as_ran(run.settings)
    return Point(
        label=label,
        source=where,
        workload=workload.name,
        sheet=sheet,
        precision=narrowed(precision, KERNEL_PRECISIONS),
        resolved=resolved,
        batch_size=shape.batch_size,
        observed_s=statistics.median(steps),
        kind="step",
        host_launches=True,
        model_kind=model_kind(workload),
    )


def precise_shape(workload: Workload, hyperparameters: dict[str, Any], precision: KernelPrecision) -> StepShape | str:
    """The step profiled at the run's batch, or why its precision cannot be one."""
    shape = shape_of(workload, hyperparameters)
    if precision == "amp-bf16" and (shape.classes == KERNEL_CLASSES.index("recurrent")).any():
        # engine/tuning_applied.TunedForward keeps recurrent layers in fp32 under bf16 autocast: two precisions at once
        return (
            "bf16 autocast with recurrent layers kept in fp32: the roofline runs every matrix kernel at one precision"
        )
    return shape


def median_step_s(run: RunRecord) -> float | str:
    """The median steady step in seconds, waits for data left out, as a fitted point's step is measured; or why
    an epoch cannot be timed per step."""
    steps = steady_steps_s(run)
    return steps if isinstance(steps, str) else statistics.median(steps)


def steady_steps_s(run: RunRecord) -> list[float] | str:
    """Each steady epoch's seconds a step, waits for data left out, as a point's step is measured; or why an epoch
    cannot be timed per step."""
    steps = []
    for epoch in run.steady_epochs:
        computing_s = epoch.train_time_s - (epoch.input_wait_s or 0.0)
        if epoch.steps < 1 or not computing_s > 0:
            return (
                f"epoch {epoch.epoch} cannot be timed per step: {epoch.steps} steps, {epoch.train_time_s:g} s "
                f"of training of which {epoch.input_wait_s or 0.0:g} s waiting for data"
            )
        steps.append(computing_s / epoch.steps)
    return steps


def model_kind(workload: Workload) -> str:
    """Whose held-out errors a model's interval takes: "small" for the seeds' models (whose step on a fast GPU is
    mostly the host's), "reference" for the rest (ResNet, BERT, GPT-2, GNMT: the GPU's)."""
    return "small" if workload.seed is not None else "reference"


def registered(name: str) -> Workload | None:
    """The registered workload of that name, or None."""
    try:
        return get_workload(name)
    except KeyError:
        return None


def committed_results(folder: Path = COMMITTED_RESULTS) -> list[Result]:
    """devicebench's own runs under results/ (a checkout's; an installed package has none): each JSON a run's
    export, or a benchmark's (benchmarks/gpu_validation.py) that holds each part's runs as `parts[].result`."""
    results = []
    for path in sorted(folder.rglob("*.json")) if folder.is_dir() else []:
        try:
            document = json.loads(path.read_text())
        except (ValueError, OSError):
            continue
        parts = document.get("parts") if isinstance(document, dict) else None
        embedded = [part.get("result") for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []
        for candidate in [document, *embedded]:
            try:
                results.append(Result.from_dict(candidate))
            except (ValueError, KeyError, TypeError):  # a benchmark's own figures, not a run's session
                continue
    return results


@dataclass
class RooflineFit:
    """The fitted efficiencies, the points behind them, and their held-out errors under each validation scheme,
    which give the intervals."""

    points: list[Point]
    unscored: list[Unscored]
    fitter: Fitter
    efficiency: Efficiency
    _held_out_s: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # by scheme, made once

    @classmethod
    def of(cls, points: list[Point], unscored: list[Unscored]) -> RooflineFit:
        if not points:
            raise EstimateError("no measured GPU point to fit the roofline on")
        fitter = Fitter(points)
        return cls(points, unscored, fitter, fitter.fit())

    @classmethod
    def kept(cls, cached: fit_cache.CachedFit) -> RooflineFit:
        """The fit as the cache kept it: nothing is profiled or fitted again."""
        return cls(cached.points, cached.unscored, Fitter(cached.points), cached.efficiency, dict(cached.held_out_s))

    def to_cache(self) -> fit_cache.CachedFit:
        """The fit with every scheme's held-out predictions made, as the cache keeps it."""
        held_out = {scheme: self.held_out_s(scheme) for scheme in SCHEMES}
        return fit_cache.CachedFit(self.points, self.unscored, self.efficiency, held_out)

    @functools.cached_property
    def pinned(self) -> dict[str, int]:
        return self.fitter.pinned(self.efficiency)

    def held_out_s(self, scheme: str) -> np.ndarray:
        """Every point's seconds, each predicted by a fit made without its group under `scheme`."""
        if scheme not in self._held_out_s:
            self._held_out_s[scheme] = held_out(self.fitter, scheme)
        return self._held_out_s[scheme]

    def log_errors(self, scheme: str) -> np.ndarray:
        """log(measured / predicted) of every point, each predicted by a fit made without its group."""
        return np.log(np.array([point.observed_s for point in self.points]) / self.held_out_s(scheme))

    def scheme_for(self, workload: str, sheet: Datasheet) -> str:
        """The held-out errors that answer like the question: a model no point is of is like a model left out; a
        GPU no point ran on, like a GPU left out; a model and a GPU both in the points, like a point left out."""
        if workload not in {point.workload for point in self.points}:
            return "leave one model out"
        if sheet.key not in {point.sheet.key for point in self.points}:
            return "leave one GPU out"
        return "leave one out"

    def interval_for(self, workload: str, sheet: Datasheet, level: float) -> Interval | None:
        """The interval from the held-out errors of the models of the same kind (model_kind), where they are at
        least KIND_POINTS; otherwise, and for a model of your own, from every point's."""
        scheme = self.scheme_for(workload, sheet)
        known = registered(workload)
        kinds = np.array([point.model_kind for point in self.points])
        kind = None if known is None else model_kind(known)
        return kind_interval(self.log_errors(scheme), kinds, kind, level, scheme)


def fit_roofline(stored: Sequence[Result]) -> RooflineFit:
    """Fitted on the public record, the seeds' published figures, the committed runs and `stored` (the user's
    database); kept on disk (estimate/fit_cache.py) under a key of all of them, and read back from there while none
    of them changes."""
    figures = published_figures()
    committed = committed_results()
    key = fit_cache.fit_key(figures, SEED_FIGURES, [*committed, *stored])
    cached = fit_cache.load(key)
    if cached is not None:
        return RooflineFit.kept(cached)
    recorded, recorded_unscored = record_points(figures)
    committed_points, committed_unscored = measured_points(committed, "committed under results/")
    yours, yours_unscored = measured_points(stored, "your database")
    fitted = RooflineFit.of(
        recorded + seed_points() + committed_points + yours,
        recorded_unscored + list(UNSCORED) + committed_unscored + yours_unscored,
    )
    fit_cache.save(key, fitted.to_cache())
    return fitted
