"""What `devicebench estimate` tells of a workload on each GPU asked for: the step the fitted roofline predicts at the
precision a mode runs, the input pipeline timed on this machine's cores (in CPU time) and scaled to the rented
host's, the CPU baseline every speedup is over (its training thread's CPU time), and the epoch, cost and interval
that follow.

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
from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.runner import load_data

BATCHES_TIMED = 6  # input-pipeline batches timed, after one that starts the workers


@dataclass(frozen=True)
class Baseline:
    """What the device here measured: the speed every speedup is over."""

    device: str  # "cpu (AMD EPYC 7B13)"
    # the rate every speedup is over (the fastest steady epoch's: other work only ever slows an epoch, so the
    # fastest is the least disturbed), and the lowest and highest, the range shown; on the training thread's CPU
    # time where `wall_reason` is None (baseline_seconds), else on the wall clock
    samples_per_s: tuple[float, float, float]
    data_source: str
    batch_size: int | None = None  # what it trained at, when not the batch estimated (a budget made it smaller)
    wall_samples_per_s: tuple[float, float, float] | None = None  # the same epochs on the wall clock, likewise
    wall_reason: str | None = None  # why the rate is on the wall clock: no thread CPU time to take it from


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
                "clock": "wall" if self.baseline.wall_reason else "training thread's CPU time",
                "wall_reason": self.baseline.wall_reason,
                "wall_samples_per_s": None
                if self.baseline.wall_samples_per_s is None
                else self.baseline.wall_samples_per_s[0],
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


def input_seconds_per_batch(
    job: Job, run: RunRecord, timed: bool = True, watch: Stopwatch | None = None
) -> tuple[float, int]:
    """(CPU seconds the input pipeline takes per batch on this machine, training batches per epoch), with the workers
    and batch size `run` trained with (pipeline_seconds): timed over a second epoch of BATCHES_TIMED batches, after
    a first of one batch that starts the workers, so no batch of the timed epoch was made before it began. None is
    timed where not `timed` (0 seconds: the batches are only counted). `watch`: its CPU clocks, for tests."""
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
        watch = watch or Stopwatch(device)
        for _ in train.epoch(0, 1):  # starts the workers, which serve the next epoch too (persistent)
            pass
        thread_s, workers_s = watch.thread_cpu_now(), watch.children_cpu_now()
        for _ in train.epoch(1, batches_timed):
            pass
        thread_s, workers_s = watch.thread_cpu_now() - thread_s, watch.children_cpu_now() - workers_s
        return pipeline_seconds(thread_s, workers_s, settings.workers, os.cpu_count() or 1) / batches_timed, len(train)
    finally:
        for pipeline in (train, test):
            close = getattr(pipeline, "close", None)
            if close is not None:
                close()


def pipeline_seconds(thread_s: float, workers_s: float, workers: int, cores: int) -> float:
    """The seconds a pipeline took to make its batches, from CPU time, which another busy process hardly moves,
    so that this machine's load never becomes the GPU's figure: without workers, the CPU seconds of the thread that
    made them; with workers, their CPU seconds shared among the cores they run on at once (min(workers, cores)),
    and never less than the receiving thread's own, which takes each batch in turn."""
    if workers == 0:
        return thread_s
    return max(thread_s, workers_s / min(workers, cores))


def baseline_seconds(epoch: EpochRecord, workers: int) -> float | None:
    """The seconds an epoch of the CPU baseline is taken to have trained for, load aside: its training thread's
    CPU seconds (which another busy process hardly moves, where idle OpenMP threads sleep), and where loader workers
    prepare the batches, the time the loop waited for them on top: the thread sleeps then, its CPU time counts none
    of it, yet the CPU's training stood still; without workers the loop prepares each batch itself, inside its CPU
    time already. Never more than the epoch's wall time (a batch's arrival, counted in both, would count twice).
    So the rule never makes the CPU faster than the wall clock saw it, nor leaves out a wait for input: it leaves
    out only what the thread waited for the cores (load), and for its own OpenMP threads (which a quiet machine
    also has: on two cores about 8% of a step). None: not recorded (an epoch stored before schema 7)."""
    if epoch.train_thread_cpu_s is None or epoch.train_thread_cpu_s <= 0:
        return None
    waited = (epoch.input_wait_s or 0.0) if workers > 0 else 0.0
    return min(epoch.train_time_s, epoch.train_thread_cpu_s + waited)


def baseline_of(run: RunRecord, data_source: str, wall_reason: str | None = None) -> Baseline | None:
    """The baseline `run` measured: samples over baseline_seconds of each steady epoch, or, with a `wall_reason`
    (its training thread's CPU time was not one that load leaves alone) or where an epoch lacks its CPU time, over
    its wall time."""
    steady = run.steady_epochs
    if run.status != "ok" or not steady:
        return None
    wall = [epoch.samples_per_s for epoch in steady]
    seconds = [baseline_seconds(epoch, run.settings.workers) for epoch in steady]
    if wall_reason is None and None in seconds:
        wall_reason = "its epochs' CPU time was not recorded"
    rates = wall if wall_reason else [epoch.samples / (taken or 1.0) for epoch, taken in zip(steady, seconds)]
    return Baseline(
        f"{run.device} ({run.device_name})",
        (max(rates), min(rates), max(rates)),
        data_source,
        run.settings.batch_size,
        (max(wall), min(wall), max(wall)),
        wall_reason,
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
    wall_reason: str | None = None,
) -> list[Estimate]:
    """Every target for the workload `job` trained as `run` on this machine's CPU. `host_cores`: the cores of each
    target's host by catalog key (missing or None: this machine's). `wall_reason`: why the baseline's rate is taken
    on the wall clock (baseline_of), if it is."""
    hyperparameters = job.hyperparameters  # as asked: a budget may have trained this machine at a smaller batch
    shape = shape_of(job.workload, hyperparameters)
    # synthetic data (as the published ResNet-50, BERT and GPT-2 figures were measured) has no host pipeline to time:
    # what this machine's load does to one never becomes the GPU's figure
    synthetic = run.settings.data_source == "synthetic"
    timed_s, timed_steps = input_seconds_per_batch(job, run, timed=not synthetic)
    per_sample = shape.batch_size / max(run.settings.batch_size, 1)
    input_s = 0.0 if synthetic else timed_s * per_sample  # the pipeline's work grows with the samples in a batch
    steps_per_epoch = math.ceil(timed_steps / per_sample)
    baseline = baseline_of(run, run.settings.data_source, wall_reason)
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
