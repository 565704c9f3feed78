"""`devicebench estimate`: how fast a workload would train on GPUs that are not here, and how sure that is.

What is measured here: the workload's training step, kernel by kernel, on the meta device (engine/opcount.py: FLOPs,
bytes, launches, the batch's bytes), and on this machine's cores the input pipeline's time per batch and the CPU's
own steady speed, the baseline of every speedup. What comes from elsewhere: each GPU's datasheet figures and the
cores of the machines that rent it (results/datasheets.py), and the points the roofline's efficiencies are fitted on
(results/roofline.py): every single-GPU row of the public record (results/record/), the seeds' published figures on
named GPUs, GPU runs committed under results/, and every GPU run in the user's database.

    devicebench estimate resnet50 --on v100-sxm2,a100-80gb,h100-sxm --batch-size 128
    devicebench estimate --validate
"""

from __future__ import annotations

import functools
import math
import os
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from devicebench.data.pipeline import batches_for
from devicebench.engine.opcount import ProfileError, profile_training_step
from devicebench.engine.timing import Stopwatch
from devicebench.errors import DevicebenchError
from devicebench.planning import Job
from devicebench.results.datasheets import Datasheet, catalog_entry, datasheet_for
from devicebench.results.plausibility import run_flags
from devicebench.results.record import PublishedFigure as RecordFigure
from devicebench.results.record import published_figures
from devicebench.results.roofline import (
    Efficiency,
    Fitter,
    Interval,
    Point,
    Precision,
    PrecisionError,
    Resolved,
    StepShape,
    StepTime,
    Unscored,
    conformal,
    held_out,
    predict,
)
from devicebench.results.schema import Result, RunRecord
from devicebench.runner import load_data
from devicebench.workloads import Workload, get_workload

BATCHES_TIMED = 6  # input-pipeline batches timed, after one that starts the workers
PROFILED_BATCHES = (2, 4)  # a record row's step comes from profiles at these two batch sizes (StepShape.at_batch)
COMMITTED_RESULTS = Path(__file__).resolve().parents[2] / "results"  # devicebench's own runs, in a checkout


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
    SeedFigure("catdog-deep", "v100-sxm2", 425.0, 1.0, "S3: GPU 100% busy at about the improved net's 425 "
                    "images/s", caveat=f"{TENSORFLOW}; {V100_FORM}; 'about the same speed' read as 425 images/s"),
    SeedFigure("cifar100-mlp", "t4", 100 * 50_000 / 343.0, None, "S4: model creation and 100 epochs of 50,000 "
                    "images in 5 min 43 s on a Tesla T4 (Azure NC4as T4 v3), the data in memory",
                    caveat=f"{TENSORFLOW}; model creation inside the time"),
)
HOST_BOUND = ("the GPU was {busy} busy, so the post's host (its input pipeline and framework, whose speed is not "
              "known) set the pace; a GPU's utilisation counts a moment busy when any kernel runs, so it does not "
              "give the kernels' time either")
UNSCORED = (
    Unscored("cifar10-cnn on the V100, batch 512", "S3: 15,000-17,000 examples/s",
             HOST_BOUND.format(busy="about 45%")),
    Unscored("catdog-improved on the V100", "S3: 425 images/s with augmentation", HOST_BOUND.format(busy="about 50%")),
    Unscored("catdog-improved on the V100, no augmentation", "S3: 533 images/s",
             "no GPU utilisation given, and the post's input pipeline bounded the same network at 425 images/s"),
    Unscored("catdog-hires on the V100", "S3: 333 images/s",
             "no GPU utilisation given, and the post's input pipeline bounded its smaller sibling"),
    Unscored("mnist-cnn2 and mnist-cnn4 on the GeForce GTX 860M", "S1: about 8x an 8-thread laptop CPU",
             "a ratio to a CPU the post does not name: no throughput to predict"),
    Unscored("cifar10-mlp on the post's GPU", "S2: 9 s a steady epoch", "the GPU is not named"),
    Unscored("a text classifier on Colab's GPU", "S5: 14.4 s",
             "neither the GPU (a K80 or a T4) nor the model is named"),
    Unscored("boosted trees on 4 GPUs", "S5: 23.2x", "not a torch model, and the GPUs are not named"),
)


class EstimateError(DevicebenchError, ValueError):
    """An estimate that cannot be made; the message says why."""


