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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from devicebench.config import RunConfig, own_from_specs, registered
from devicebench.devices import resolve_devices
from devicebench.engine.loop import TrainingPlan
from devicebench.engine.tuning import tuned_threads
from devicebench.workloads import Workload


@dataclass(frozen=True)
class DataRequest:
    """The data a job trains on; jobs with equal requests share one load, so every device sees the same bytes."""

    dataset: str  # a dataset devicebench knows, or the name of the data a model of your own brings
    source: str  # "auto", "real" or "synthetic"; data of your own is what it is
    data_dir: str | None  # your own images or texts, or the folder that caches downloads
    seed: int  # of synthetic data
    shape: tuple[tuple[str, Any], ...]  # what the model takes (load_dataset's image_shape, vocab_size...), by name

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
    mode: str  # "seed" or "tuned"
    precision: str  # tuned mode's: "auto", "fp32" or "bf16"
    compile: str  # tuned mode's: "auto", "on" or "off"
    batch_size_auto: bool  # grow the batch for throughput before training
    per_device_batch: bool  # the batch was given per process (the global one is world size times it)

    @property
    def batch_size(self) -> int:
        return self.hyperparameters["batch_size"]

    def to_dict(self) -> dict[str, Any]:
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        return {**fields, "workload": self.workload.name, "device": str(self.device),
                "training": dataclasses.asdict(self.training), "data": dataclasses.asdict(self.data)}


@dataclass(frozen=True)
class Plan:
    """Every job of a run or a sweep, in the order they run, and what the whole session shares."""

    jobs: tuple[Job, ...]
    threads: int | None  # torch intra-op threads for the session; None: torch's choice
    request: dict[str, Any]  # what was asked, as results keep it (a RunConfig's fields, or a sweep's points)
    skipped: tuple[tuple[str, str], ...] = ()  # the suite's workloads this installation cannot run, and what each needs
    own_model: tuple[str, str, str, str] | None = None  # --model, --data, --loss, --optimizer: rebuilt by each process

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
        return {"jobs": [job.to_dict() for job in self.jobs], "threads": self.threads, "request": self.request,
                "skipped": [list(entry) for entry in self.skipped],
                "own_model": None if self.own_model is None else list(self.own_model)}

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> Plan:
        own = None if fields["own_model"] is None else tuple(fields["own_model"])
        return cls(jobs=tuple(_job_from_dict(job, own) for job in fields["jobs"]), threads=fields["threads"],
                   request=fields["request"], skipped=tuple(tuple(entry) for entry in fields["skipped"]),
                   own_model=own)


def plan(configs: RunConfig | Sequence[RunConfig]) -> Plan:
    """The jobs of one configuration, or of the points of a sweep (one session: the devices, threads and mode of
    the first point). Raises ConfigError or DeviceError for what cannot run, before anything is loaded."""
    configs = [configs] if isinstance(configs, RunConfig) else list(configs)
    first = configs[0]
    devices = resolve_devices(first.devices)
    jobs = tuple(_job(config, workload, device) for config in configs for workload in config.selected_workloads()
                 for device in devices)
    own = (first.model, first.data, first.loss, first.optimizer) if first.model is not None else None
    return Plan(
        jobs=jobs,
        threads=first.threads or (tuned_threads() if first.mode == "tuned" else None),
        request=first.to_dict() if len(configs) == 1 else {"sweep": [config.to_dict() for config in configs]},
        skipped=tuple((entry.name, reason) for entry, reason in first.skipped()),
        own_model=own,
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
        data=DataRequest(dataset=workload.dataset, source=config.data, data_dir=config.data_dir, seed=config.seed,
                         shape=tuple(sorted(request.items()))),
        workers=config.workers,
        seed=config.seed,
        mode=config.mode,
        precision=config.precision,
        compile=config.compile,
        batch_size_auto=config.batch_size_auto,
        per_device_batch=config.per_device_batch,
    )


def _job_from_dict(fields: dict[str, Any], own: tuple[str, str, str, str] | None) -> Job:
    data = fields["data"]
    shape = tuple((name, tuple(value) if isinstance(value, list) else value) for name, value in data["shape"])
    return Job(**{
        **fields,
        "workload": own_from_specs(*own) if own is not None else registered(fields["workload"]),
        "device": torch.device(fields["device"]),
        "training": TrainingPlan(**fields["training"]),
        "data": DataRequest(**{**data, "shape": shape}),
    })
