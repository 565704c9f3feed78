"""The runner: every (workload, device, repeat) ends with an honest status, and nothing finished is lost."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from training_fixtures import bf16_bilstm_run

from devicebench import RunConfig, budget, planning, runner
from devicebench.events import ReporterGroup, RunReporter
from devicebench.workloads import _registry, get_workload
from devicebench.workloads.definition import definition_fingerprint

TINY = {"devices": "cpu", "data": "synthetic", "epochs": 2, "max_steps": 2, "max_eval_steps": 1}


def test_a_run_records_every_workload_device_and_repeat():
    result = runner.run(planning.plan(RunConfig(workloads=("mnist-*",), repeats=2, **TINY)))
    assert [(run.workload, run.repeat) for run in result.runs] == [
        ("mnist-cnn2", 0),
        ("mnist-cnn2", 1),
        ("mnist-cnn4", 0),
        ("mnist-cnn4", 1),
    ]
    assert all(run.status == "ok" and len(run.epochs) == 2 for run in result.runs)
    assert result.machine["cpu"]["logical_cores"] >= 1 and not result.interrupted
    first = result.runs[0]
    assert first.settings.threads == torch.get_num_threads() and first.settings.data_source == "synthetic"
    assert first.parameter_count == get_workload("mnist-cnn2").parameter_count()
    assert first.end_to_end_s > sum(epoch.train_time_s for epoch in first.epochs)
    assert first.peak_rss_mib > 0 and first.peak_device_memory_mib is None  # no device counter on the CPU
    cnn2, cnn4 = (definition_fingerprint(get_workload(name)) for name in ("mnist-cnn2", "mnist-cnn4"))
    assert [run.definition for run in result.runs] == [cnn2, cnn2, cnn4, cnn4] and cnn2 != cnn4


def test_repeats_start_from_the_same_weights_and_see_the_same_data():
    result = runner.run(planning.plan(RunConfig(workloads=("cifar100-mlp",), repeats=2, **TINY)))
    losses = [[epoch.train_loss for epoch in run.epochs] for run in result.runs]
    assert losses[0] == losses[1]


def broken_workload(monkeypatch, name: str, error: Exception) -> None:
    entry = get_workload(name)

    def explode(hyperparameters):
        raise error

    monkeypatch.setitem(_registry._REGISTRY, name, dataclasses.replace(entry, build_model=explode))


def test_a_failing_workload_is_recorded_and_the_suite_moves_on(monkeypatch):
    broken_workload(monkeypatch, "mnist-cnn2", ValueError("shapes do not match"))
    result = runner.run(planning.plan(RunConfig(workloads=("mnist-cnn2", "mnist-cnn4"), **TINY)))
    assert [run.status for run in result.runs] == ["failed", "ok"]
    assert result.runs[0].error == "ValueError: shapes do not match"


def test_out_of_memory_is_its_own_status_with_the_batch_size(monkeypatch):
    broken_workload(monkeypatch, "mnist-cnn2", torch.cuda.OutOfMemoryError("CUDA out of memory"))
    result = runner.run(planning.plan(RunConfig(workloads=("mnist-cnn2",), batch_size=4096, **TINY)))
    assert result.runs[0].status == "oom"
    assert "batch size 4096" in result.runs[0].error and "smaller --batch-size" in result.runs[0].error


class InterruptDuring(RunReporter):
    """Presses Ctrl-C when `workload` starts epoch `epoch`."""

    def __init__(self, workload: str, epoch: int) -> None:
        self.workload, self.epoch, self.current = workload, epoch, None

    def run_started(self, record):
        self.current = record.workload

    def epoch_started(self, epoch, steps):
        if self.current == self.workload and epoch == self.epoch:
            raise KeyboardInterrupt


def test_ctrl_c_keeps_every_finished_epoch_and_stops():
    config = RunConfig(workloads=("mnist-cnn2", "mnist-cnn4", "cifar10-mlp"), **{**TINY, "epochs": 3})
    result = runner.run(planning.plan(config), InterruptDuring("mnist-cnn4", 3))
    assert result.interrupted
    assert [(run.workload, run.status, len(run.epochs)) for run in result.runs] == [
        ("mnist-cnn2", "ok", 3),
        ("mnist-cnn4", "interrupted", 2),
    ]  # cifar10-mlp never started


def test_a_missing_device_fails_before_any_training():
    from devicebench.devices import DeviceError

    with pytest.raises(DeviceError, match="cuda:3"):
        runner.run(planning.plan(RunConfig(workloads=("mnist-cnn2",), **{**TINY, "devices": "cuda:3"})))


def test_threads_apply_to_the_run_are_recorded_and_are_restored_after():
    before = torch.get_num_threads()
    result = runner.run(planning.plan(RunConfig(workloads=("cifar100-mlp",), threads=1, **TINY)))
    assert result.runs[0].settings.threads == 1
    assert torch.get_num_threads() == before


class Journal(RunReporter):
    """Writes down every event a run sends, in order."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def session_started(self, result):
        self.events.append("session")

    def run_started(self, record):
        self.events.append(f"start {record.workload}")

    def epoch_finished(self, record, epoch):
        self.events.append(f"epoch {epoch.epoch}")

    def run_finished(self, record):
        self.events.append(f"finish {record.workload} {record.status}")


def test_every_listener_hears_every_event_including_an_interrupted_finish():
    first, second = Journal(), Journal()
    stopper = InterruptDuring("mnist-cnn4", 2)
    runner.run(planning.plan(RunConfig(workloads=("mnist-*",), **TINY)), ReporterGroup(first, second, stopper))
    assert (
        first.events
        == second.events
        == [
            "session",
            "start mnist-cnn2",
            "epoch 1",
            "epoch 2",
            "finish mnist-cnn2 ok",
            "start mnist-cnn4",
            "epoch 1",
            "finish mnist-cnn4 interrupted",
        ]
    )


def test_a_tuned_run_timed_before_it_trains_says_once_what_bf16_left_in_fp32(monkeypatch, switches_untried):
    """A long run is timed first on a model of its own, then trains another: two builds, one run. What the tuning
    applied is said once (it was said on every build: the note twice)."""
    monkeypatch.setattr(budget, "ESTIMATED_FROM_STEPS", 0)  # every run is long: it is timed before it trains
    record = bf16_bilstm_run()
    assert record.status == "ok", record.error
    assert len(record.epochs) == 1 and record.settings.precision == "bf16"
    assert record.tuning_note == "bf16 autocast left out the recurrent layers (2 LSTM): they ran in fp32"