@dataclass(frozen=True)
class Baseline:
    """What the device here measured: the speed every speedup is over."""

    device: str  # "cpu (AMD EPYC 7B13)"
    samples_per_s: tuple[float, float, float]  # median, lowest, highest over the steady epochs
    data_source: str
    batch_size: int | None = None  # what it trained at, when not the batch estimated (a budget made it smaller)


@dataclass(frozen=True)
class Estimate:
    """One workload on one GPU of the catalog: predicted, never measured."""

    workload: str
    target: Datasheet
    batch_size: int
    step: StepTime
    interval: Interval | None
    steps_per_epoch: int
    epochs: int
    baseline: Baseline | None
    precision: Precision = "fp32"  # what its matrix kernels were estimated at
    host_cores: int | None = None  # the target host's cores the input pipeline was scaled to; None: this machine's
    price_per_hour: float | None = None
    profile_notes: tuple[str, ...] = ()  # how its step was profiled, when not as planned (random inputs on the CPU)

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.step.seconds

    @property
    def samples_per_s_range(self) -> tuple[float, float] | None:
        if self.interval is None:
            return None
        low_s, high_s = self.interval.seconds(self.step.seconds)
        return self.batch_size / high_s, self.batch_size / low_s

    @property
    def epoch_s(self) -> float:
        return self.steps_per_epoch * self.step.seconds

    @property
    def epoch_s_range(self) -> tuple[float, float] | None:
        if self.interval is None:
            return None
        low_s, high_s = self.interval.seconds(self.step.seconds)
        return self.steps_per_epoch * low_s, self.steps_per_epoch * high_s

    @property
    def speedup(self) -> float | None:
        return self.samples_per_s / self.baseline.samples_per_s[0] if self.baseline else None

    @property
    def speedup_range(self) -> tuple[float, float] | None:
        """The estimate's interval over the baseline's spread: its slowest over the CPU's fastest epoch, and so on."""
        rates = self.samples_per_s_range
        if rates is None or self.baseline is None:
            return None
        _, slowest, fastest = self.baseline.samples_per_s
        return rates[0] / fastest, rates[1] / slowest

    @property
    def cost_per_epoch(self) -> float | None:
        return None if self.price_per_hour is None else self.epoch_s / 3600 * self.price_per_hour

    @property
    def cost_per_run(self) -> float | None:
        return None if self.cost_per_epoch is None else self.cost_per_epoch * self.epochs

    def to_dict(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "target": self.target.key, "target_product": self.target.product,
            "batch_size": self.batch_size, "steps_per_epoch": self.steps_per_epoch, "epochs": self.epochs,
            "samples_per_s": self.samples_per_s, "samples_per_s_range": self.samples_per_s_range,
            "step_time_s": self.step.seconds, "epoch_time_s": self.epoch_s, "epoch_time_s_range": self.epoch_s_range,
            "bound": self.step.bound,
            "terms_s": {"compute": self.step.compute_s, "memory": self.step.memory_s, "copy": self.step.copy_s,
                        "launches": self.step.launch_s, "input": self.step.input_s},
            "serial_input": self.step.serial_input,
            "baseline": None if self.baseline is None else {
                "device": self.baseline.device, "samples_per_s": self.baseline.samples_per_s[0],
                "samples_per_s_min": self.baseline.samples_per_s[1],
                "samples_per_s_max": self.baseline.samples_per_s[2], "data_source": self.baseline.data_source},
            "speedup": self.speedup, "speedup_range": self.speedup_range,
            "precision": self.precision, "host_cores": self.host_cores,
            "interval": None if self.interval is None else {
                "level": self.interval.level, "low_ratio": self.interval.low_ratio,
                "high_ratio": self.interval.high_ratio, "points": self.interval.points,
                "scheme": self.interval.scheme},
            "price_per_hour": self.price_per_hour, "cost_per_epoch": self.cost_per_epoch,
            "cost_per_run": self.cost_per_run, "datasheet_source": self.target.source,
            "profile_notes": list(self.profile_notes),
        }


# --- the points the efficiencies are fitted on ---------------------------------------------------------------


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
    return tuple(shape_of(workload, {**hyperparameters, "batch_size": batch})  # type: ignore[return-value]
                 for batch in PROFILED_BATCHES)


