"""Timing: every clock reading sits behind a device synchronize, warm-up stays out of steady state, and
evaluation stays out of training throughput. A fake clock makes the arithmetic exact."""

from __future__ import annotations

import statistics
import time
from types import SimpleNamespace

import psutil
import pytest
import torch
from torch import nn
from training_fixtures import DelayedBatches, learnable_dataset

from devicebench.data.pipeline import HostBatches
from devicebench.engine import timing
from devicebench.engine.loop import TrainingPlan, TrainingSetup, train
from devicebench.engine.timing import Stopwatch
from devicebench.results.schema import RunRecord, RunSettings

CPU = torch.device("cpu")


class FakeClock:
    """A clock that moves only when the fake model says work was done, and logs every event."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # the training thread's CPU time: what the model's work adds, not the waits
        self.events: list[str] = []

    def read(self) -> float:
        self.events.append("clock")
        return self.seconds

    def synchronize(self, device: torch.device) -> None:
        self.events.append("sync")

    def read_host(self) -> float:
        self.events.append("host")
        return self.seconds

    def read_thread_cpu(self) -> float:
        self.events.append("cpu")
        return self.cpu_seconds

    def advance(self, seconds: float) -> None:
        self.seconds += seconds


class CostlyModel(nn.Module):
    """A linear model whose every training step costs `train_costs[i]` seconds and every eval batch 0.5 s, of which
    the training thread's own CPU time is CPU_SHARE (the rest: waiting for its other threads)."""

    CPU_SHARE = 0.75

    EVAL_BATCH_S = 0.5

    def __init__(self, clock: FakeClock, train_costs: list[float]) -> None:
        super().__init__()
        self.clock, self.train_costs = clock, list(train_costs)
        self.linear = nn.Linear(64, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        cost = self.train_costs.pop(0) if self.training else self.EVAL_BATCH_S
        self.clock.seconds += cost
        self.clock.cpu_seconds += cost * self.CPU_SHARE
        self.clock.events.append("step" if self.training else "eval")
        return self.linear(images.flatten(1))


def record() -> RunRecord:
    settings = RunSettings(
        batch_size=32, epochs=3, max_steps=4, max_eval_steps=2, seed=0, threads=1, data_source="synthetic"
    )
    return RunRecord("tiny", "S1", "cpu", "test cpu", 0, settings, "2026-01-01T00:00:00Z")


def run_with_costs(
    train_costs: list[float], epochs: int = 3, batch_seconds: float = 0.0
) -> tuple[RunRecord, FakeClock]:
    clock = FakeClock()
    data = learnable_dataset()

    def build() -> TrainingSetup:
        clock.seconds += 2.0  # model creation takes 2 s: inside end-to-end time, outside every epoch
        model = CostlyModel(clock, train_costs)
        return TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))

    result = record()
    train(
        result,
        build,
        DelayedBatches(
            HostBatches(data.train_images, data.train_labels, 32, CPU), lambda: clock.advance(batch_seconds)
        ),
        HostBatches(data.test_images, data.test_labels, 32, CPU, shuffle=False),
        TrainingPlan(epochs=epochs, max_steps=4, max_eval_steps=2),
        Stopwatch(
            CPU,
            clock=clock.read,
            synchronize=clock.synchronize,
            host_clock=clock.read_host,
            thread_clock=clock.read_thread_cpu,
        ),
    )
    return result, clock


def test_every_clock_reading_follows_a_synchronize():
    _, clock = run_with_costs([1.0] * 4 + [0.25] * 8)
    readings = [index for index, event in enumerate(clock.events) if event == "clock"]
    assert readings, "the loop read no clock"
    assert all(clock.events[index - 1] == "sync" for index in readings)


def test_no_synchronize_between_training_steps():
    """Steps of one epoch run back to back: a sync between two steps would serialize an accelerator."""
    _, clock = run_with_costs([1.0] * 4 + [0.25] * 8)
    events = "".join(
        {"step": "s", "eval": "e", "sync": "|", "clock": "c", "host": "", "cpu": ""}[event] for event in clock.events
    )
    assert "s|" not in events.replace("ssss|", "")  # a sync comes only after the 4th step of an epoch
    assert events.count("ssss") == 3


