"""What a user asks `devicebench run` for, checked at the edge, and the suites.

A suite is a list of workloads plus how long to train each: `quick` trains every workload for a few reduced
epochs (the default main job, minutes on a laptop CPU); `seeds` trains each as its seed did. Naming workloads
on the command line runs those at their seed settings, or at the suite's when `--suite` is given too.
Explicit flags (`--epochs`, `--batch-size`, `--max-steps`, `--max-eval-steps`) beat both.

    python -c "from devicebench.config import RunConfig; print(RunConfig().plan_for('mnist-cnn2'))"
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import dataclass
from typing import Any, Literal

from devicebench.choices import COMPILE_CHOICES, DATA_CHOICES, MODES, PRECISION_CHOICES
from devicebench.data import real_data_missing
from devicebench.data.sources import QUICK_SUITE_DOWNLOAD_LIMIT_BYTES
from devicebench.engine.loop import TrainingPlan
from devicebench.errors import DevicebenchError
from devicebench.results.schema import LARGEST_WHOLE_NUMBER
from devicebench.workloads import Workload, get_workload, list_workloads
from devicebench.workloads.own import ORIGIN as OWN_ORIGIN
from devicebench.workloads.own import OwnModelError, own_workload_from_specs

SuiteName = Literal["quick", "seeds"]
SUITES: dict[str, str] = {
    "quick": "every workload but the reference models, a few reduced epochs each: the default main job",
    "seeds": "every workload but the reference models at the settings its seed experiment published (hours on a CPU)",
}
# The quick suite's time budget: each run is sized to its share of it (runner.py), so the main job answers in about
# two minutes on two cores of any x86-64 CPU, however fast each workload is there.
QUICK_BUDGET_S = 120.0
# A reference model named without --budget, --epochs or --max-steps (`devicebench run resnet50`) gets this much of a
# budget: its published settings are hours to days on a laptop CPU (90 epochs of ResNet-50); the budget sizes it
REFERENCE_BUDGET_S = 120.0


class ConfigError(DevicebenchError, ValueError):
    """A request that cannot be run; the message says what is wrong and what to do instead."""


@dataclass(frozen=True)
class RunConfig:
    workloads: tuple[str, ...] = ()  # names or shell patterns; empty = the suite's workloads
    suite: SuiteName | None = None  # None: "quick" when no workload is named, else "seeds"
    devices: str = "auto"
    epochs: int | None = None
    batch_size: int | None = None
    max_steps: int | None = None
    max_eval_steps: int | None = None
    repeats: int = 1
    seed: int = 0
    threads: int | None = None  # torch intra-op threads; None leaves torch's default
    workers: int | None = None  # loader processes; None: 0 for in-memory data, else one per core up to 4
    data: str = "auto"
    data_dir: str | None = None
    target_accuracy: float | None = None
    budget_s: float | None = None  # seconds the whole run may take; None: the quick suite's QUICK_BUDGET_S, else none
    overrides: tuple[str, ...] = ()  # `--set key=value`: workload parameters other than the seed's
    # the words a user gave, checked below against choices.py's values; a Job carries them as those types
    mode: str = "seed"
    precision: str = "auto"
    compile: str = "auto"
    batch_size_auto: bool = False  # grow the batch for throughput (engine/tuning.py: choose_batch_size)
    nproc: int = 1  # processes per machine training together (engine/distributed.py)
    nnodes: int = 1  # machines training together
    per_device_batch: bool = False  # --batch-size is each process's, not the global batch
    # your own model instead of named workloads (workloads/own.py): MODULE:FUNCTION specs; `data` is then one too
    model: str | None = None
    loss: str = "cross_entropy"  # a name of workloads.own.LOSSES, or MODULE:ATTRIBUTE
    optimizer: str = "adam"  # a name of workloads.own.OPTIMIZERS, or MODULE:ATTRIBUTE

    def __post_init__(self) -> None:
        self._check_own_model()
        for flag, value, choices in (
            ("--mode", self.mode, MODES),
            ("--precision", self.precision, PRECISION_CHOICES),
            ("--compile", self.compile, COMPILE_CHOICES),
        ):
            if value not in choices:
                raise ConfigError(f"unknown {flag} {value!r}; choose one of: {', '.join(choices)}")
        if self.nproc < 1 or self.nnodes < 1:
            raise ConfigError(f"--nproc and --nnodes must be at least 1, got {self.nproc} and {self.nnodes}")
        if self.seed < 0:
            raise ConfigError(f"--seed must be 0 or more, got {self.seed}")
        self._check_sizes()
        if self.nproc * self.nnodes > 1:
            self._check_distributable()
        if self.batch_size_auto and self.batch_size is not None:
            raise ConfigError("--batch-size is either a number or auto, not both")
        if self.mode == "seed" and (self.precision, self.compile) != ("auto", "auto"):
            given = "--precision" if self.precision != "auto" else "--compile"
            raise ConfigError(
                f"{given} is a tuned-mode choice; seed mode trains in fp32, eager, as the seeds did. Add --mode tuned"
            )
        if self.suite is not None and self.suite not in SUITES:
            raise ConfigError(f"unknown suite {self.suite!r}; choose one of: {', '.join(SUITES)}")
        if self.data not in DATA_CHOICES and self.model is None:
            raise ConfigError(
                f"unknown data source {self.data!r}; choose one of: {', '.join(DATA_CHOICES)}, or "
                "MODULE:FUNCTION with --model"
            )
        if self.data == "real" and self.model is None:
            self._check_real_data()
        for name in ("epochs", "batch_size", "max_steps", "max_eval_steps", "repeats", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                flag = "--" + name.replace("_", "-")
                raise ConfigError(f"{flag} must be a whole number of at least 1, got {value}")
        if self.workers is not None and self.workers < 0:
            raise ConfigError(f"--workers must be 0 (load in the training process) or more, got {self.workers}")
        if self.budget_s is not None and not 0 < self.budget_s < float("inf"):
            raise ConfigError(f"--budget must be a positive time such as 90s, 5m or 1h30m, got {self.budget_s} s")
        if self.budget_s is not None and self.nproc * self.nnodes > 1:
            raise ConfigError(
                "--budget sizes the runs of a single process; with --nproc or --nnodes give --epochs "
                "and --max-steps instead"
            )
        if self.target_accuracy is not None and not 0 < self.target_accuracy <= 1:
            raise ConfigError(
                f"--target-accuracy is a fraction in (0, 1], got {self.target_accuracy} (write 0.98 for 98%)"
            )
        for workload in self.selected_workloads():  # unknown names and parameters fail here, before any training
            if self.overrides_for(workload):
                self._check_buildable(workload)

    def _check_sizes(self) -> None:
        """Numbers too large to store, and more threads or loader processes than the machine has cores (a typo:
        each is a thread or a process started, and they would only compete for the cores)."""
        for name in ("epochs", "batch_size", "max_steps", "max_eval_steps", "repeats", "seed", "nproc", "nnodes"):
            value = getattr(self, name)
            if value is not None and value > LARGEST_WHOLE_NUMBER:
                raise ConfigError(
                    f"--{name.replace('_', '-')} {value} is too large: at most {LARGEST_WHOLE_NUMBER}, "
                    "the largest whole number the results database stores"
                )
        cores = os.cpu_count() or 1
        for flag, value, what in (
            ("--threads", self.threads, "threads"),
            ("--workers", self.workers, "loader processes"),
        ):
            if value is not None and value > cores:
                raise ConfigError(
                    f"{flag} {value} is more than this machine's {cores} logical cores, and more {what} "
                    f"than cores only compete for them; use {flag} {cores} or less"
                )

    def _check_real_data(self) -> None:
        """--data real on a dataset devicebench cannot download (ImageNet) needs --data-dir, a folder of its images:
        refused now, with how to get them, rather than by each run."""
        for workload in self.selected_workloads():
            missing = real_data_missing(workload.dataset, self.data_dir)
            if missing is not None:
                raise ConfigError(f"--data real for {workload.name}: {missing}")

    def _check_own_model(self) -> None:
        """--model, --data, --loss and --optimizer name a model of the user's, and only together."""
        own_flags = ("--loss", self.loss != "cross_entropy"), ("--optimizer", self.optimizer != "adam")
        if self.model is None:
            if ":" in self.data:
                raise ConfigError(
                    f"--data {self.data} gives data for a model of your own: add --model "
                    "MODULE:FUNCTION (a workload's own data comes from --data-dir)"
                )
            for flag, given in own_flags:
                if given:
                    raise ConfigError(
                        f"{flag} is for a model of your own (--model); a workload trains with its "
                        "seed's (change its parameters with --set)"
                    )
            return
        if self.workloads:
            raise ConfigError("name workloads or give --model, not both: run them one after the other")
        if ":" not in self.data:
            raise ConfigError(
                f"--model needs --data MODULE:FUNCTION, a function that returns your data (not --data {self.data})"
            )

    def _check_distributable(self) -> None:
        """What several processes cannot do yet, refused before any process starts."""
        if self.mode == "tuned" or self.batch_size_auto:
            raise ConfigError(
                "--nproc trains in seed mode at a fixed batch size for now; drop --mode tuned and --batch-size auto"
            )
        world = self.nproc * self.nnodes
        for workload in self.selected_workloads():
            if workload.trainer is not None:
                raise ConfigError(f"{workload.name} is not a torch model: it cannot train in several processes")
            batch = self.batch_size_for(workload)
            if not self.per_device_batch and batch % world:
                raise ConfigError(
                    f"{workload.name}'s global batch of {batch} does not split evenly over {world} "
                    f"processes; give --batch-size a multiple of {world}, or --per-device-batch"
                )

    def _check_buildable(self, workload: Workload) -> None:
        """Build the model on the meta device (no memory) so that a value it refuses fails now, not mid-suite."""
        try:
            workload.parameter_count(self.hyperparameters_for(workload))
        except (ValueError, RuntimeError) as error:
            settings = " ".join(f"--set {item}" for item in self.overrides)
            raise ConfigError(f"{workload.name} cannot be built with {settings}: {error}") from None

    @property
    def effective_suite(self) -> SuiteName:
        return self.suite or ("seeds" if self.workloads or self.model else "quick")

    @property
    def largest_download_bytes(self) -> int | None:
        """The quick suite on `--data auto` downloads no large dataset unasked: one that is not cached runs on
        synthetic data, saying how to get it. None: no limit (`--data real`, named workloads, the seeds suite)."""
        return QUICK_SUITE_DOWNLOAD_LIMIT_BYTES if self.effective_suite == "quick" and self.data == "auto" else None

    @property
    def effective_budget_s(self) -> float | None:
        """Seconds the whole run may take: --budget; else the quick suite's own, unless --max-steps sizes its epochs
        or several processes train (they would each size theirs differently); else, for named reference models
        without --epochs, REFERENCE_BUDGET_S each; else none."""
        if self.budget_s is not None:
            return self.budget_s
        sized = self.max_steps is None and self.nproc * self.nnodes == 1
        if self.effective_suite == "quick" and sized:
            return QUICK_BUDGET_S
        if sized and self.epochs is None and self.workloads and self.model is None:
            try:
                references = sum(not entry.in_suites for entry in self.selected_workloads())
            except ConfigError:  # an unknown name: the plan says so
                return None
            return REFERENCE_BUDGET_S * references if references else None
        return None

    def selected_workloads(self) -> list[Workload]:
        """The workloads to run; the suite leaves out those this installation cannot run (see `skipped`)."""
        if self.model is not None:
            return [own_from_specs(self.model, self.data, self.loss, self.optimizer)]
        if not self.workloads:
            return [entry for entry in list_workloads() if entry.in_suites and entry.requires() is None]
        selected: list[Workload] = []
        for name in self.workloads:
            matches = list_workloads(name) if any(c in name for c in "*?[") else [registered(name)]
            if not matches:
                known = ", ".join(w.name for w in list_workloads())
                raise ConfigError(f"no workload matches {name!r}; known workloads: {known}")
            for match in matches:
                if match.requires() is not None:
                    raise ConfigError(f"{match.name} {match.requires()}")
            selected += [match for match in matches if match not in selected]
        return selected

    def skipped(self) -> list[tuple[Workload, str]]:
        """The suite's workloads this installation cannot run, each with what it needs."""
        if self.workloads or self.model:
            return []
        needs = ((entry, entry.requires()) for entry in list_workloads() if entry.in_suites)
        return [(entry, need) for entry, need in needs if need is not None]

    def overrides_for(self, workload: Workload) -> dict[str, Any]:
        """The `--set` values for `workload`, each converted to the type of the parameter's default."""
        parsed: dict[str, Any] = {}
        for item in self.overrides:
            name, equals, text = item.partition("=")
            name = name.strip()
            if not equals or not name:
                raise ConfigError(f"--set {item!r} is not KEY=VALUE; write e.g. --set learning_rate=0.001")
            if name not in workload.defaults:
                listed = workload.origin != OWN_ORIGIN  # a user's model is not in `devicebench list`
                raise ConfigError(
                    f"{workload.name} has no parameter {name!r}; its parameters: "
                    f"{', '.join(workload.defaults)}" + (f" (see `devicebench list {workload.name}`)" if listed else "")
                )
            if name in parsed:
                raise ConfigError(f"--set {name} is given twice")
            parsed[name] = _parameter_value(workload, name, text.strip())
        for name, flag in (("batch_size", self.batch_size), ("epochs", self.epochs)):
            if name in parsed and flag is not None:
                raise ConfigError(f"--set {name} and --{name.replace('_', '-')} both given; keep one")
        return parsed

    def hyperparameters_for(self, workload: Workload) -> dict[str, Any]:
        """The seed's hyperparameters with every override applied: what the model and optimizer are built from."""
        return {**workload.defaults, **self.overrides_for(workload), "batch_size": self.batch_size_for(workload)}

    def batch_size_for(self, workload: Workload) -> int:
        """Samples per step; 0 for a workload without batches (boosted trees: every round sees every row)."""
        if "batch_size" not in workload.defaults:
            return 0
        return self.batch_size or self.overrides_for(workload).get("batch_size") or workload.defaults["batch_size"]

    def plan_for(self, workload: Workload | str) -> TrainingPlan:
        """How long to train `workload`: explicit flags, else the suite's reduced settings, else the seed's.

        --max-steps caps evaluation too unless --max-eval-steps is given. Within a time budget the runner sizes
        each epoch's steps itself (the quick suite's step cap is then left out), except for a workload with its
        own trainer (boosted trees), which keeps the quick suite's."""
        workload = registered(workload) if isinstance(workload, str) else workload
        quick = self.effective_suite == "quick"
        sized = self.effective_budget_s is not None and workload.trainer is None
        epochs = self.epochs or self.overrides_for(workload).get("epochs")
        return TrainingPlan(
            epochs=epochs or (workload.quick.epochs if quick else workload.defaults["epochs"]),
            max_steps=self.max_steps or (workload.quick.max_steps if quick and not sized else None),
            max_eval_steps=self.max_eval_steps or self.max_steps or (workload.quick.max_eval_steps if quick else None),
            target_accuracy=self.target_accuracy,
        )

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "workloads": list(self.workloads), "suite": self.effective_suite}