def shape_at(workload: Workload, hyperparameters: dict[str, Any]) -> StepShape:
    """The step of a registered workload at any batch size from two profiles at PROFILED_BATCHES (made once a
    process): its kernels' FLOPs and bytes are a fixed part and a part per sample."""
    settings = tuple(sorted((key, value) for key, value in hyperparameters.items() if key != "batch_size"))
    small, large = _profiled_pair(workload.name, settings)
    return small.at_batch(large, int(hyperparameters["batch_size"]))


def record_precision(figure: RecordFigure, sheet: Datasheet) -> Precision:
    """The precision a record row ran its matrix kernels at. "fp32" with TF32 not stated on a GPU that has TF32 is
    taken as TF32: PyTorch runs convolutions in TF32 unless told not to, and NVIDIA's containers, which the
    record's PyTorch figures come from, turn it on for matrix products as well."""
    if figure.precision.startswith("amp"):
        return figure.precision  # type: ignore[return-value]
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
        label = f"{figure.workload} on the {catalog_entry(figure.gpu).product}, {figure.precision}, " \
                f"batch {figure.batch_per_gpu}" + (f" x {figure.sequence_length}" if figure.sequence_length else "")
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
    return Point(label=label, source=figure.source, workload=workload.name, sheet=sheet, precision=precision,
                 resolved=resolved, batch_size=figure.batch_per_gpu,
                 observed_s=figure.batch_per_gpu / samples_per_s, kind="step", caveat=caveat)


def seed_points() -> list[Point]:
    """The seeds' own published figures on named GPUs (SEEDS.md)."""
    points = []
    for figure in SEED_FIGURES:
        workload = get_workload(figure.workload)
        shape = shape_of(workload, {**workload.defaults, **figure.overrides})
        step_s = shape.batch_size / figure.samples_per_s
        batch = f", batch {shape.batch_size}" if figure.overrides.get("batch_size") else ""
        sheet = catalog_entry(figure.target)
        points.append(Point(
            label=f"{figure.workload} on the {sheet.product}{batch}", source=figure.source, workload=workload.name,
            sheet=sheet, precision="fp32", resolved=Resolved.of(shape, sheet, "fp32"), batch_size=shape.batch_size,
            caveat=figure.caveat, observed_s=step_s * (figure.busy or 1.0), kind="step" if figure.busy is None else "busy"))
    return points


def measured_points(results: Iterable[Result], where: str) -> tuple[list[Point], list[Unscored]]:
    """A point per finished single-process seed-mode run on a catalogued GPU whose figures are plausible: the
    median steady step, waits for data left out. Runs that cannot be one are listed with why. A stored run may
    come from anyone's export (`devicebench import`): every figure and setting a point is made of is checked
    before it is used, so that no row can move, crash or swell every later estimate."""
    points, unscored = [], []
    for result in results:
        for run in result.runs:
            if not run.device.startswith("cuda") or run.status != "ok" or not run.steady_epochs:
                continue
            label = f"{run.workload} on {run.device_name} ({where}, run {run.run_id[:8]})"
            point = _point_or_why(run, label, where)
            if isinstance(point, str):
                unscored.append(Unscored(label, where, point))
            else:
                points.append(point)
    return points, unscored


def _point_or_why(run: RunRecord, label: str, where: str) -> Point | str:
    """The point `run` makes, or why it makes none."""
    sheet = datasheet_for(run.device_name)
    if sheet is None:
        return "the GPU is not in the datasheet catalog"
    if sheet.fp32_tflops is None:
        return f"no citable source gives the {sheet.product}'s compute peaks"
    workload = registered(run.workload)
    if workload is None or workload.trainer is not None:
        return "not a registered torch workload (a model of your own cannot be rebuilt from its record)"
    if run.settings.mode != "seed" or run.settings.world_size != 1:
        return "tuned or multi-process: a point is one process in seed mode's fp32, whose precision is known"
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
        shape = shape_of(workload, hyperparameters)
    except (ValueError, TypeError, KeyError, RuntimeError) as error:  # ModelTooLarge and EstimateError included
        return f"its settings cannot rebuild {workload.name}: {error}"
    # the very rates the point is made of, with the FLOPs and weights devicebench counts, not those the record gives
    # (a forged row may leave them out, or give a samples/s its times do not)
    counted = replace(run, flops_per_sample=float(shape.flops.sum()) / shape.batch_size, parameter_count=parameters,
                      epochs=[replace(epoch, samples_per_s=shape.batch_size / step_s)
                              for epoch, step_s in zip(run.steady_epochs, steps)])
    flags = run_flags(run) or run_flags(counted)  # the row's own flags first: those compare shows beside it
    if flags:
        return "implausible: " + "; ".join(f"{flag.code}: {flag.text}" for flag in flags)
    return Point(label=label, source=where, workload=workload.name, sheet=sheet, precision="fp32",
                 resolved=Resolved.of(shape, sheet, "fp32"), batch_size=shape.batch_size,
                 observed_s=statistics.median(steps), kind="step")


