"""`devicebench estimate`: how fast a workload would train on GPUs that are not here, and how sure that is.

What is measured here: the workload's training step, kernel by kernel, on the meta device (engine/opcount.py: FLOPs,
bytes, launches, the batch's bytes), and on this machine's cores the input pipeline's time per batch and the CPU's
own steady speed, the baseline of every speedup. What comes from elsewhere: each GPU's datasheet figures
(results/datasheets.py) and the points the roofline's efficiencies are fitted on: the seeds' published figures on
named GPUs, GPU runs committed under results/, and every GPU run in the user's database (results/roofline.py).

    devicebench estimate cifar10-mlp --on t4,a100-80gb,h100-sxm --data synthetic
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from devicebench.data.pipeline import batches_for
from devicebench.engine.opcount import ProfileError, profile_training_step
from devicebench.engine.timing import Stopwatch
from devicebench.planning import Job
from devicebench.results.datasheets import Datasheet, catalog_entry, datasheet_for
from devicebench.results.plausibility import run_flags
from devicebench.results.roofline import (
    Efficiency,
    Fitter,
    Interval,
    Point,
    StepShape,
    StepTime,
    Unscored,
    interval_from,
    predict,
)
from devicebench.results.schema import Result, RunRecord
from devicebench.runner import load_data
from devicebench.workloads import Workload, get_workload

BATCHES_TIMED = 6  # input-pipeline batches timed, after one that starts the workers
COMMITTED_RESULTS = Path(__file__).resolve().parents[2] / "results"  # devicebench's own runs, in a checkout


@dataclass(frozen=True)
class PublishedFigure:
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
PUBLISHED_FIGURES = (  # only figures where the GPU itself set the pace: saturated, or with nothing else to wait on
    PublishedFigure("catdog-deep", "v100-sxm2", 425.0, 1.0, "S3: GPU 100% busy at about the improved net's 425 "
                    "images/s", caveat=f"{TENSORFLOW}; {V100_FORM}; 'about the same speed' read as 425 images/s"),
    PublishedFigure("cifar100-mlp", "t4", 100 * 50_000 / 343.0, None, "S4: model creation and 100 epochs of 50,000 "
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


class EstimateError(ValueError):
    """An estimate that cannot be made; the message says why."""


@dataclass(frozen=True)
class Baseline:
    """What the device here measured: the speed every speedup is over."""

    device: str  # "cpu (AMD EPYC 7B13)"
    samples_per_s: tuple[float, float, float]  # median, lowest, highest over the steady epochs
    data_source: str


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
            "interval": None if self.interval is None else {
                "low_ratio": self.interval.low_ratio, "high_ratio": self.interval.high_ratio,
                "points": self.interval.points, "coverage": self.interval.coverage},
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


def published_points() -> list[Point]:
    points = []
    for figure in PUBLISHED_FIGURES:
        workload = get_workload(figure.workload)
        shape = shape_of(workload, {**workload.defaults, **figure.overrides})
        step_s = shape.batch_size / figure.samples_per_s
        batch = f", batch {shape.batch_size}" if figure.overrides.get("batch_size") else ""
        points.append(Point(
            label=f"{figure.workload} on the {catalog_entry(figure.target).product}{batch}", source=figure.source,
            shape=shape, sheet=catalog_entry(figure.target), caveat=figure.caveat,
            observed_s=step_s * (figure.busy or 1.0), kind="step" if figure.busy is None else "busy"))
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
    workload = _registered(run.workload)
    if workload is None or workload.trainer is not None:
        return "not a registered torch workload (a model of your own cannot be rebuilt from its record)"
    if run.settings.mode != "seed" or run.settings.world_size != 1:
        return "tuned or multi-process: the roofline models one process in fp32"
    steps = []
    for epoch in run.steady_epochs:
        computing_s = epoch.train_time_s - (epoch.input_wait_s or 0.0)
        if epoch.steps < 1 or not computing_s > 0:
            return (f"epoch {epoch.epoch} cannot be timed per step: {epoch.steps} steps, {epoch.train_time_s:g} s "
                    f"of training of which {epoch.input_wait_s or 0.0:g} s waiting for data")
        steps.append(computing_s / epoch.steps)
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
    return Point(label=label, source=where, shape=shape, sheet=sheet, observed_s=statistics.median(steps),
                 kind="step")


def _registered(name: str) -> Workload | None:
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
class Calibration:
    """The fitted efficiencies, the points behind them and the interval their leave-one-out errors give."""

    points: list[Point]
    unscored: list[Unscored]
    efficiency: Efficiency
    interval: Interval | None

    @classmethod
    def of(cls, points: list[Point], unscored: list[Unscored]) -> Calibration:
        if not points:
            raise EstimateError("no measured GPU point to fit the roofline on")
        fitter = Fitter(points)
        return cls(points, unscored, fitter.fit(), interval_from(fitter.held_out_ratios()))


def calibration(stored: Sequence[Result]) -> Calibration:
    """Fitted on the published points, the committed runs and `stored` (the user's database)."""
    committed, committed_unscored = measured_points(committed_results(), "committed under results/")
    yours, yours_unscored = measured_points(stored, "your database")
    return Calibration.of(published_points() + committed + yours, list(UNSCORED) + committed_unscored + yours_unscored)


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
                    data_source)


def estimates_for(job: Job, run: RunRecord, targets: Sequence[Datasheet], fitted: Calibration,
                  prices: dict[str, float]) -> list[Estimate]:
    """Every target for the workload `job` trained as `run` on this machine's CPU."""
    hyperparameters = run.settings.hyperparameters
    shape = shape_of(job.workload, hyperparameters)
    input_s, steps_per_epoch = input_seconds_per_batch(job, run)
    baseline = baseline_of(run, run.settings.data_source)
    serial = run.settings.workers == 0
    return [Estimate(
        workload=job.workload.name, target=target, batch_size=shape.batch_size,
        step=predict(shape, target, fitted.efficiency, input_s=input_s, serial_input=serial),
        interval=fitted.interval, steps_per_epoch=steps_per_epoch, epochs=int(hyperparameters.get("epochs", 1)),
        baseline=baseline, price_per_hour=prices.get(target.key), profile_notes=shape.notes) for target in targets]
