"""What a run produces, field by field, with the unit in every name that has one.

A `Result` is one invocation of `devicebench run`: the machine it ran on, the configuration asked for, and a
`RunRecord` per (workload, device, repeat). Each RunRecord keeps every epoch, so nothing measured is summarised
away, and carries the settings that change speed so that runs which cannot be compared are never pooled.

    python -c "from devicebench.results.schema import SCHEMA_VERSION; print(SCHEMA_VERSION)"
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
import math
import re
import statistics
import types
import typing
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from devicebench import files
from devicebench.choices import Mode, TrainingPrecision

# 2: plausibility flags; 3: tuning_s; 4: definition; 5: definitions that torch leaves alone; 6: the process each
# repeat ran in, and the machine's run-to-run variation; 7: the training thread's CPU seconds of each epoch
SCHEMA_VERSION = 7
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6, 7)  # 1 to 3, 5 and 6 lack only fields that have defaults
FIRST_DEFINITIONS = 4  # whose definitions hashed the initial weights torch drew: read as not recorded

RunStatus = Literal["running", "ok", "diverged", "failed", "oom", "interrupted"]
EpochPhase = Literal["warmup", "steady"]


@dataclass
class EpochRecord:
    epoch: int  # 1-based
    phase: EpochPhase  # "warmup" epochs never enter steady-state figures
    steps: int
    samples: int
    train_time_s: float  # data loading + forward + loss + backward + optimizer step, device synchronized
    samples_per_s: float
    step_time_ms: float
    train_loss: float | None  # mean over the epoch's samples; None in JSON when it was NaN or infinite
    train_accuracy: float | None  # fraction of the epoch's training samples classified correctly; None when the
    # outputs name no classes (a regression) or a user's own train_step hands back no outputs
    input_wait_s: float | None = None  # of train_time_s, how long the loop waited for its next batch (host clock)
    # over train_time_s, the CPU seconds of the thread that ran the loop (engine/timing.py's thread_cpu_now): its own
    # work, not its OpenMP threads' or loader workers', nor its waits; None: stored before schema 7
    train_thread_cpu_s: float | None = None
    eval_time_s: float | None = None  # kept out of training throughput
    eval_samples: int = 0
    test_loss: float | None = None
    test_accuracy: float | None = None
    # sampled in the background during this epoch's training (engine/monitor.py); None where it cannot be told
    process_cpu_percent: float | None = None  # this process's CPU use, 100 = one core busy
    device_utilization_percent: float | None = None  # the GPU's own busy figure (NVML)
    device_power_mean_w: float | None = None
    device_energy_j: float | None = None
    # data-parallel runs (engine/distributed.py): train_time_s is the slowest rank's, this the fastest's
    fastest_rank_train_time_s: float | None = None
    # ... and each rank's own GPU utilisation, in rank order (device_utilization_percent is then their mean)
    rank_device_utilization_percent: list[float | None] | None = None


NO_BATCHES = 0  # the batch_size of a workload that takes no batches: boosted trees read every row each round


@dataclass
class RunSettings:
    """Everything that changes the numbers; two runs are comparable only when these agree."""

    batch_size: int  # samples per step, over all processes; NO_BATCHES for boosted trees
    epochs: int
    max_steps: int | None  # cap on training steps per epoch, None for full epochs
    max_eval_steps: int | None
    seed: int
    threads: int  # torch intra-op threads during the run
    data_source: str  # "real" or "synthetic"
    precision: TrainingPrecision = "fp32"  # "bf16": autocast (weights and optimizer stay fp32)
    mode: Mode = "seed"  # "seed": the published settings; "tuned": each device at its best (engine/tuning.py)
    workers: int = 0  # host loader processes; 0 = the training process loads
    tf32_matmul: bool = False  # CUDA fp32 matmuls on TF32 tensor cores (torch.backends.cuda.matmul.allow_tf32)
    tf32_cudnn: bool = False  # CUDA fp32 convolutions and RNNs on TF32 tensor cores (torch.backends.cudnn.allow_tf32)
    # tuned mode's other choices (engine/tuning.py), all off in seed mode
    channels_last: bool = False
    fused_optimizer: bool = False
    compiled: bool = False  # torch.compile
    step_graph: bool = False  # the whole training step replayed as one CUDA graph (engine/step_graph.py)
    cudnn_benchmark: bool = False
    device_resident: bool = False  # the dataset held on the device (in seed mode too: wherever it fits there)
    allocator_keeps_memory: bool = False  # glibc keeps freed blocks for reuse
    batch_size_auto: bool = False  # the batch size was grown for throughput (--batch-size auto), not the seed's
    world_size: int = 1  # processes training together (engine/distributed.py); batch_size is their global batch
    per_device_batch: bool = False  # --per-device-batch: the batch size asked for was each process's
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    overrides: dict[str, Any] = field(default_factory=dict)  # the --set values: a different model or training


@dataclass
class RunSummary:
    """One repeat in a few numbers. Steady-state figures are medians over the epochs after warm-up."""

    epochs_completed: int
    warmup_epoch_time_s: float | None
    steady_epochs: int
    steady_epoch_time_s: float | None
    steady_epoch_time_min_s: float | None
    steady_epoch_time_max_s: float | None
    steady_samples_per_s: float | None
    steady_step_time_ms: float | None
    final_test_accuracy: float | None
    best_test_accuracy: float | None


@dataclass
class RunRecord:
    workload: str
    seed_experiment: str  # S1…S5 of SEEDS.md; "" for a workload that is not a seed's (a plugin's, your model)
    device: str  # "cpu", "cuda:0", …
    device_name: str  # the product: CPU model or GPU name
    repeat: int  # 0-based
    settings: RunSettings
    started_utc: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    status: RunStatus = "running"
    error: str | None = None  # what went wrong, for status failed / oom / diverged
    parameter_count: int | None = None
    epochs: list[EpochRecord] = field(default_factory=list)
    model_build_s: float | None = None
    end_to_end_s: float | None = None  # model creation to the end of the last epoch, evaluation included
    diverged_at_step: int | None = None  # 1-based global step whose loss was first NaN or infinite
    target_accuracy: float | None = None
    time_to_target_train_s: float | None = None  # training time only, up to the first epoch reaching the target
    time_to_target_wall_s: float | None = None  # from model creation, evaluation included
    peak_device_memory_mib: float | None = None  # peak allocated on the accelerator; None on the CPU
    peak_rss_mib: float | None = None  # the process's peak resident memory up to the end of this run
    energy_j: float | None = None  # energy the device drew while training (every epoch), where NVML can tell
    monitor_note: str | None = None  # why device utilisation or energy is missing, when it is
    flops_per_sample: float | None = None  # one training step's matmul/conv FLOPs per sample (engine/flops.py)
    input_verdict: str | None = None  # "input-bound" or "compute-bound" (results/diagnosis.py)
    input_diagnosis: str | None = None  # the verdict's numbers and the lever that would help, in a sentence
    tuning_note: str | None = None  # tuned mode: what each option measured in its trial, and which was kept
    # Seconds this run spent choosing before training (tuned mode's trial, the --batch-size auto search): inside no
    # other figure. 0 when it reused choices an earlier run of the session made; None when nothing was chosen
    tuning_s: float | None = None
    peak_tflops: float | None = None  # the device's calibrated matmul peak at the run's precision, for MFU
    compile_recompiles: int | None = None  # torch.compile: graphs compiled beyond the first; None when not compiled
    compile_graph_breaks: int | None = None  # torch.compile: places the model left the graph for Python
    # what in the figures breaks physics or needs explaining (results/plausibility.py); None when nothing does
    plausibility_flags: str | None = None  # comma list: "above-peak", "above-bandwidth", "device-idle"
    plausibility_note: str | None = None  # each flag's numbers and what to do, "; " between them
    # The workload's definition (model, init, loss, optimizer, preprocessing) in 12 hex digits
    # (workloads/definition.py): runs of different definitions are never pooled. None: not recorded (a run stored
    # before schema 4, or a workload that could not be built to take it)
    definition: str | None = None
    # The process this repeat trained in, 12 hex digits made once per process: repeats are fresh processes, and
    # the speedup interval's unit is the process (results/compare.py). None: stored before schema 6, when every
    # repeat of a session ran in the session's one process
    process_id: str | None = None
    # The machine's run-to-run variation on this device when the run started (`devicebench calibrate`,
    # engine/run_to_run.py): the CV between fresh processes, a fraction, and its degrees of freedom; None where
    # it was never measured. An interval from one process a side includes it (results/stats.py)
    run_to_run_cv: float | None = None
    run_to_run_freedom: float | None = None

    @property
    def steady_epochs(self) -> list[EpochRecord]:
        return [epoch for epoch in self.epochs if epoch.phase == "steady"]

    def summary(self) -> RunSummary:
        steady = self.steady_epochs
        warmup = [epoch for epoch in self.epochs if epoch.phase == "warmup"]
        times = [epoch.train_time_s for epoch in steady]
        accuracies = [epoch.test_accuracy for epoch in self.epochs if epoch.test_accuracy is not None]
        return RunSummary(
            epochs_completed=len(self.epochs),
            warmup_epoch_time_s=warmup[0].train_time_s if warmup else None,
            steady_epochs=len(steady),
            steady_epoch_time_s=statistics.median(times) if times else None,
            steady_epoch_time_min_s=min(times) if times else None,
            steady_epoch_time_max_s=max(times) if times else None,
            steady_samples_per_s=statistics.median(e.samples_per_s for e in steady) if steady else None,
            steady_step_time_ms=statistics.median(e.step_time_ms for e in steady) if steady else None,
            final_test_accuracy=accuracies[-1] if accuracies else None,
            best_test_accuracy=max(accuracies) if accuracies else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "summary": dataclasses.asdict(self.summary())}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> RunRecord:
        """The run to_dict() wrote, every field checked; InvalidResult names the first wrong one by its path
        (`where` is this run's own: "runs[2]")."""
        record = cls(**_checked_fields(cls, data, where, derived=("summary",)))
        for index, epoch in enumerate(record.epochs):
            if epoch.epoch != index + 1:
                raise InvalidResult(
                    f"{_at(where, f'epochs[{index}].epoch')}: expected {index + 1} (epochs are "
                    f"numbered 1, 2, 3... in order, each once), got {epoch.epoch}"
                )
        return record


@dataclass
class Result:
    """One invocation on one machine: a session of runs. Its id makes importing it twice a no-op."""

    machine: dict[str, Any]  # devicebench.environment.machine_fingerprint()
    config: dict[str, Any]  # the RunConfig as asked for
    created_utc: str
    devicebench_version: str
    runs: list[RunRecord] = field(default_factory=list)
    interrupted: bool = False  # the user stopped the run; the finished epochs are all here
    result_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    schema_version: int = SCHEMA_VERSION

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "result_id": self.result_id,
            "devicebench_version": self.devicebench_version,
            "created_utc": self.created_utc,
            "interrupted": self.interrupted,
            "machine": self.machine,
            "config": self.config,
            "runs": [run.to_dict() for run in self.runs],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> Result:
        """The session to_dict() wrote, every field of it and of its runs checked (types, ranges, statuses, epoch
        numbers); InvalidResult names the first wrong one by its path: `runs[2].epochs[1].samples_per_s: ...`."""
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version not in READABLE_SCHEMA_VERSIONS or isinstance(version, bool):
            raise ValueError(
                f"results of schema version {version!r} cannot be read by this devicebench "
                f"(schema version {SCHEMA_VERSION}); upgrade devicebench or re-export them"
            )
        result = cls(**_checked_fields(cls, data, where, derived=("schema_version",)))
        if version == FIRST_DEFINITIONS:  # another torch drew other weights: the same model had two (migrations.py)
            for run in result.runs:
                run.definition = None
        seen: dict[str, int] = {}
        for index, run in enumerate(result.runs):
            if run.run_id in seen:
                raise InvalidResult(
                    f"{_at(where, f'runs[{index}].run_id')}: {run.run_id!r} is also the id of "
                    f"runs[{seen[run.run_id]}]; each run has its own"
                )
            seen[run.run_id] = index
        return result

    def write_json(self, path: Path) -> None:
        """Write strict JSON atomically: a crash mid-write leaves the previous file, never half a file.

        NaN and infinity (a diverged loss) are written as null; the run's status and error say what happened.
        """
        write_atomically(path, json.dumps(finite_or_none(self.to_dict()), indent=2, allow_nan=False) + "\n")

    @classmethod
    def read_json(cls, path: Path) -> Result:
        return cls.from_dict(json.loads(path.read_text()))


class InvalidResult(ValueError):
    """A result with a field missing, unknown, of the wrong type or out of range; the message starts with the
    field's path: `runs[2].epochs[1].samples_per_s: expected a finite number ≥ 0, got 'fast'`."""


# The ranges of numbers, by field name. Every other number is a time, rate, count, size, memory or energy: ≥ 0
_ANY_SIGN = frozenset({"train_loss", "test_loss", "seed"})  # a loss can be negative; torch takes any seed
_AT_LEAST_ONE = frozenset({"epoch", "threads", "world_size"})  # batch_size may be NO_BATCHES
_IDS = frozenset({"run_id", "result_id"})  # strings that must not be empty
LARGEST_WHOLE_NUMBER = 2**63 - 1  # SQLite's INTEGER, where every setting and count is stored
# No figure is larger than the largest storable whole number (9.2e18 s is 292 billion years; 9.2e18 samples/s is
# beyond any device), nor, losses aside, nonzero and smaller than its inverse (1.1e-19 s is below any clock's
# tick): then sums, means, products and ratios of figures stay far inside a float's range (about 1.8e308), and no
# comparison or report of imported runs can overflow. A loss may be tiny (a regression fitted exactly)
SMALLEST_FIGURE = 1 / LARGEST_WHOLE_NUMBER
_TINY_ALLOWED = frozenset({"train_loss", "test_loss"})
# engine.timing.wall_clock_utc's one form of a time: in it, the order of the texts is the order of the times
UTC_TIME_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
_UTC_TIME_SHAPE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")  # strptime takes "1" for "01"
_UTC_TIMES = frozenset({"started_utc", "created_utc"})


def _range(name: str) -> tuple[float, float]:
    if name in _ANY_SIGN:
        return -LARGEST_WHOLE_NUMBER, LARGEST_WHOLE_NUMBER
    if "accuracy" in name:  # a fraction of samples
        return 0.0, 1.0
    return (1.0 if name in _AT_LEAST_ONE else 0.0), LARGEST_WHOLE_NUMBER


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where and not name.startswith("[") else f"{where}{name}"


def _shown(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (bool, type(None))) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# a dataclass's annotations, evaluated once: evaluating them for every epoch took half of a large import's time
_type_hints = functools.cache(typing.get_type_hints)


def _checked_fields(cls: type, data: Any, where: str, derived: tuple[str, ...] = ()) -> dict[str, Any]:
    """`data`'s fields for `cls(**...)`, each checked against the dataclass's annotation; `derived` keys are
    dropped (recomputed, never trusted). Raises InvalidResult naming the field by its path."""
    if not isinstance(data, dict):
        raise InvalidResult(f"{where or cls.__name__}: expected an object, got {_shown(data)}")
    hints = _type_hints(cls)
    fields = {item.name: item for item in dataclasses.fields(cls)}
    for name in data:
        if name not in fields and name not in derived:
            raise InvalidResult(f"{_at(where, str(name))}: not a field this devicebench knows (in a {cls.__name__})")
    checked = {}
    for name, item in fields.items():
        if name not in data:
            if item.default is dataclasses.MISSING and item.default_factory is dataclasses.MISSING:
                raise InvalidResult(f"{_at(where, name)}: missing")
            continue
        checked[name] = _checked(data[name], hints[name], _at(where, name), name)
    return checked


def _checked(value: Any, hint: Any, where: str, name: str) -> Any:
    """`value` if it is of the type `hint` (and in `name`'s range, for a number), else InvalidResult."""
    origin, arguments = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in arguments:
            return None
        (hint,) = [argument for argument in arguments if argument is not type(None)]
        return _checked(value, hint, where, name)
    if isinstance(hint, type) and dataclasses.is_dataclass(
        hint
    ):  # its own from_dict adds its checks across fields (RunRecord's epochs)
        return (
            hint.from_dict(value, where) if hasattr(hint, "from_dict") else hint(**_checked_fields(hint, value, where))
        )
    if hint is Any:
        return value
    if origin is Literal:
        if isinstance(value, str) and value in arguments:
            return value
        raise InvalidResult(f"{where}: expected one of {', '.join(map(repr, arguments))}, got {_shown(value)}")
    if origin is list:
        if not isinstance(value, list):
            raise InvalidResult(f"{where}: expected a list, got {_shown(value)}")
        return [_checked(item, arguments[0], f"{where}[{index}]", name) for index, item in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise InvalidResult(f"{where}: expected an object, got {_shown(value)}")
        return value  # JSON objects' keys are strings; the values are whatever the workload took
    if hint is str and name in _UTC_TIMES:
        return _utc_time(value, where)
    if hint is str:
        if isinstance(value, str) and (value or name not in _IDS):
            return value
        raise InvalidResult(f"{where}: expected a {'non-empty ' if name in _IDS else ''}string, got {_shown(value)}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise InvalidResult(f"{where}: expected true or false, got {_shown(value)}")
    if hint in (int, float):
        low, high = _range(name)
        whole = hint is int
        number = (
            isinstance(value, (int, float))
            and not isinstance(value, bool)
            and (isinstance(value, int) if whole else math.isfinite(value))
        )
        kind = "a whole number" if whole else "a finite number"
        if number and abs(value) > LARGEST_WHOLE_NUMBER:
            largest = LARGEST_WHOLE_NUMBER if whole else f"{LARGEST_WHOLE_NUMBER:.3g}"
            raise InvalidResult(
                f"{where}: expected {kind} of magnitude ≤ {largest} (more than any "
                f"run measures, and more than can be stored or summed), got {_shown(value)}"
            )
        if number and not whole and 0 < abs(value) < SMALLEST_FIGURE and name not in _TINY_ALLOWED:
            raise InvalidResult(
                f"{where}: expected 0 or {kind} of magnitude ≥ {SMALLEST_FIGURE:.3g} (less than "
                f"any clock or counter measures; dividing by it overflows), got {_shown(value)}"
            )
        if number and low <= value <= high:
            return value if whole else float(value)
        bounds = "" if name in _ANY_SIGN else f"in [{low:g}, {high:g}]" if high == 1 else f"≥ {low:g}"
        raise InvalidResult(f"{where}: expected {kind}{' ' + bounds if bounds else ''}, got {_shown(value)}")
    raise TypeError(f"{where}: no check for fields of type {hint!r}")  # a new annotation: teach _checked it


def _utc_time(value: Any, where: str) -> str:
    """`value` if it is a real UTC time in UTC_TIME_FORMAT, else InvalidResult."""
    if isinstance(value, str) and _UTC_TIME_SHAPE.fullmatch(value):
        try:
            datetime.datetime.strptime(value, UTC_TIME_FORMAT)
            return value
        except ValueError:  # month 13, hour 25, February 30
            pass
    raise InvalidResult(f"{where}: expected a UTC time such as 2026-03-01T09:30:00Z, got {_shown(value)}")


def write_atomically(path: Path, text: str) -> None:
    """Write `text` to `path` so that a crash mid-write leaves the previous file, never half a file, and a failed
    write leaves no `.partial` file; a device, a terminal or a read-only file is refused (files.write_atomically)."""
    files.write_atomically(path, text)


def finite_or_none(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: finite_or_none(item) for key, item in value.items()}
    if isinstance(value, list):
        return [finite_or_none(item) for item in value]
    return value