def steady_steps_s(run: RunRecord) -> list[float] | str:
    """Each steady epoch's seconds a step, waits for data left out, as a point's step is measured; or why an epoch
    cannot be timed per step."""
    steps = []
    for epoch in run.steady_epochs:
        computing_s = epoch.train_time_s - (epoch.input_wait_s or 0.0)
        if epoch.steps < 1 or not computing_s > 0:
            return (f"epoch {epoch.epoch} cannot be timed per step: {epoch.steps} steps, {epoch.train_time_s:g} s "
                    f"of training of which {epoch.input_wait_s or 0.0:g} s waiting for data")
        steps.append(computing_s / epoch.steps)
    return steps


def registered(name: str) -> Workload | None:
    """The registered workload of that name, or None."""
    try:
        return get_workload(name)
    except KeyError:
        return None


def committed_results(folder: Path = COMMITTED_RESULTS) -> list[Result]:
    """devicebench's own runs under results/ (a checkout's; an installed package has none)."""
    results = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            results.append(Result.read_json(path))
        except (ValueError, KeyError, TypeError, OSError):  # a benchmark's own JSON, not a run's export
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

    @classmethod
    def of(cls, points: list[Point], unscored: list[Unscored]) -> RooflineFit:
        if not points:
            raise EstimateError("no measured GPU point to fit the roofline on")
        fitter = Fitter(points)
        return cls(points, unscored, fitter, fitter.fit())

    @functools.cached_property
    def pinned(self) -> dict[str, int]:
        return self.fitter.pinned(self.efficiency)

    def log_errors(self, scheme: str) -> np.ndarray:
        """log(measured / predicted) of every point, each predicted by a fit made without its group."""
        if scheme not in self._log_errors:
            predicted = held_out(self.fitter, scheme)
            self._log_errors[scheme] = np.log(np.array([point.observed_s for point in self.points]) / predicted)
        return self._log_errors[scheme]

    _log_errors: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False)

    def scheme_for(self, workload: str, sheet: Datasheet) -> str:
        """The held-out errors that answer like the question: a model no point is of is like a model left out; a
        GPU no point ran on, like a GPU left out; a model and a GPU both in the points, like a point left out."""
        if workload not in {point.workload for point in self.points}:
            return "leave one model out"
        if sheet.key not in {point.sheet.key for point in self.points}:
            return "leave one GPU out"
        return "leave one out"

    def interval_for(self, workload: str, sheet: Datasheet, level: float) -> Interval | None:
        scheme = self.scheme_for(workload, sheet)
        return conformal(self.log_errors(scheme), level, scheme)


def fit_roofline(stored: Sequence[Result]) -> RooflineFit:
    """Fitted on the public record, the seeds' published figures, the committed runs and `stored` (the user's
    database)."""
    recorded, recorded_unscored = record_points()
    committed, committed_unscored = measured_points(committed_results(), "committed under results/")
    yours, yours_unscored = measured_points(stored, "your database")
    return RooflineFit.of(recorded + seed_points() + committed + yours,
                          recorded_unscored + list(UNSCORED) + committed_unscored + yours_unscored)


# --- what is measured here -----------------------------------------------------------------------------------


