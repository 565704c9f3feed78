"""A run is planned before it is executed: what the user asked (`RunConfig`) is resolved once into jobs.

A job is one workload on one device, `repeats` times, with everything the runner needs and nothing it must look
up: the hyperparameters (the seed's, with the overrides and the batch size), how long to train, which data, and
the settings that change speed. Planning checks the whole request, names every device and workload, and loads
no data and trains nothing, so `devicebench run --dry-run` can show it, the distributed launcher can hand it to
each process, and a run fails on a typo before the first byte is downloaded.

    python -c "from devicebench.planning import plan; from devicebench import RunConfig; print(plan(RunConfig(devices='cpu')).jobs[0])"
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psutil
import torch

from devicebench import machine
from devicebench.choices import (
    COMPILE_CHOICES,
    MODES,
    PRECISION_CHOICES,
    CompileChoice,
    Mode,
    PrecisionChoice,
    narrowed,
)
from devicebench.config import ConfigError, RunConfig, own_from_specs, registered
from devicebench.devices import resolve_devices
from devicebench.engine.calibration_store import peak_tflops
from devicebench.engine.flops import training_flops_per_sample
from devicebench.engine.loop import TrainingPlan
from devicebench.engine.tuning import tuned_threads
from devicebench.environment import machine_fingerprint
from devicebench.workloads import Workload

GIB = 2**30
BYTES_PER_PARAMETER = 4  # fp32: bf16 autocast too keeps weights, gradients and optimizer state in fp32
# Tensors of the optimizer's state per parameter; an optimizer not named here is taken to keep Adam's two
OPTIMIZER_STATE_COPIES = {"Adam": 2, "AdamW": 2, "Adamax": 2, "NAdam": 2, "RAdam": 2, "Adagrad": 1, "RMSprop": 1}
# Above this share of the memory free, training is warned about: activations, the data and the allocator's
# slack come on top of the parameters, and for a batch of images they often outweigh them.
CLOSE_MEMORY_SHARE = 0.5
SLOW_STEP_S = 60.0  # one step estimated longer than this is warned about: a Ctrl-C waits for the step to end
# Without a calibration (engine/calibrate.py), a device kind's fp32 matmul TFLOP/s taken as its speed: about the
# fastest of its kind, so that the step time estimated from it is a rough lower bound, not a prediction.
NOMINAL_PEAK_TFLOPS = {"cpu": 5.0, "cuda": 100.0}
OTHER_NOMINAL_PEAK_TFLOPS = 50.0  # MPS, XPU and the rest


@dataclass(frozen=True)
class DataRequest:
    """The data a job trains on; jobs with equal requests share one load, so every device sees the same bytes."""

    dataset: str  # a dataset devicebench knows, or the name of the data a model of your own brings
    source: str  # "auto", "real" or "synthetic"; data of your own is what it is
    data_dir: str | None  # your own images or texts, or the folder that caches downloads
    seed: int  # of synthetic data
    shape: tuple[tuple[str, Any], ...]  # what the model takes (load_dataset's image_shape, vocab_size...), by name
    largest_download_bytes: int | None = None  # "auto" downloads no larger release unasked (the quick suite's rule)

    @property
    def shape_arguments(self) -> dict[str, Any]:
        return dict(self.shape)


@dataclass(frozen=True)
class Job:
    """One workload on one device, `repeats` times, resolved: the runner executes it as it stands."""

    workload: Workload
    device: torch.device
    repeats: int
    hyperparameters: dict[str, Any]  # the seed's, with the overrides; batch_size is the global batch (0: none)
    overrides: dict[str, Any]  # the --set values among them
    training: TrainingPlan  # epochs, steps and evaluation batches per epoch, the target accuracy
    data: DataRequest
    workers: int | None  # loader processes; None: chosen from the data once it is loaded
    seed: int
    mode: Mode
    precision: PrecisionChoice  # tuned mode's
    compile: CompileChoice  # tuned mode's
    batch_size_auto: bool  # grow the batch for throughput before training
    per_device_batch: bool  # the batch was given per process (the global one is world size times it)
    # a budget sized it (budget.fit_to_share): a process it is handed to (a fresh repeat) keeps its sizes, where a
    # second sizing there, its first steps timed cold, made ResNet-50's batch half the first repeat's
    sized: bool = False

    @property
    def batch_size(self) -> int:
        return self.hyperparameters["batch_size"]

    def to_dict(self) -> dict[str, Any]:
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {
            **fields,
            "workload": self.workload.name,
            "device": str(self.device),
            "training": dataclasses.asdict(self.training),
            "data": dataclasses.asdict(self.data),
        }


@dataclass(frozen=True)
class Plan:
    """Every job of a run or a sweep, in the order they run, and what the whole session shares."""

    jobs: tuple[Job, ...]
    threads: int | None  # torch intra-op threads for the session; None: torch's choice
    request: dict[str, Any]  # what was asked, as results keep it (a RunConfig's fields, or a sweep's points)
    skipped: tuple[tuple[str, str], ...] = ()  # the suite's workloads this installation cannot run, and what each needs
    own_model: tuple[str, str, str, str] | None = None  # --model, --data, --loss, --optimizer: rebuilt by each process
    budget_s: float | None = None  # seconds the session may take: each run's epochs are sized to its share (runner)
    # how many times its share a job's fewest steps may take before the budget makes its batch smaller (fit_to_share)
    batch_slack: float = 1.0

    @property
    def workloads(self) -> list[Workload]:
        """Each workload of the plan once, in the order it first runs."""
        return list(dict.fromkeys(job.workload for job in self.jobs))

    def for_rank(self, device: torch.device, threads: int) -> Plan:
        """This plan as one of several processes runs it: on its own device, with its share of the threads."""
        jobs = tuple(dataclasses.replace(job, device=device) for job in self.jobs)
        request = {**self.request, "devices": str(device), "threads": threads}
        return dataclasses.replace(self, jobs=jobs, threads=threads, request=request)

    def to_dict(self) -> dict[str, Any]:
        """As JSON takes it: what `devicebench run --dry-run --json` writes and each process of `--nproc` reads."""
        return {
            "jobs": [job.to_dict() for job in self.jobs],
            "threads": self.threads,
            "request": self.request,
            "skipped": [list(entry) for entry in self.skipped],
            "own_model": None if self.own_model is None else list(self.own_model),
            "budget_s": self.budget_s,
            "batch_slack": self.batch_slack,
        }

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Plan:
        own = None if fields["own_model"] is None else tuple(fields["own_model"])
        return cls(
            jobs=tuple(_job_from_dict(job, own) for job in fields["jobs"]),
            threads=fields["threads"],
            request=fields["request"],
            skipped=tuple(tuple(entry) for entry in fields["skipped"]),
            own_model=own,
            budget_s=fields.get("budget_s"),
            batch_slack=fields.get("batch_slack", 1.0),
        )


def plan(configs: RunConfig | Sequence[RunConfig], *, step_estimates: bool = True) -> Plan:
    """The jobs of one configuration, or of the points of a sweep (one session: the devices, threads and mode of
    the first point). Raises ConfigError or DeviceError for what cannot run, before anything is loaded.

    `step_estimates`: count each model's FLOPs to warn of a step estimated to take minutes. The first count takes a
    second on a 2-core machine (torch imports its compiler's modules for the meta device), a big model's a third of
    one; a run needs the counts anyway (its records and its budget), `run --dry-run` leaves them out, and with them
    only that warning."""
    configs = [configs] if isinstance(configs, RunConfig) else list(configs)
    first = configs[0]
    devices = resolve_devices(first.devices)
    jobs = tuple(
        _job(config, workload, device)
        for config in configs
        for workload in config.selected_workloads()
        for device in devices
    )
    own = (first.model, first.data, first.loss, first.optimizer) if first.model is not None else None
    _check_sizes(jobs, step_estimates)
    return Plan(
        jobs=jobs,
        threads=first.threads or (tuned_threads() if first.mode == "tuned" else None),
        request=first.to_dict() if len(configs) == 1 else {"sweep": [config.to_dict() for config in configs]},
        skipped=tuple((entry.name, reason) for entry, reason in first.skipped()),
        own_model=own,
        budget_s=first.effective_budget_s,
    )


def _check_sizes(jobs: Sequence[Job], step_estimates: bool = True) -> None:
    """Before anything is loaded: refuse a model whose training state alone (weights, gradients, optimizer state)
    cannot fit the memory its device has free, and warn of one that nearly fills it or whose step is estimated to
    take minutes. From the parameter count and FLOPs counted on the meta device: no memory, no arithmetic."""
    seen = set()
    for job in jobs:
        key = (
            job.workload,
            str(job.device),
            job.batch_size,
            job.mode,
            json.dumps(job.hyperparameters, sort_keys=True, default=str),
        )
        if job.workload.trainer is not None or key in seen:
            continue
        seen.add(key)
        try:
            parameters = job.workload.parameter_count(job.hyperparameters)
        except Exception:  # too large (ModelTooLarge), or a model that cannot be built: the run says so in its record
            continue
        assert parameters is not None  # None only for a workload with a trainer of its own, skipped above
        _check_memory(job, parameters)
        if step_estimates:
            _check_step_time(job)


def training_state_bytes(workload: Workload, hyperparameters: dict[str, Any], parameters: int) -> tuple[int, int]:
    """(bytes, optimizer state copies): what training holds whatever the batch: weights, gradients and the
    optimizer's state, in fp32. Activations come on top and are left out: they depend on the batch."""
    if workload.build_optimizer is None:  # as calling the None would, in words
        raise TypeError(f"{workload.name} is not a torch model: it has no optimizer")
    with torch.device("meta"):
        model = workload.build_model(hyperparameters).to("meta")
        optimizer = workload.build_optimizer(model, hyperparameters)
    kind = type(optimizer).__name__
    copies = (1 if optimizer.defaults.get("momentum") else 0) if kind == "SGD" else OPTIMIZER_STATE_COPIES.get(kind, 2)
    return parameters * BYTES_PER_PARAMETER * (2 + copies), copies


def free_memory_bytes(device: torch.device) -> int | None:
    """Memory `device` has free now: the host's available RAM for the CPU, the GPU's free memory for CUDA; None
    for a kind that cannot tell."""
    if device.type == "cpu":
        return psutil.virtual_memory().available
    if device.type == "cuda" and machine.snapshot().cuda_devices:
        return torch.cuda.mem_get_info(device)[0]
    return None


def _check_memory(job: Job, parameters: int) -> None:
    free = free_memory_bytes(job.device)
    most = parameters * BYTES_PER_PARAMETER * (2 + max(OPTIMIZER_STATE_COPIES.values()))  # no optimizer keeps more
    if free is None or most <= CLOSE_MEMORY_SHARE * free:
        return  # nothing to say: and no optimizer built (the first one imports torch._dynamo: seconds)
    needed, copies = training_state_bytes(job.workload, job.hyperparameters, parameters)
    numbers = (
        f"its {parameters:,} parameters need {needed / GIB:,.1f} GiB to train (weights, gradients and "
        f"{copies} optimizer state cop{'y' if copies == 1 else 'ies'}, {BYTES_PER_PARAMETER} bytes each) and "
        f"{job.device} has {free / GIB:,.1f} GiB free"
    )
    where = f"{job.workload.name} on {job.device}"
    if needed > free:
        raise ConfigError(
            f"{where}: {numbers}, before any activations: train a smaller model (fewer layers or "
            "units, through --set), or on a device with more memory"
        )
    if needed > CLOSE_MEMORY_SHARE * free:
        logging.getLogger(__name__).warning(
            "%s may run out of memory: %s; activations come on top: a smaller --batch-size or model leaves more room",
            where,
            numbers,
        )


def estimated_step_s(job: Job) -> tuple[float, float, str] | None:
    """(seconds, TFLOP/s, where that speed came from) of one training step of `job`: its FLOPs per sample (forward
    and backward, engine/flops.py) times the batch over the device's calibrated matmul peak, else the nominal peak
    of its kind. A lower bound: no model runs at its device's peak. None when the FLOPs cannot be counted."""
    flops = training_flops_per_sample(job.workload, job.hyperparameters)
    if not flops:
        return None
    precisions = ["fp32"] + (["tf32", "bf16"] if job.mode == "tuned" else [])  # tuned: the fastest it may pick
    machine = machine_fingerprint()["machine_id"]
    calibrated = [
        rate for rate in (peak_tflops(machine, str(job.device), precision) for precision in precisions) if rate
    ]
    if calibrated:
        rate, source = max(calibrated), "its calibrated peak"
    else:
        rate = NOMINAL_PEAK_TFLOPS.get(job.device.type, OTHER_NOMINAL_PEAK_TFLOPS)
        source = f"a nominal peak for any {job.device.type.upper()}: a rough bound"
    return flops * job.batch_size / (rate * 1e12), rate, source


def _check_step_time(job: Job) -> None:
    estimate = estimated_step_s(job)
    if estimate is None or estimate[0] <= SLOW_STEP_S:
        return
    seconds, rate, source = estimate
    logging.getLogger(__name__).warning(
        "%s on %s: one training step of batch %s is estimated to take at least %s s (its FLOPs at %g TFLOP/s, %s). "
        "Ctrl-C stops at the end of the step, a second Ctrl-C at once; a smaller --batch-size or model shortens it",
        job.workload.name,
        job.device,
        f"{job.batch_size:,}",
        f"{seconds:,.0f}",
        rate,
        source,
    )


def _job(config: RunConfig, workload: Workload, device: torch.device) -> Job:
    hyperparameters = config.hyperparameters_for(workload)
    request = workload.data_request(hyperparameters)
    world = config.nproc * config.nnodes
    if config.per_device_batch:
        hyperparameters = {**hyperparameters, "batch_size": hyperparameters["batch_size"] * world}
    return Job(
        workload=workload,
        device=device,
        repeats=config.repeats,
        hyperparameters=hyperparameters,
        overrides=config.overrides_for(workload),
        training=config.plan_for(workload),
        data=DataRequest(
            dataset=workload.dataset,
            source=config.data,
            data_dir=config.data_dir,
            seed=config.seed,
            shape=tuple(sorted(request.items())),
            largest_download_bytes=config.largest_download_bytes,
        ),
        workers=config.workers,
        seed=config.seed,
        mode=narrowed(config.mode, MODES),
        precision=narrowed(config.precision, PRECISION_CHOICES),
        compile=narrowed(config.compile, COMPILE_CHOICES),
        batch_size_auto=config.batch_size_auto,
        per_device_batch=config.per_device_batch,
    )


def _job_from_dict(fields: dict[str, Any], own: tuple[str, str, str, str] | None) -> Job:
    data = fields["data"]
    shape = tuple((name, tuple(value) if isinstance(value, list) else value) for name, value in data["shape"])
    return Job(
        **{
            **fields,
            "workload": own_from_specs(*own) if own is not None else registered(fields["workload"]),
            "device": torch.device(fields["device"]),
            "training": TrainingPlan(**fields["training"]),
            "data": DataRequest(**{**data, "shape": shape}),
        }
    )
