"""Boosted trees trained by the engine: XGBoost's booster, timed by the run's Stopwatch and watched by its Monitor,
filling a RunRecord epoch by epoch as engine/loop.py does for torch models (the gbdt workloads of
workloads/gbdt.py name this trainer; SEEDS.md's S5).

A boosting round adds one tree per class and reads every training row, so here a "step" is a round and an
"epoch" a block of `rounds_per_epoch` rounds: samples per epoch = training rows x rounds. Each epoch is timed
as a whole, with nothing but `booster.update` inside; losses and accuracies are read after its clock stops. The
train loss and accuracy are those of the model at the epoch's end, on every training row (the torch loop reports
the mean over the epoch's steps instead). XGBoost is imported only when a booster is built, so `devicebench list`
works without the `gbdt` extra.

    devicebench run gbdt-synthetic --devices cpu --epochs 2 --set rows=50000
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from devicebench.data.tabular import TableDataset
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
from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.workloads import Hyperparameters
from devicebench.workloads.gbdt import booster_parameters

PROBABILITY_FLOOR = 1e-15  # log-loss clips predicted probabilities here, so a confident mistake costs ~34.5, not inf


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
    with Monitor(watch.device) as monitor, _xgboost_errors_in_one_line(xgboost):
        started = watch.now()
        train_matrix, test_matrix = _matrices(xgboost, dataset, parameters)
        booster = xgboost.Booster(parameters, cache=[train_matrix])
        record.model_build_s = watch.now() - started
        for epoch in range(1, plan.epochs + 1):
            reporter.epoch_started(epoch, rounds)
            monitor.window()  # closes the window of building or of the last evaluation: not this epoch's
            train_time_s = _boost_epoch(booster, train_matrix, (epoch - 1) * rounds, rounds, watch, reporter)
            usage = monitor.window()  # exactly this epoch's boosting, outside its timed region
            train_loss, train_accuracy = log_loss_and_accuracy(booster.predict(train_matrix), dataset.train_labels)
            entry = timed_epoch(
                record,
                epoch,
                rounds,
                samples,
                train_time_s,
                usage,
                train_loss=train_loss,
                train_accuracy=train_accuracy,
            )
            finite = math.isfinite(train_loss)
            if finite:  # evaluating a diverged model would only time arithmetic on NaNs
                _evaluate(entry, booster, test_matrix, dataset.test_labels, watch)
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


def _matrices(xgboost: Any, dataset: TableDataset, parameters: dict[str, Any]) -> tuple[Any, Any]:
    """(train, test) quantised matrices of `dataset`, both at the booster's `max_bin`."""
    train_matrix = xgboost.QuantileDMatrix(
        dataset.train_features, dataset.train_labels, max_bin=parameters["max_bin"], nthread=parameters["nthread"]
    )
    test_matrix = xgboost.QuantileDMatrix(  # the booster's max_bin too: XGBoost refuses matrices that differ
        dataset.test_features,
        dataset.test_labels,
        ref=train_matrix,
        max_bin=parameters["max_bin"],
        nthread=parameters["nthread"],
    )
    return train_matrix, test_matrix


def _evaluate(entry: EpochRecord, booster: Any, test_matrix: Any, labels: np.ndarray, watch: Stopwatch) -> None:
    """`entry`'s test loss and accuracy, timed apart as its eval_time_s."""
    evaluation_started = watch.now()
    entry.test_loss, entry.test_accuracy = log_loss_and_accuracy(booster.predict(test_matrix), labels)
    entry.eval_time_s = watch.now() - evaluation_started
    entry.eval_samples = len(labels)


@contextlib.contextmanager
def _xgboost_errors_in_one_line(xgboost: Any) -> Iterator[None]:
    """An XGBoostError as a RuntimeError of its first line: XGBoost appends its C++ stack trace ("[bt] (0)
    libxgboost.so(+0x2c1a8c)" and so on) to every message, which would fill the run's stored error and table."""
    try:
        yield
    except xgboost.core.XGBoostError as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise RuntimeError(f"XGBoost: {first_line}") from None


def _boost_epoch(
    booster: Any, train_matrix: Any, first_round: int, rounds: int, watch: Stopwatch, reporter: Reporter
) -> float:
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