def input_seconds_per_batch(job: Job, run: RunRecord) -> tuple[float, int]:
    """(seconds the input pipeline takes per batch on this machine, training batches per epoch), with the workers
    and batch size `run` trained with. The first batch, which starts the workers, is not timed."""
    dataset = load_data(job)
    if isinstance(dataset, Exception):
        raise EstimateError(f"{job.workload.name}: {dataset}")
    settings = run.settings
    preprocessing = job.workload.build_preprocessing(settings.hyperparameters)
    device = torch.device("cpu")
    train, test = batches_for(dataset, job.workload.image_shape, preprocessing, settings.batch_size, device,
                              workers=settings.workers, seed=job.seed)
    try:
        timed = min(BATCHES_TIMED, len(train) - 1)
        if timed < 1:
            return 0.0, len(train)
        watch = Stopwatch(device)
        batches = train.epoch(0, timed + 1)
        next(batches)
        started = watch.now()
        for _ in batches:
            pass
        return (watch.now() - started) / timed, len(train)
    finally:
        for batches in (train, test):
            close = getattr(batches, "close", None)
            if close is not None:
                close()


def baseline_of(run: RunRecord, data_source: str) -> Baseline | None:
    rates = [epoch.samples_per_s for epoch in run.steady_epochs]
    if run.status != "ok" or not rates:
        return None
    return Baseline(f"{run.device} ({run.device_name})", (statistics.median(rates), min(rates), max(rates)),
                    data_source, run.settings.batch_size)


def scaled_input_s(input_s: float, workers: int, cores_here: int, host_cores: int | None) -> float:
    """The input pipeline's seconds per batch on a host of `host_cores` cores, from `input_s` timed here with
    `workers` loader processes: on a rented host the loader is given a worker per core (`--workers`), and workers
    keep pace with the cores they run on. A pipeline without workers runs on one core there as here. None: the host
    is this machine."""
    if host_cores is None or workers == 0:
        return input_s
    return input_s * min(workers, cores_here) / host_cores


def precisions_for(mode: str, sheet: Datasheet) -> list[Precision]:
    """What `mode` runs its matrix kernels at on `sheet`: seed mode fp32 on the CUDA cores; tuned mode TF32 where
    the GPU has it, and bf16 autocast where the GPU computes bf16, whichever its trial finds faster."""
    if mode == "seed":
        return ["fp32"]
    fast: list[Precision] = ["tf32" if sheet.tf32_tflops is not None else "fp32"]
    return fast + (["amp-bf16"] if sheet.bf16_tflops is not None else [])


def estimates_for(job: Job, run: RunRecord, targets: Sequence[Datasheet], fitted: RooflineFit,
                  prices: dict[str, float], *, mode: str = "seed", precision: Precision | None = None,
                  host_cores: dict[str, int | None] | None = None, level: float = 0.8) -> list[Estimate]:
    """Every target for the workload `job` trained as `run` on this machine's CPU. `host_cores`: the cores of each
    target's host by catalog key (missing or None: this machine's)."""
    hyperparameters = job.hyperparameters  # as asked: a budget may have trained this machine at a smaller batch
    shape = shape_of(job.workload, hyperparameters)
    timed_s, timed_steps = input_seconds_per_batch(job, run)
    per_sample = shape.batch_size / max(run.settings.batch_size, 1)
    input_s = timed_s * per_sample  # the pipeline's work grows with the samples in a batch
    steps_per_epoch = math.ceil(timed_steps / per_sample)
    baseline = baseline_of(run, run.settings.data_source)
    workers = run.settings.workers
    cores_here = os.cpu_count() or 1
    estimates = []
    for target in targets:
        cores = (host_cores or {}).get(target.key)
        target_input_s = scaled_input_s(input_s, workers, cores_here, cores)
        steps = []
        for chosen in [precision] if precision is not None else precisions_for(mode, target):
            try:
                resolved = Resolved.of(shape, target, chosen)
            except PrecisionError as error:
                raise EstimateError(str(error)) from None
            steps.append((predict(resolved, fitted.efficiency, input_s=target_input_s, serial_input=workers == 0),
                          chosen))
        step, chosen = min(steps, key=lambda pair: pair[0].seconds)  # as tuned mode's trial keeps the faster
        estimates.append(Estimate(
            workload=job.workload.name, target=target, batch_size=shape.batch_size, step=step,
            interval=fitted.interval_for(job.workload.name, target, level), steps_per_epoch=steps_per_epoch,
            epochs=int(hyperparameters.get("epochs", 1)), baseline=baseline, precision=chosen, host_cores=cores,
            price_per_hour=prices.get(target.key), profile_notes=shape.notes))
    return estimates
