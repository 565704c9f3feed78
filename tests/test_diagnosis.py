"""The input-pipeline diagnosis: the verdict's rules on measured numbers, then on real training with a
deliberately slow loader (input-bound) and a deliberately heavy model on tiny data (compute-bound)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn
from training_fixtures import DelayedBatches, learnable_dataset

from devicebench.data.pipeline import HostBatches
from devicebench.engine.loop import TrainingPlan, TrainingSetup, train
from devicebench.engine.timing import Stopwatch
from devicebench.results.diagnosis import diagnose
from devicebench.results.schema import EpochRecord, RunRecord, RunSettings

CPU = torch.device("cpu")


def record_with(
    waits: list[float], train_s: float = 10.0, utilization: float | None = None, workers: int = 0
) -> RunRecord:
    settings = RunSettings(
        batch_size=32,
        epochs=len(waits),
        max_steps=None,
        max_eval_steps=None,
        seed=0,
        threads=2,
        data_source="real",
        workers=workers,
    )
    record = RunRecord(
        "catdog-original",
        "S3",
        "cuda:0" if utilization is not None else "cpu",
        "x",
        0,
        settings,
        "2026-01-01T00:00:00Z",
    )
    for index, wait in enumerate(waits, start=1):
        record.epochs.append(
            EpochRecord(
                epoch=index,
                phase="warmup" if index == 1 else "steady",
                steps=10,
                samples=320,
                train_time_s=train_s,
                samples_per_s=32.0,
                step_time_ms=1000.0,
                train_loss=0.5,
                train_accuracy=0.5,
                input_wait_s=wait,
                device_utilization_percent=utilization,
            )
        )
    return record


def test_waiting_most_of_the_time_is_input_bound_with_the_numbers_and_the_levers():
    diagnosis = diagnose(record_with([9.5, 7.0, 8.0], workers=0), cores=2)  # warm-up's 9.5 s left out
    assert diagnosis.verdict == "input-bound"
    assert diagnosis.wait_share == pytest.approx(15.0 / 20.0)
    assert "75%" in diagnosis.text and "15.00 s of 20.00 s" in diagnosis.text
    assert "more --workers (now 0, 2 cores)" in diagnosis.text and "augment=false" in diagnosis.text


def test_no_workers_lever_when_every_core_already_loads():
    diagnosis = diagnose(record_with([8.0, 8.0], workers=4), cores=4)
    assert diagnosis.verdict == "input-bound" and "--workers" not in diagnosis.text


def test_waiting_little_is_compute_bound():
    diagnosis = diagnose(record_with([0.0, 1.0, 2.0]), cores=2)
    assert diagnosis.verdict == "compute-bound"
    assert diagnosis.wait_share == pytest.approx(0.15)
    assert "keeps up" in diagnosis.text


def test_a_busy_gpu_is_the_bottleneck_however_long_the_host_waited():
    """On a GPU the host may wait for data while queued steps still run: utilisation settles it."""
    assert diagnose(record_with([6.0, 6.0], utilization=97.0), cores=2).verdict == "compute-bound"
    idle = diagnose(record_with([6.0, 6.0], utilization=8.0), cores=2)
    assert idle.verdict == "input-bound" and "device 8% busy" in idle.text


def test_an_idle_gpu_that_is_not_starved_is_told_to_take_bigger_steps():
    diagnosis = diagnose(record_with([1.0, 1.0], utilization=20.0), cores=2)
    assert diagnosis.verdict == "compute-bound" and "larger --batch-size" in diagnosis.text


def test_no_timed_epochs_no_verdict():
    assert diagnose(record_with([]), cores=2) is None


class HeavyModel(nn.Module):
    """A tiny classifier that burns ~20 ms of matrix products per step: compute, not data, dominates."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 4)
        self.weight = nn.Parameter(torch.eye(384))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        work = self.weight
        for _ in range(12):
            work = work @ self.weight / 384
        return self.linear(images.flatten(1)) + work.sum() * 0


class LoaderClock:
    """The real clock, plus the seconds a deliberately slow loader 'took': training is measured as it really
    runs, while the loader's slowness costs the test no time and no load on the machine can shrink it."""

    def __init__(self) -> None:
        self.loader_s = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.loader_s

    def load_slowly(self, seconds: float) -> None:
        self.loader_s += seconds


def train_and_diagnose(model: nn.Module, slow_seconds: float) -> RunRecord:
    data = learnable_dataset()
    record = record_with([])
    torch.manual_seed(0)
    setup = TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))
    batches = HostBatches(data.train_images, data.train_labels, 32, CPU)
    clock = LoaderClock()
    slow = DelayedBatches(batches, lambda: clock.load_slowly(slow_seconds))
    train(
        record,
        lambda: setup,
        slow if slow_seconds else batches,
        HostBatches(data.test_images, data.test_labels, 32, CPU, shuffle=False),
        TrainingPlan(epochs=3, max_steps=8, max_eval_steps=1),
        Stopwatch(CPU, clock=clock, host_clock=clock),
    )
    return record


def test_a_deliberately_slow_loader_is_found_input_bound():
    # a step of this model takes well under 1 ms on a quiet machine and was seen to take 180 ms on a loaded one
    # (a quarter second of real sleep per batch gave a share of 0.578): 5 s per batch on the loader's clock
    # outweighs even a second per step, so the share stays above 0.8 on any machine that finishes the suite
    record = train_and_diagnose(nn.Sequential(nn.Flatten(), nn.Linear(64, 4)), slow_seconds=5.0)
    diagnosis = diagnose(record, cores=2)
    assert diagnosis.verdict == "input-bound", diagnosis.text
    assert diagnosis.wait_share > 0.8
    assert all(8 * 5.0 <= epoch.input_wait_s < epoch.train_time_s for epoch in record.epochs)


def test_a_deliberately_heavy_model_on_tiny_in_memory_data_is_found_compute_bound():
    record = train_and_diagnose(HeavyModel(), slow_seconds=0.0)
    diagnosis = diagnose(record, cores=2)
    assert diagnosis.verdict == "compute-bound", diagnosis.text
    assert diagnosis.wait_share < 0.2
