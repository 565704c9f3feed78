"""What `devicebench estimate` tells of a workload on each GPU asked for: the step the fitted roofline predicts at the
precision a mode runs, the input pipeline timed on this machine's cores and scaled to the rented host's, the CPU
baseline every speedup is over, and the epoch, cost and interval that follow.

    devicebench estimate resnet50 --on v100-sxm2,a100-80gb,h100-sxm --batch-size 128
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from devicebench.choices import KernelPrecision, Mode
from devicebench.data import TableDataset
from devicebench.data.pipeline import batches_for
from devicebench.engine.timing import Stopwatch
from devicebench.estimate.host import with_workers
from devicebench.estimate.points import EstimateError, RooflineFit, shape_of
from devicebench.estimate.roofline import PrecisionError, PredictedStep, Resolved, predict
from devicebench.estimate.validation import Interval
from devicebench.planning import Job
from devicebench.results.datasheets import Datasheet
from devicebench.results.schema import RunRecord
from devicebench.runner import load_data

BATCHES_TIMED = 6  # input-pipeline batches timed, after one that starts the workers


@dataclass(frozen=True)
class Baseline:
    """What the device here measured: the speed every speedup is over."""

    device: str  # "cpu (AMD EPYC 7B13)"
    # the rate every speedup is over (the fastest steady epoch's: other work only ever slows an epoch, so the
    # fastest is the least disturbed), and the lowest and highest, the range shown
    samples_per_s: tuple[float, float, float]
    data_source: str
    batch_size: int | None = None  # what it trained at, when not the batch estimated (a budget made it smaller)


@dataclass(frozen=True)
class Estimate:
    """One workload on one GPU of the catalog: predicted, never measured."""

    workload: str
    target: Datasheet
    batch_size: int
    step: PredictedStep
    interval: Interval | None
    steps_per_epoch: int
    epochs: int
    baseline: Baseline | None
    precision: KernelPrecision = "fp32"  # what its matrix kernels were estimated at
    host_cores: int | None = None  # the target host's cores the input pipeline was scaled to; None: this machine's
    price_per_hour: float | None = None
    profile_notes: tuple[str, ...] = ()  # how its step was profiled, when not as planned (random inputs on the CPU)
    mode: Mode = "seed"  # as `--mode` asked: tuned mode's CUDA graph is not in the host's terms (report/estimates.py)

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
            "workload": self.workload,
            "target": self.target.key,
            "target_product": self.target.product,
            "batch_size": self.batch_size,
            "steps_per_epoch": self.steps_per_epoch,
            "epochs": self.epochs,
            "samples_per_s": self.samples_per_s,
            "samples_per_s_range": self.samples_per_s_range,
            "step_time_s": self.step.seconds,
            "epoch_time_s": self.epoch_s,
            "epoch_time_s_range": self.epoch_s_range,
            "bound": self.step.bound,
            "terms_s": {
                "compute": self.step.compute_s,
                "memory": self.step.memory_s,
                "copy": self.step.copy_s,
                "launches": self.step.launch_s,
                "input": self.step.input_s,
            },
            "serial_input": self.step.serial_input,
            "baseline": None
            if self.baseline is None
            else {
                "device": self.baseline.device,
                "samples_per_s": self.baseline.samples_per_s[0],
                "samples_per_s_min": self.baseline.samples_per_s[1],
                "samples_per_s_max": self.baseline.samples_per_s[2],
                "data_source": self.baseline.data_source,
            },
            "speedup": self.speedup,
            "speedup_range": self.speedup_range,
            "precision": self.precision,
            "host_cores": self.host_cores,
            "interval": None
            if self.interval is None
            else {
                "level": self.interval.level,
                "low_ratio": self.interval.low_ratio,
                "high_ratio": self.interval.high_ratio,
                "points": self.interval.points,
                "scheme": self.interval.scheme,
            },
            "price_per_hour": self.price_per_hour,
            "cost_per_epoch": self.cost_per_epoch,
            "cost_per_run": self.cost_per_run,
            "datasheet_source": self.target.source,
            "profile_notes": list(self.profile_notes),
        }


def input_seconds_per_batch(job: Job, run: RunRecord, timed: bool = True) -> tuple[float, int]:
    """(seconds the input pipeline takes per batch on this machine, training batches per epoch), with the workers
    and batch size `run` trained with. The first batch, which starts the workers, is not timed; none is where not
    `timed` (0 seconds: the batches are only counted)."""
    dataset = load_data(job)
    if isinstance(dataset, Exception):
        raise EstimateError(f"{job.workload.name}: {dataset}")
    if isinstance(dataset, TableDataset):  # shape_of refused a model that is not torch's before it came to this
        raise EstimateError(f"{job.workload.name}: boosted trees have no mini-batches to time")
    settings = run.settings
    preprocessing = job.workload.build_preprocessing(settings.hyperparameters)
    device = torch.device("cpu")
    train, test = batches_for(
        dataset,
        job.workload.image_shape,
        preprocessing,
        settings.batch_size,
        device,
        workers=settings.workers,
        seed=job.seed,
    )
    try:
        batches_timed = min(BATCHES_TIMED if timed else 0, len(train) - 1)
        if batches_timed < 1:
            return 0.0, len(train)
        watch = Stopwatch(device)
        batches = train.epoch(0, batches_timed + 1)
        next(batches)
        started = watch.now()
        for _ in batches:
            pass
        return (watch.now() - started) / batches_timed, len(train)
    finally:
        for pipeline in (train, test):
            close = getattr(pipeline, "close", None)
            if close is not None:
                close()


def baseline_of(run: RunRecord, data_source: str) -> Baseline | None:
    rates = [epoch.samples_per_s for epoch in run.steady_epochs]
    if run.status != "ok" or not rates:
        return None
    return Baseline(
        f"{run.device} ({run.device_name})",
        (max(rates), min(rates), max(rates)),
        data_source,
        run.settings.batch_size,
    )


def scaled_input_s(input_s: float, workers: int, cores_here: int, host_cores: int | None) -> float:
    """The input pipeline's seconds per batch on a host of `host_cores` cores, from `input_s` timed here with
    `workers` loader processes: on a rented host the loader is given a worker per core (`--workers`), and workers
    keep pace with the cores they run on. A pipeline without workers runs on one core there as here. None: the host
    is this machine."""
    if host_cores is None or workers == 0:
        return input_s
    return input_s * min(workers, cores_here) / host_cores


def precisions_for(mode: Mode, sheet: Datasheet) -> list[KernelPrecision]:
    """What `mode` runs its matrix kernels at on `sheet`: seed mode fp32 on the CUDA cores; tuned mode TF32 where
    the GPU has it, and bf16 autocast where the GPU computes bf16, whichever its trial finds faster."""
    if mode == "seed":
        return ["fp32"]
    fast: list[KernelPrecision] = ["tf32" if sheet.tf32_tflops is not None else "fp32"]
    return fast + (["amp-bf16"] if sheet.bf16_tflops is not None else [])


def estimates_for(
    job: Job,
    run: RunRecord,
    targets: Sequence[Datasheet],
    fitted: RooflineFit,
    prices: dict[str, float],
    *,
    mode: Mode = "seed",
    precision: KernelPrecision | None = None,
    host_cores: dict[str, int | None] | None = None,
    level: float = 0.8,
) -> list[Estimate]:
    """Every target for the workload `job` trained as `run` on this machine's CPU. `host_cores`: the cores of each
    target's host by catalog key (missing or None: this machine's)."""
    hyperparameters = job.hyperparameters  # as asked: a budget may have trained this machine at a smaller batch
    shape = shape_of(job.workload, hyperparameters)
    # synthetic data (as the published ResNet-50, BERT and GPT-2 figures were measured) has no host pipeline to time:
    # what this machine's load does to one never becomes the GPU's figure
    synthetic = run.settings.data_source == "synthetic"
    timed_s, timed_steps = input_seconds_per_batch(job, run, timed=not synthetic)
    per_sample = shape.batch_size / max(run.settings.batch_size, 1)
    input_s = 0.0 if synthetic else timed_s * per_sample  # the pipeline's work grows with the samples in a batch
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
            resolved = replace(resolved, host_work=with_workers(resolved.host_work, workers > 0))
            steps.append(
                (predict(resolved, fitted.efficiency, input_s=target_input_s, serial_input=workers == 0), chosen)
            )
        step, chosen = min(steps, key=lambda pair: pair[0].seconds)  # as tuned mode's trial keeps the faster
        estimates.append(
            Estimate(
                workload=job.workload.name,
                target=target,
                batch_size=shape.batch_size,
                step=step,
                interval=fitted.interval_for(job.workload.name, target, level),
                steps_per_epoch=steps_per_epoch,
                epochs=int(hyperparameters.get("epochs", 1)),
                baseline=baseline,
                precision=chosen,
                host_cores=cores,
                price_per_hour=prices.get(target.key),
                profile_notes=shape.notes,
                mode=mode,
            )
        )
    return estimates