TRUE_WORDS, FALSE_WORDS = ("true", "yes", "on", "1"), ("false", "no", "off", "0")

# The one rule for how large a `--set` float may be, by parameter name (every workload's, and your model's): a
# value outside trains nothing useful, or overflows to inf/NaN in the first steps, which is a mistyped request,
# not a measurement. Each: (lowest, whether the lowest itself is allowed, highest, the words for the message).
FLOAT_BOUNDS: dict[str, tuple[float, bool, float, str]] = {
    # 0 never moves the weights; no optimizer here (SGD, Adam, boosting's shrinkage) converges above 10
    "learning_rate": (0.0, False, 10.0, "a learning rate must be more than 0 and at most 10"),
    # momentum of 1 or more adds up every gradient ever taken: the weights run away
    "momentum": (0.0, True, 0.999, "momentum must be 0 or more and less than 1 (at most 0.999)"),
    # a decay above 1 shrinks the weights faster than any gradient can grow them
    "weight_decay": (0.0, True, 1.0, "weight decay must be between 0 and 1"),
    # epsilon only keeps Adam's division finite; above 1 it swamps the gradient scale it divides by
    "adam_epsilon": (0.0, True, 1.0, "Adam's epsilon must be between 0 and 1"),
}


def _parameter_value(workload: Workload, name: str, text: str) -> Any:
    """`text` as the type of the parameter's default, or a ConfigError that says what was expected."""
    default = workload.defaults[name]
    kind = type(default)
    try:
        if kind is bool:
            if text.lower() not in TRUE_WORDS + FALSE_WORDS:
                raise ValueError(text)
            value: Any = text.lower() in TRUE_WORDS
        elif kind is int:
            value = int(text)
        elif kind is float:
            value = float(text)
        else:
            value = text
    except ValueError:
        raise ConfigError(
            f"--set {name}={text!r}: {workload.name}'s {name} is a {kind.__name__} (its default is {default!r})"
        ) from None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, int) and value > LARGEST_WHOLE_NUMBER:
            raise ConfigError(
                f"--set {name}={text!r} is too large: at most {LARGEST_WHOLE_NUMBER}, the largest whole "
                "number the results database stores"
            )
        if not math.isfinite(value) or value < 0 or (name in ("batch_size", "epochs") and value < 1):
            raise ConfigError(
                f"--set {name}={text!r}: must be a finite number"
                f"{' of at least 1' if name in ('batch_size', 'epochs') else ', zero or more'}"
            )
        if name in FLOAT_BOUNDS:
            lowest, lowest_allowed, highest, rule = FLOAT_BOUNDS[name]
            if not (value >= lowest if lowest_allowed else value > lowest) or value > highest:
                raise ConfigError(f"--set {name}={text!r}: {rule} (the default is {default!r})")
    return value


@functools.lru_cache(maxsize=8)  # imported, called and checked once: the data may take a while to load
def own_from_specs(model: str, data: str, loss: str, optimizer: str) -> Workload:
    """The workload of --model, --data, --loss and --optimizer, built once per process."""
    try:
        return own_workload_from_specs(model, data, loss, optimizer)
    except OwnModelError as error:
        raise ConfigError(str(error)) from None


def registered(name: str) -> Workload:
    """The registered workload `name`, or a ConfigError listing those that are."""
    try:
        return get_workload(name)
    except KeyError as error:
        raise ConfigError(error.args[0]) from None