def test_warmup_epoch_is_excluded_from_steady_state():
    result, _ = run_with_costs([1.0] * 4 + [0.25] * 4 + [0.5] * 4)  # epoch 1 slow: 4 s; then 1 s and 2 s
    summary = result.summary()
    assert [epoch.phase for epoch in result.epochs] == ["warmup", "steady", "steady"]
    assert summary.warmup_epoch_time_s == pytest.approx(4.0)
    assert summary.steady_epoch_time_s == pytest.approx(1.5)  # median of 1 s and 2 s, the 4 s left out
    assert (summary.steady_epoch_time_min_s, summary.steady_epoch_time_max_s) == pytest.approx((1.0, 2.0))
    assert summary.steady_samples_per_s == pytest.approx(statistics.median([128 / 1.0, 128 / 2.0]))
    assert result.epochs[1].step_time_ms == pytest.approx(250.0)


def test_evaluation_is_timed_apart_and_end_to_end_includes_everything():
    result, _ = run_with_costs([0.25] * 12)
    for epoch in result.epochs:
        assert epoch.train_time_s == pytest.approx(1.0)  # 4 steps of 0.25 s: no eval time leaks in
        assert epoch.eval_time_s == pytest.approx(2 * CostlyModel.EVAL_BATCH_S)
        assert epoch.eval_samples == 64
    assert result.model_build_s == pytest.approx(2.0)
    assert result.end_to_end_s == pytest.approx(2.0 + 3 * (1.0 + 1.0))  # build + 3 x (train + eval)


def test_a_single_epoch_has_no_steady_state():
    result, _ = run_with_costs([1.0] * 4, epochs=1)
    assert result.summary().steady_epoch_time_s is None
    assert result.summary().warmup_epoch_time_s == pytest.approx(4.0)


def test_waiting_for_batches_is_measured_without_synchronizing_and_stays_inside_training_time():
    result, clock = run_with_costs([0.25] * 12, batch_seconds=0.5)  # each batch takes 0.5 s to arrive
    for epoch in result.epochs:
        assert epoch.input_wait_s == pytest.approx(4 * 0.5)
        assert epoch.train_time_s == pytest.approx(4 * (0.5 + 0.25))  # waiting is part of training time
    host_readings = [index for index, event in enumerate(clock.events) if event == "host"]
    assert len(host_readings) == 3 * 4 * 2  # before and after each of 4 batches in 3 epochs
    assert all(clock.events[index - 1] != "sync" for index in host_readings)


def test_each_epoch_records_its_training_thread_s_cpu_seconds_over_its_training_alone():
    """Over the boundaries of train_time_s: each step's CPU time, not the waits for batches (0.5 s each, on the
    wall clock only), nor the evaluation's or the model building's CPU time."""
    result, clock = run_with_costs([1.0] * 4 + [0.25] * 4 + [0.5] * 4, batch_seconds=0.5)
    assert [epoch.train_time_s for epoch in result.epochs] == pytest.approx([6.0, 3.0, 4.0])
    assert [epoch.train_thread_cpu_s for epoch in result.epochs] == pytest.approx([3.0, 0.75, 1.5])
    events = "".join(
        {"sync": "", "clock": "c", "cpu": "t", "host": "", "step": "s", "eval": "e"}[e] for e in clock.events
    )
    assert events.count("t") == events.count("ct") == 2 * 3  # start and end of each epoch's training, no more
    assert "ssss" + "ct" in events  # the thread's clock is read right after the epoch's clock stops


def test_the_thread_clock_is_the_calling_thread_s_cpu_time_and_the_children_s_their_cpu_seconds(monkeypatch):
    watch = Stopwatch(CPU)
    assert watch.thread_clock is time.thread_time and watch.children_clock is timing.children_cpu_seconds

    class Child:
        def __init__(self, user: float, system: float, gone: bool = False) -> None:
            self.times, self.gone = (user, system), gone

        def cpu_times(self) -> SimpleNamespace:
            if self.gone:
                raise psutil.NoSuchProcess(4321)
            return SimpleNamespace(user=self.times[0], system=self.times[1])

    class Parent:
        def children(self, recursive: bool) -> list[Child]:
            assert recursive  # a worker's own children are the pipeline's too
            return [Child(1.5, 0.25), Child(2.0, 0.5), Child(9.0, 9.0, gone=True)]

    monkeypatch.setattr(timing.psutil, "Process", Parent)
    assert timing.children_cpu_seconds() == pytest.approx(4.25)  # the ended child counts nothing
    assert Stopwatch(CPU, children_clock=lambda: 7.5).children_cpu_now() == 7.5
