"""`devicebench.run`: the Python API, for the seeds' workloads and for your own model on your own data.

    import devicebench as db
    result = db.run(model=lambda: MyNet(), data=db.TensorData(x_train, y_train, x_test, y_test),
                    loss="cross_entropy", optimizer=lambda params: torch.optim.AdamW(params, 1e-3),
                    batch_size=64, epochs=3, devices="auto")
    print(result.table()); result.save()

It makes the `RunConfig` that `devicebench run` would make and trains with the same runner, so the numbers,
the tables, the store and the report are those of the command line. See examples/own_model.py.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from rich.console import Console

from devicebench import planning, runner
from devicebench.choices import CompileChoice, Mode, PrecisionChoice
from devicebench.config import RunConfig
from devicebench.planning import Plan
from devicebench.report.html import comparison_html
from devicebench.report.progress import RichReporter
from devicebench.report.tables import comparison_tables, comparison_text
from devicebench.results import schema
from devicebench.results.compare import compare
from devicebench.results.store import Store, default_db_path
from devicebench.workloads import OutputKind, TrainStep
from devicebench.workloads.own import (
    LossSource,
    ModelSource,
    OptimizerSource,
    own_workload,
)


class Result(schema.Result):
    """A result as a Python user holds it: the record of every run, with the tables, the store and the notebook
    view on top. `Result.read_json(path)` reads an exported one back."""

    @classmethod
    def of(cls, result: schema.Result) -> Result:
        return cls(**{field.name: getattr(result, field.name) for field in dataclasses.fields(result)})

    def table(self) -> str:
        """The tables `devicebench run` prints: a row per device, the speedup against the CPU, as plain text."""
        return comparison_text([self])

    def show(self, *, wide: bool = False, console: Console | None = None) -> None:
        """Print the tables `devicebench run` prints, fitted to the terminal's width with every number whole
        (`table()` is 200 columns of text, every column shown); `wide`: every column, as `run --wide`."""
        console = console or Console()
        for part in comparison_tables(compare([self]), wide=wide):
            console.print(part)

    def save(self, db: str | Path | None = None) -> Path:
        """Store every run in the results database (`db`, else $DEVICEBENCH_DB, else the user data folder's), where
        `devicebench compare`, `history` and `report` find it; saving twice adds nothing. Returns its path."""
        with Store(default_db_path(db)) as store:
            store.import_result(self)
            return store.path

    def _repr_html_(self) -> str:
        """How Jupyter shows a result: the same tables, in HTML."""
        return comparison_html([self])


def run(
    workloads: str | Sequence[str] | RunConfig = (),
    *,
    model: ModelSource | None = None,
    data: Any = None,
    data_dir: str | None = None,
    loss: LossSource = "cross_entropy",
    optimizer: OptimizerSource = "adam",
    train_step: TrainStep | None = None,
    output: OutputKind | None = None,
    name: str | None = None,
    devices: str = "auto",
    epochs: int | None = None,
    batch_size: int | Literal["auto"] | None = None,
    max_steps: int | None = None,
    max_eval_steps: int | None = None,
    repeats: int = 1,
    seed: int = 0,
    threads: int | None = None,
    workers: int | None = None,
    mode: Mode = "seed",
    precision: PrecisionChoice = "auto",
    compile: CompileChoice = "auto",
    target_accuracy: float | None = None,
    progress: bool = True,
) -> Result:
    """Train on every device of `devices` and return every measurement: `result.table()` shows the comparison,
    `result.save()` stores it where `devicebench compare` and `devicebench report` find it.

    What to train, one of:
    - `workloads`: names or patterns of registered workloads ("mnist-cnn2", "cifar*"); none = the quick suite.
      `data` is then "auto", "real" or "synthetic" (see `devicebench run --help`), `data_dir` your images.
      A `RunConfig` instead says everything, and no other argument may be given.
    - `model`: your model, a torch.nn.Module (copied for every run) or a function that builds one, with `data`:
      a `TensorData`, a `TorchData`, a torch Dataset, a (train, test) pair of Datasets, or a tuple
      (x_train, y_train[, x_test, y_test]) of tensors or arrays.
      `loss`: "cross_entropy", "binary_cross_entropy", "mse", "l1", a torch loss module (or its class) or a
      function (outputs, targets) → loss. `optimizer`: "adam", "adamw", "sgd" (learning rate 1e-3) or a function
      of the model's parameters. `train_step(model, (inputs, targets), optimizer)`: a whole step of your own
      (forward, loss, backward, optimizer step) returning the loss, or (loss, outputs) for the accuracy; it
      is timed like any step. `output`: what the outputs mean for the accuracy ("logits", "binary_logit",
      "probabilities", "values" = none); a named loss says it. `name`: the name results are kept under
      (default: the model's class name).

    The rest are `devicebench run`'s options (see `devicebench run --help`): `epochs` and `batch_size` default
    to the workload's (3 and 32 for your model), `batch_size="auto"` grows it for throughput; `progress=False`
    prints nothing while training.
    """
    job_plan = plan(**{name: value for name, value in locals().items() if name != "progress"})
    screen = RichReporter(Console(stderr=True, soft_wrap=True), quiet=not progress)  # an epoch's line stays one line
    try:
        return Result.of(runner.run(job_plan, screen))
    finally:
        screen.close()


def plan(workloads: str | Sequence[str] | RunConfig = (), **arguments: Any) -> Plan:
    """What `run(workloads, **arguments)` would train, job by job (every workload on every device, with its
    hyperparameters, batch size, epochs and steps, data and settings), checked, without loading any data or training
    anything. It takes run()'s arguments but `progress`; `print(db.plan("mnist-*").jobs)`."""
    given = inspect.signature(run).bind(workloads, **arguments)  # an argument run() would refuse fails here too
    given.apply_defaults()
    options = {name: value for name, value in given.arguments.items() if name != "progress"}
    return planning.plan(_config(**options))


def _config(
    workloads: str | Sequence[str] | RunConfig,
    model: ModelSource | None,
    data: Any,
    loss: LossSource,
    optimizer: OptimizerSource,
    train_step: TrainStep | None,
    output: OutputKind | None,
    name: str | None,
    batch_size: int | Literal["auto"] | None,
    **settings: Any,
) -> RunConfig:
    """The RunConfig that `devicebench run` would make of run()'s arguments."""
    auto = batch_size == "auto"
    settings = {**settings, "batch_size": None if auto else batch_size, "batch_size_auto": auto}
    if isinstance(workloads, RunConfig):
        defaults = {field.name: field.default for field in dataclasses.fields(RunConfig)}
        given = [key for key, value in settings.items() if value != defaults[key]]
        if model is not None or data is not None or given:  # data: RunConfig.data says it
            raise TypeError(
                "a RunConfig says everything; give the other settings inside it, not beside it "
                f"({', '.join(given + ['model'] * (model is not None) + ['data'] * (data is not None))})"
            )
        return workloads
    if model is not None:
        if workloads:
            raise TypeError("give workloads or a model of your own, not both: run them one after the other")
        if data is None:
            raise TypeError(
                "your model needs data=: a TensorData(x_train, y_train, x_test, y_test), a TorchData or a torch Dataset"
            )
        own = own_workload(model, data, loss=loss, optimizer=optimizer, train_step=train_step, output=output, name=name)
        return RunConfig(workloads=(own.name,), **settings)
    if data is not None and not isinstance(data, str):
        raise TypeError(
            "data= of your own goes with model=; a registered workload takes data='auto', 'real' or "
            "'synthetic', or images of yours through data_dir="
        )
    return RunConfig(
        workloads=(workloads,) if isinstance(workloads, str) else tuple(workloads), data=data or "auto", **settings
    )
