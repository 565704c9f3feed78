"""The training loop: it learns, it counts, it stops on NaN at the right step, and it keeps finished epochs."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from training_fixtures import learnable_dataset, linear_setup

from devicebench.data.pipeline import HostBatches
from devicebench.engine import loop
from devicebench.engine.loop import TrainingPlan, TrainingSetup, train
from devicebench.engine.timing import Stopwatch
from devicebench.events import Reporter
from devicebench.results.schema import RunRecord, RunSettings

CPU = torch.device("cpu")


def new_record(epochs: int = 3) -> RunRecord:
    settings = RunSettings(
        batch_size=32, epochs=epochs, max_steps=None, max_eval_steps=None, seed=0, threads=1, data_source="synthetic"
    )
    return RunRecord("tiny", "S1", "cpu", "test cpu", 0, settings, "2026-01-01T00:00:00Z")


def run(plan: TrainingPlan, build=linear_setup, reporter: Reporter | None = None, record=None) -> RunRecord:
    data = learnable_dataset()
    record = record or new_record(plan.epochs)
    train(
        record,
        build,
        HostBatches(data.train_images, data.train_labels, 32, CPU),
        HostBatches(data.test_images, data.test_labels, 32, CPU, shuffle=False),
        plan,
        Stopwatch(CPU),
        reporter,
    )
    return record


def test_loss_falls_and_accuracy_rises_on_learnable_data():
    record = run(TrainingPlan(epochs=3))
    losses = [epoch.train_loss for epoch in record.epochs]
    assert losses[-1] < losses[0] * 0.5
    assert record.epochs[-1].test_accuracy > 0.9  # 4 classes: chance is 0.25
    assert record.status == "running"  # the loop reports; the runner decides the final status


def test_epoch_counts_and_rates_are_consistent():
    record = run(TrainingPlan(epochs=2, max_steps=5, max_eval_steps=1))
    for epoch in record.epochs:
        assert (epoch.steps, epoch.samples, epoch.eval_samples) == (5, 160, 32)
        assert epoch.samples_per_s == pytest.approx(epoch.samples / epoch.train_time_s)
        assert epoch.step_time_ms == pytest.approx(epoch.train_time_s / 5 * 1000)
        assert 0 <= epoch.train_accuracy <= 1


def test_a_partial_last_batch_counts_its_real_samples():
    data = learnable_dataset(train=100)  # 32 + 32 + 32 + 4
    record = new_record(1)
    train(
        record,
        linear_setup,
        HostBatches(data.train_images, data.train_labels, 32, CPU),
        HostBatches(data.test_images, data.test_labels, 32, CPU, shuffle=False),
        TrainingPlan(epochs=1),
        Stopwatch(CPU),
    )
    assert (record.epochs[0].steps, record.epochs[0].samples) == (4, 100)


class NanOnCall(nn.Module):
    """Cross-entropy that returns NaN from its `bad_call`-th training call (1-based) on."""

    def __init__(self, bad_call: int) -> None:
        super().__init__()
        self.calls, self.bad_call = 0, bad_call

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(outputs, labels)
        if torch.is_grad_enabled():
            self.calls += 1
            if self.calls >= self.bad_call:
                return loss * math.nan
        return loss


def test_nan_loss_stops_the_run_as_diverged_at_its_step():
    def build() -> TrainingSetup:
        setup = linear_setup()
        return TrainingSetup(setup.model, NanOnCall(bad_call=11), setup.optimizer)

    record = run(TrainingPlan(epochs=5, max_steps=4), build=build)  # step 11 is the 3rd step of epoch 3
    assert record.status == "diverged"
    assert record.diverged_at_step == 11
    assert len(record.epochs) == 3  # epochs 4 and 5 never ran
    assert record.epochs[-1].test_accuracy is None  # no evaluation of a NaN model
    assert "step 11" in record.error and "epoch 3" in record.error


def test_time_to_target_is_recorded_once_and_only_when_reached():
    reached = run(TrainingPlan(epochs=3, target_accuracy=0.3))
    first = reached.epochs[0]
    assert first.test_accuracy >= 0.3
    assert reached.time_to_target_train_s == pytest.approx(first.train_time_s)
    assert reached.time_to_target_wall_s >= first.train_time_s + first.eval_time_s
    never = run(TrainingPlan(epochs=2, target_accuracy=1.0, max_steps=1), build=lambda: linear_setup(learning_rate=0))
    assert never.time_to_target_train_s is None and never.time_to_target_wall_s is None


class InterruptAtEpoch(Reporter):
    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def epoch_started(self, epoch: int, steps: int) -> None:
        if epoch == self.epoch:
            raise KeyboardInterrupt


def test_an_interruption_keeps_the_finished_epochs():
    record = new_record(4)
    with pytest.raises(KeyboardInterrupt):
        run(TrainingPlan(epochs=4), reporter=InterruptAtEpoch(3), record=record)
    assert [epoch.epoch for epoch in record.epochs] == [1, 2]
    assert all(epoch.test_accuracy is not None for epoch in record.epochs)


def slow_setup() -> TrainingSetup:
    """A linear model made slow on purpose, so that each epoch lasts long enough for the CPU to be measured."""
    setup = linear_setup()

    class Busy(nn.Module):
        def forward(self, images):
            end = torch.randn(300, 300)
            for _ in range(400):  # over 0.1 s of real CPU work per step
                end = torch.tanh(end @ end)
            return setup.model(images) + 0 * end.sum()

    return TrainingSetup(Busy(), setup.loss_function, setup.optimizer)


def test_each_epoch_records_how_busy_the_cpu_was_while_training():
    record = run(TrainingPlan(epochs=2, max_steps=3), build=slow_setup)
    for epoch in record.epochs:
        assert epoch.train_time_s > 0.1
        assert epoch.process_cpu_percent is not None and epoch.process_cpu_percent > 30
        assert epoch.device_utilization_percent is None and epoch.device_energy_j is None  # no device to watch
    assert record.energy_j is None and record.monitor_note is None


def test_an_epoch_too_short_to_measure_says_unknown_not_zero():
    record = run(TrainingPlan(epochs=1, max_steps=1))
    assert record.epochs[0].train_time_s < 0.1
    assert record.epochs[0].process_cpu_percent is None


class HugeWhenEvaluating(nn.Module):
    """Cross-entropy in training; 1e30 when evaluating (a model whose batch-2 BatchNorm statistics blew up)."""

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        loss = nn.functional.cross_entropy(outputs, labels)
        return loss if torch.is_grad_enabled() else loss * 0 + 1e30


def test_a_test_loss_beyond_any_stored_figure_is_held_as_a_nan_one_is():
    def build():
        setup = linear_setup()
        setup.loss_function = HugeWhenEvaluating()
        return setup

    record = run(TrainingPlan(epochs=2, max_steps=2, max_eval_steps=1), build=build)
    assert all(math.isnan(epoch.test_loss) for epoch in record.epochs)  # written and stored as null
    assert all(epoch.test_accuracy is not None for epoch in record.epochs)  # the predictions still count


def test_a_training_loss_beyond_any_stored_figure_is_a_divergence():
    from devicebench.engine.loop import _first_divergence

    divergence = _first_divergence([2.0, 3e19, 1.0], epoch=2, steps=3)
    assert (divergence.step, divergence.epoch, divergence.loss) == (5, 2, 3e19)
    assert _first_divergence([2.0, -9e18, 1.0], epoch=1, steps=3) is None  # within the bound: a figure


@pytest.mark.parametrize("kept_bytes", [64 * 2**20, 1], ids=["counted-at-the-end", "counted-every-step"])
def test_an_epochs_loss_and_accuracy_are_those_of_every_sample_it_trained_on(kept_bytes, monkeypatch):
    """A model that does not learn (learning rate 0) gives its epoch loss and accuracy over all 100 samples, the
    partial last batch weighted by its size, whether its outputs are kept to the epoch's end or counted each step."""
    monkeypatch.setattr(loop, "KEPT_OUTPUTS_BYTES", kept_bytes)
    data = learnable_dataset(train=100)  # 32 + 32 + 32 + 4
    record = new_record(1)
    train(
        record,
        lambda: linear_setup(learning_rate=0),
        HostBatches(data.train_images, data.train_labels, 32, CPU),
        HostBatches(data.test_images, data.test_labels, 32, CPU, shuffle=False),
        TrainingPlan(epochs=1),
        Stopwatch(CPU),
    )
    with torch.no_grad():
        outputs = linear_setup().model(torch.from_numpy(data.train_images).float() / 255)
    labels = torch.from_numpy(data.train_labels)
    expected_accuracy = int((outputs.argmax(dim=1) == labels).sum()) / len(labels)
    assert 0.1 < expected_accuracy < 0.9  # neither all right nor all wrong: a miscount would show
    assert record.epochs[0].train_accuracy == pytest.approx(expected_accuracy, abs=1e-12)
    assert record.epochs[0].train_loss == pytest.approx(float(nn.functional.cross_entropy(outputs, labels)), rel=1e-5)


def test_a_step_that_returns_the_same_loss_tensor_every_time_is_refused():
    """A captured step's static loss, rewritten by every replay, kept as it is would read as the last step's value
    for every step: the loop refuses it rather than report a wrong loss."""
    setup = linear_setup()
    static_loss = torch.zeros(())

    def step(model, batch, optimizer):
        images, labels = batch
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        static_loss.copy_(loss.detach())
        return static_loss

    with pytest.raises(ValueError, match="same memory as the step before"):
        run(
            TrainingPlan(epochs=1, max_steps=3),
            build=lambda: TrainingSetup(setup.model, None, setup.optimizer, step=step),
        )
