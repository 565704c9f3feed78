"""S5: gradient-boosted decision trees, "4 GPUs about 23.2x faster than CPU (RAPIDS)".

The overview quotes the figure without a model or data set. Our reading (SEEDS.md): XGBoost's `hist` tree
method on the CPU against the same booster with `device="cuda"`, on a real table and on a synthetic one of
chosen size:
- `gbdt-covertype`: UCI Covertype, 464,809 train / 116,203 test rows of 54 features, 7 cover types
  (multi:softprob), split by a fixed hash (data/tables.py).
- `gbdt-synthetic`: a seeded binary-classification table of `rows` x `features` (binary:logistic); the size is
  what `--set rows=... features=...` sweeps. The default, 1,000,000 rows (800,000 of them for training) x 50
  features, is large enough for a GPU to have work to do and still takes only about 1.5 s an epoch of 10 rounds
  on 2 idle CPU cores (plus about 5 s to make the table and quantise it); `--set rows=200000` is 0.5 s an epoch.

A boosting round adds one tree per class and reads every training row, so here a "step" is a round and an
"epoch" a block of `rounds_per_epoch` rounds: samples per epoch = training rows x rounds. Each epoch is timed
as a whole by the run's Stopwatch, with nothing but `booster.update` inside; losses and accuracies are read
after its clock stops. The train loss and accuracy are those of the model at the epoch's end, on every
training row (the torch loop reports the mean over the epoch's steps instead). XGBoost is imported only
when a booster is built, so `devicebench list` works without the `gbdt` extra.

    devicebench run gbdt-synthetic --devices cpu --epochs 2 --set rows=50000
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from devicebench.data.sources import dataset_spec
from devicebench.data.tables import TableDataset
from devicebench.engine.loop import (
    PROGRESS_UPDATES_PER_EPOCH,
    Reporter,
    TrainingPlan,
    capped,
    note_time_to_target,
    timed_epoch,
    total_energy_j,
)
from devicebench.engine.monitor import Monitor
from devicebench.engine.timing import Stopwatch
from devicebench.results.schema import RunRecord
from devicebench.workloads import Hyperparameters, Published, QuickSettings, workload

INSTALL_HINT = "needs xgboost: pip install 'devicebench[gbdt]'"
PROBABILITY_FLOOR = 1e-15  # log-loss clips predicted probabilities here, so a confident mistake costs ~34.5, not inf
SYNTHETIC_CLASSES = 2  # synthetic-table's default: binary, as the GPU tree benchmarks' synthetic sets are

BOOSTING = {
    "epochs": 10,
    "rounds_per_epoch": 10,  # boosting rounds (trees per class) per timed epoch: a round is one "step"
    "max_depth": 8,  # levels per tree
    "learning_rate": 0.1,  # XGBoost's eta: the shrinkage applied to each new tree's leaf values
    "max_bin": 256,  # histogram bins per feature (XGBoost's default): the resolution of split points
}
SYNTHETIC_SIZE = {
    "rows": 1_000_000,  # rows generated in all, 20% of them held out for test
    "features": 50,  # standard-normal columns, 8 of which the hidden labelling rule reads
}


def xgboost_missing() -> str | None:
    """Why the gbdt workloads cannot run here (xgboost is not installed), or None when they can."""
    try:
        import xgboost  # noqa: F401  (imported only to see whether it can be)
    except ImportError:
        return INSTALL_HINT
    return None


def booster_parameters(hyperparameters: Hyperparameters, num_classes: int) -> dict[str, Any]:
    """XGBoost's training parameters for `hyperparameters` and a table of `num_classes` classes, without the
    device; a ValueError for any value XGBoost could not train with."""
    for name, least in (("rounds_per_epoch", 1), ("max_depth", 1), ("max_bin", 2)):
        value = hyperparameters[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < least:
            raise ValueError(f"{name} must be a whole number of at least {least}, got {value!r}")
    learning_rate = hyperparameters["learning_rate"]
    if not (isinstance(learning_rate, (int, float)) and math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be a finite number above 0, got {learning_rate!r}")
    if num_classes < 2:
        raise ValueError(f"boosted trees need at least 2 classes, got {num_classes}")
    objective = {"objective": "binary:logistic"} if num_classes == 2 else {
        "objective": "multi:softprob",
        "num_class": num_classes,
    }
    return {
        **objective,
        "tree_method": "hist",
        "max_depth": hyperparameters["max_depth"],
        "eta": float(learning_rate),
        "max_bin": hyperparameters["max_bin"],
    }


def device_parameters(device: torch.device) -> dict[str, Any]:
    """XGBoost's `device` and `nthread` for a torch device: "cpu" with torch's thread count, or "cuda:N"."""
    if device.type == "cpu":
        return {"device": "cpu", "nthread": torch.get_num_threads()}
    if device.type == "cuda":  # nthread: the host threads that build the matrices
        name = "cuda" if device.index is None else f"cuda:{device.index}"
        return {"device": name, "nthread": torch.get_num_threads()}
    raise ValueError(f"XGBoost trains on the CPU or on CUDA GPUs only, not on {device} ({device.type} devices)")


def train_boosted_trees(
    record: RunRecord,
    dataset: TableDataset,
    device: torch.device,
    hyperparameters: Hyperparameters,
    plan: TrainingPlan,
    watch: Stopwatch,
    reporter: Reporter | None = None,
) -> None:
    """Boost trees on `dataset` per `plan`, appending each finished epoch to `record` as engine/loop.py does.

    Building the quantised train and test matrices and the booster is `record.model_build_s`. Each epoch of
    `rounds` boosting rounds (rounds_per_epoch, capped by plan.max_steps) is timed alone; test predictions
    are timed apart as eval_time_s. A non-finite training loss ends the run with status "diverged".
    """
    reporter = reporter or Reporter()
    parameters = {
        **booster_parameters(hyperparameters, dataset.num_classes),
        **device_parameters(device),
        "seed": record.settings.seed,
    }
    import xgboost  # here, not at the top: the registry and `devicebench list` work without the gbdt extra

    rounds = capped(hyperparameters["rounds_per_epoch"], plan.max_steps)
    samples = len(dataset.train_labels) * rounds  # every round reads every training row
    with Monitor(watch.device) as monitor:
        started = watch.now()
        train_matrix = xgboost.QuantileDMatrix(
            dataset.train_features, dataset.train_labels, max_bin=parameters["max_bin"], nthread=parameters["nthread"]
        )
        test_matrix = xgboost.QuantileDMatrix(
            dataset.test_features, dataset.test_labels, ref=train_matrix, nthread=parameters["nthread"]
        )
        booster = xgboost.Booster(parameters, cache=[train_matrix])
        record.model_build_s = watch.now() - started
        for epoch in range(1, plan.epochs + 1):
            reporter.epoch_started(epoch, rounds)
            monitor.window()  # closes the window of building or of the last evaluation: not this epoch's
            train_time_s = _boost_epoch(booster, train_matrix, (epoch - 1) * rounds, rounds, watch, reporter)
            usage = monitor.window()  # exactly this epoch's boosting, outside its timed region
            train_loss, train_accuracy = log_loss_and_accuracy(booster.predict(train_matrix), dataset.train_labels)
            entry = timed_epoch(record, epoch, rounds, samples, train_time_s, usage,
                                train_loss=train_loss, train_accuracy=train_accuracy)
            finite = math.isfinite(train_loss)
            if finite:  # evaluating a diverged model would only time arithmetic on NaNs
                evaluation_started = watch.now()
                entry.test_loss, entry.test_accuracy = log_loss_and_accuracy(
                    booster.predict(test_matrix), dataset.test_labels
                )
                entry.eval_time_s = watch.now() - evaluation_started
                entry.eval_samples = len(dataset.test_labels)
            record.epochs.append(entry)
            reporter.epoch_finished(record, entry)
            if not finite:
                record.status = "diverged"
                record.diverged_at_step = _first_diverged_round(booster, train_matrix, dataset, epoch, rounds)
                record.error = f"training loss became {train_loss} at round {record.diverged_at_step} (epoch {epoch})"
                break
            note_time_to_target(record, plan.target_accuracy, watch.now() - started)
        record.end_to_end_s = watch.now() - started
    record.energy_j = total_energy_j(record)


def _boost_epoch(booster: Any, train_matrix: Any, first_round: int, rounds: int, watch: Stopwatch,
                 reporter: Reporter) -> float:
    """Seconds taken by `rounds` boosting rounds, numbered from `first_round` (XGBoost's iteration count)."""
    report_every = max(1, rounds // PROGRESS_UPDATES_PER_EPOCH)
    start = watch.now()
    for round_in_epoch in range(rounds):
        booster.update(train_matrix, first_round + round_in_epoch)
        if (round_in_epoch + 1) % report_every == 0:
            reporter.steps_finished(round_in_epoch + 1)
    return watch.now() - start


def log_loss_and_accuracy(probabilities: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """Mean log-loss and accuracy of XGBoost's predictions: (N,) probabilities of class 1 for a binary
    objective, (N, classes) probabilities for multi:softprob. NaN predictions give a NaN loss."""
    if probabilities.ndim == 1:
        probabilities = np.stack([1 - probabilities, probabilities], axis=1)
    of_true_class = probabilities[np.arange(len(labels)), labels]
    loss = -np.log(np.clip(of_true_class, PROBABILITY_FLOOR, 1.0)).mean()
    accuracy = (probabilities.argmax(axis=1) == labels).mean()
    return float(loss), float(accuracy)


def _first_diverged_round(booster: Any, train_matrix: Any, dataset: TableDataset, epoch: int, rounds: int) -> int:
    """The 1-based round whose model first gave a non-finite training loss, searched within `epoch` only
    after the run has already stopped (so it costs a few predictions, never training time)."""
    first = (epoch - 1) * rounds + 1
    for round_number in range(first, epoch * rounds):
        probabilities = booster.predict(train_matrix, iteration_range=(0, round_number))
        if not math.isfinite(log_loss_and_accuracy(probabilities, dataset.train_labels)[0]):
            return round_number
    return epoch * rounds


S5 = {
    "seed": "S5",
    "trainer": train_boosted_trees,
    "requires": xgboost_missing,
    "published": Published(
        speedup=23.2,
        basis="training time, CPU / GPU, as the overview reports it for RAPIDS; no model, data set or times given",
        hardware="4 GPUs (RAPIDS) vs CPU, as the S5 overview reports",
    ),
}


@workload(
    name="gbdt-covertype",
    dataset="covertype",
    summary="XGBoost hist, depth 8, eta 0.1, 7-class softprob on UCI Covertype (54 features); 10 rounds an epoch",
    defaults=BOOSTING,
    data_options=lambda hyperparameters: {},
    quick=QuickSettings(max_steps=4),  # 7 trees a round on 465k rows: about 0.8 s a round on 2 cores
    **S5,
)
def gbdt_covertype(hyperparameters: Hyperparameters) -> dict[str, Any]:
    return booster_parameters(hyperparameters, dataset_spec("covertype").num_classes)


@workload(
    name="gbdt-synthetic",
    dataset="synthetic-table",
    summary="XGBoost hist, depth 8, eta 0.1, binary logistic on a synthetic table of rows x features (1M x 50)",
    defaults={**BOOSTING, **SYNTHETIC_SIZE},
    data_options=lambda hyperparameters: {"rows": hyperparameters["rows"], "features": hyperparameters["features"]},
    **S5,
)
def gbdt_synthetic(hyperparameters: Hyperparameters) -> dict[str, Any]:
    if hyperparameters["rows"] < 10 or hyperparameters["features"] < 1:
        raise ValueError(
            f"a synthetic table needs rows >= 10 and features >= 1, got rows={hyperparameters['rows']}, "
            f"features={hyperparameters['features']}"
        )
    return booster_parameters(hyperparameters, SYNTHETIC_CLASSES)
