"""Tuned mode: the same accuracy as seed mode on real digits, the faster option kept, every choice recorded.

python -m pytest tests/test_tuning.py -q
"""

from __future__ import annotations

import json
import math
import re
import time

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner, session_choices
from devicebench.cli import app
from devicebench.config import ConfigError
from devicebench.data import ArrayDataset
from devicebench.engine import tuning, tuning_applied
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.timing import Stopwatch
from devicebench.engine.tuning import Tuning, candidates, untried_switches
from devicebench.engine.tuning_applied import process_settings, tuned_setup
from devicebench.runner import new_record, train_record

CPU = torch.device("cpu")


@pytest.mark.slow
def test_tuned_mode_reaches_the_accuracy_of_seed_mode_on_real_digits(real_digits, switches_untried):
    """bf16 autocast, channels_last and the fused optimizer change how each step runs, not what it learns.

    80 steps of 50 digits at 10 times the seed's learning rate reach about 93%: on a CPU without native bf16
    (emulated, 7 times slower than fp32 there) the seed's two epochs took 4 minutes, this takes under one."""
    accuracies = {}
    for mode, precision in (("seed", "auto"), ("tuned", "bf16")):
        config = RunConfig(
            workloads=("mnist-cnn2",),
            devices="cpu",
            epochs=1,
            max_steps=80,
            data="real",
            mode=mode,
            precision=precision,
            overrides=("learning_rate=0.001",),
        )
        (job,) = planning.plan(config).jobs
        record = new_record(job, real_digits, 0)
        train_record(record, job, real_digits)
        assert record.status == "ok", record.error
        accuracies[mode] = record.epochs[-1].test_accuracy
        if mode == "tuned":
            settings = record.settings
            assert (settings.mode, settings.precision) == ("tuned", "bf16")
            assert settings.channels_last and settings.fused_optimizer and not settings.compiled
    tested = 2_000
    both = (accuracies["seed"] + accuracies["tuned"]) / 2
    noise = 3 * math.sqrt(2 * both * (1 - both) / tested)  # three standard errors of a difference of two accuracies
    assert accuracies["seed"] > 0.9 and accuracies["tuned"] > 0.9  # chance is 0.1
    assert abs(accuracies["tuned"] - accuracies["seed"]) <= noise, (accuracies, noise)


# --- choosing (how a trial times and chooses: tests/test_trial.py) ----------------------------------------------


def test_bf16_is_tried_only_where_the_cpu_computes_it_natively(force_cpu_isa):
    force_cpu_isa("avx2,avx512f")
    assert [option.precision for option in candidates(Tuning(), CPU, "auto", "auto")] == ["fp32"]
    force_cpu_isa("avx2,avx512f,avx512_bf16")
    assert [option.precision for option in candidates(Tuning(), CPU, "auto", "auto")] == ["fp32", "bf16"]
    assert [option.precision for option in candidates(Tuning(), CPU, "fp32", "auto")] == ["fp32"]  # asked for
    assert [option.precision for option in candidates(Tuning(), CPU, "bf16", "auto")] == ["bf16"]
    with pytest.raises(ValueError, match="tuned mode runs fp32 or bf16, not 'fp16'"):  # never recorded as it
        candidates(Tuning(), CPU, "fp16", "auto")


def test_a_cpu_tries_the_layout_and_the_fused_step_off_and_on_plainest_first_and_a_gpu_keeps_them(force_cpu_isa):
    """Issue 33: on a 2-core EPYC channels_last and the fused Adam each made catdog-original slower, so a CPU keeps
    them only where its own trial shows a gain; a GPU's stay on, untried (not measured there yet)."""
    force_cpu_isa("avx2")
    base = Tuning(channels_last=True, fused_optimizer=True)
    tried_on_cpu = [(option.channels_last, option.fused_optimizer) for option in candidates(base, CPU, "auto", "auto")]
    assert tried_on_cpu == [(False, False), (False, True), (True, False), (True, True)]
    no_convolutions = Tuning(fused_optimizer=True)  # base_tuning turns channels_last on only for a model with convs
    tried = [
        (option.channels_last, option.fused_optimizer) for option in candidates(no_convolutions, CPU, "fp32", "auto")
    ]
    assert tried == [(False, False), (False, True)]
    on_gpu = candidates(base, torch.device("cuda"), "fp32", "auto")
    assert [(option.channels_last, option.fused_optimizer, option.compiled) for option in on_gpu] == [
        (True, True, False),
        (True, True, True),
    ]
    measured_there = candidates(base, torch.device("cuda"), "fp32", "off", trial_switches=True)  # the benchmark's
    assert [(option.channels_last, option.fused_optimizer) for option in measured_there] == tried_on_cpu


def test_a_gpu_run_says_it_applied_the_layout_and_the_fused_step_without_a_trial_and_a_cpu_run_does_not():
    both = Tuning(channels_last=True, fused_optimizer=True)
    cuda = torch.device("cuda")
    note = untried_switches(both, candidates(both, cuda, "fp32", "off"), cuda)
    assert note.startswith("channels_last and the fused optimizer step applied without a trial: on an H200")
    no_fused = Tuning(channels_last=True)  # an optimizer without a fused step on this device: not claimed
    assert untried_switches(no_fused, candidates(both, cuda, "fp32", "off"), cuda).startswith("channels_last applied")
    assert untried_switches(both, candidates(both, cuda, "fp32", "off", trial_switches=True), cuda) == ""  # trialled
    assert untried_switches(both, candidates(both, CPU, "fp32", "off"), CPU) == ""
    assert untried_switches(Tuning(), [Tuning()], cuda) == ""  # an MLP with a plain step: nothing applied


def test_compile_is_tried_on_gpus_and_on_cpus_only_when_asked():
    assert [option.compiled for option in candidates(Tuning(), CPU, "fp32", "auto")] == [False]
    assert [option.compiled for option in candidates(Tuning(), CPU, "fp32", "on")] == [True]
    assert [option.compiled for option in candidates(Tuning(), torch.device("cuda"), "fp32", "auto")] == [False, True]


# --- applying --------------------------------------------------------------------------------------------------


def small_conv_setup(optimizer_class=torch.optim.Adam) -> TrainingSetup:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    return TrainingSetup(
        model=model, loss_function=nn.CrossEntropyLoss(), optimizer=optimizer_class(model.parameters(), lr=0.01)
    )


def test_tuned_setup_runs_the_same_model_in_bf16_channels_last_with_a_fused_step():
    plain = small_conv_setup()
    inputs = torch.rand(5, 1, 8, 8)
    expected = plain.model(inputs)
    setup, applied = tuned_setup(
        small_conv_setup(), Tuning(precision="bf16", channels_last=True, fused_optimizer=True), CPU
    )
    assert applied.fused_optimizer and setup.optimizer.defaults["fused"] is True
    assert setup.model[0].weight.is_contiguous(memory_format=torch.channels_last)
    outputs = setup.outputs(inputs)
    assert outputs.dtype == torch.float32  # the loss is computed in fp32, as in seed mode
    torch.testing.assert_close(outputs, expected, atol=0.05, rtol=0.05)  # the same function, in bf16
    assert not torch.equal(outputs, expected)  # ... really computed in bf16
    setup.loss_function(outputs, torch.tensor([0, 1, 2, 0, 1])).backward()
    setup.optimizer.step()  # the fused step runs
    assert setup.model[0].weight.grad.dtype == torch.float32  # weights and gradients stay fp32


def test_an_optimizer_without_a_fused_step_is_kept_and_recorded_so():
    setup, applied = tuned_setup(small_conv_setup(torch.optim.Rprop), Tuning(fused_optimizer=True), CPU)
    assert not applied.fused_optimizer and isinstance(setup.optimizer, torch.optim.Rprop)


def test_process_settings_are_restored_after_the_run(monkeypatch):
    thresholds = []
    monkeypatch.setattr(tuning_applied, "_set_glibc_thresholds", thresholds.append)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    with process_settings(Tuning(tf32_matmul=True, cudnn_benchmark=True, allocator_keeps_memory=True)):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
        assert thresholds == [tuning_applied.KEPT_FREED_BYTES]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) == before
    assert thresholds == [tuning_applied.KEPT_FREED_BYTES, tuning_applied.GLIBC_SETTLED_MMAP_BYTES]


# --- the run -----------------------------------------------------------------------------------------------------


def test_seed_mode_refuses_tuned_only_choices():
    with pytest.raises(ConfigError, match="--precision is a tuned-mode choice.*--mode tuned"):
        RunConfig(workloads=("mnist-cnn2",), precision="bf16")
    with pytest.raises(ConfigError, match="unknown --mode 'fast'; choose one of: seed, tuned"):
        RunConfig(workloads=("mnist-cnn2",), mode="fast")


@pytest.mark.slow
def test_repeats_share_one_trial_and_record_every_choice(monkeypatch, force_cpu_isa):
    force_cpu_isa("avx2,avx512f,avx512_bf16")  # bf16 is offered, so there are two options to try on any CPU
    trials = []
    real_choose = session_choices.choose_tuning

    def counted(*arguments):
        trials.append(arguments[0])
        return real_choose(*arguments)

    monkeypatch.setattr(session_choices, "choose_tuning", counted)
    config = RunConfig(
        workloads=("mnist-cnn2",),
        devices="cpu",
        data="synthetic",
        epochs=2,
        max_steps=4,
        max_eval_steps=1,
        repeats=2,
        mode="tuned",
        batch_size=8,
    )  # small: emulated bf16 is slow
    result = runner.run(planning.plan(config))
    assert len(trials) == 1
    first, second = result.runs
    assert first.status == second.status == "ok"
    assert first.tuning_note == second.tuning_note and first.tuning_note.startswith("trial samples/s: fp32 ")
    rounds = re.search(r", median \(range\) of (\d+) rounds; kept ", first.tuning_note)
    assert rounds and int(rounds[1]) >= tuning.TRIAL_ROUNDS  # more when 5 blocks took less than the trial's second
    assert first.settings == second.settings and first.settings.mode == "tuned"
    # what the run records is what the trial kept: the layout and the fused step are among a CPU's options
    kept = first.tuning_note.rsplit("; kept ", 1)[1].split(":")[0].split("+")
    settings = first.settings
    assert kept == [
        settings.precision,
        *(["channels_last"] * settings.channels_last),
        *(["fused"] * settings.fused_optimizer),
    ]
    assert len(trials[0]) == 8  # fp32 and bf16, each with the layout and the fused step off and on


def test_the_cli_shows_what_tuned_mode_chose(tmp_path):
    output = tmp_path / "result.json"
    completed = CliRunner().invoke(
        app,
        [
            "run",
            "cifar10-mlp",
            "--mode",
            "tuned",
            "--precision",
            "fp32",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "2",
            "--max-steps",
            "3",
            "--max-eval-steps",
            "1",
            "--quiet",
            "--db",
            str(tmp_path / "db.sqlite"),
            "--json",
            str(output),
        ],
    )
    assert completed.exit_code == 0, completed.output
    settings = json.loads(output.read_text())["runs"][0]["settings"]
    assert (settings["mode"], settings["precision"], settings["channels_last"]) == ("tuned", "fp32", False)
    # the fused step is a CPU's trial to keep: the line says which way it went, as the record does
    kept = "cpu: tuned: fp32, fused optimizer" if settings["fused_optimizer"] else "cpu: tuned: fp32"
    assert kept in completed.output


def test_the_seconds_spent_choosing_are_recorded_on_the_run_that_chose_and_in_no_other_figure(monkeypatch):
    shift = [0.0]  # seconds the runner's clock is moved on by: what the stand-in trial "took"

    class ShiftedStopwatch(Stopwatch):
        def __init__(self, device: torch.device) -> None:
            super().__init__(device, clock=lambda: time.perf_counter() + shift[0])

    def thirty_second_trial(options, build, batches, watch):
        shift[0] += 30.0
        return options[0], "trial samples/s: stand-in"

    monkeypatch.setattr(session_choices, "Stopwatch", ShiftedStopwatch)
    monkeypatch.setattr(session_choices, "choose_tuning", thirty_second_trial)
    config = RunConfig(
        workloads=("cifar10-mlp",),
        devices="cpu",
        data="synthetic",
        epochs=1,
        max_steps=2,
        max_eval_steps=1,
        repeats=2,
        mode="tuned",
        precision="fp32",
    )
    first, second = runner.run(planning.plan(config)).runs
    assert first.status == second.status == "ok"
    assert 30.0 <= first.tuning_s < 40.0  # the trial's 30 s and the little the choosing itself took
    assert second.tuning_s == 0.0  # it reused the first run's choice
    assert first.end_to_end_s < 30.0  # the choosing is inside no figure but its own


# --- --batch-size auto -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_run_with_auto_batch_size_records_the_size_it_trained_with():
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (1_400, 1, 28, 28), dtype=np.uint8)
    labels = generator.integers(0, 10, 1_400).astype(np.int64)
    dataset = ArrayDataset(
        "mnist", "synthetic", images[:1_050], labels[:1_050], images[1_050:], labels[1_050:], num_classes=10
    )
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, batch_size_auto=True)
    (job,) = planning.plan(config).jobs
    record = new_record(job, dataset, 0)
    train_record(record, job, dataset)
    assert record.status == "ok", record.error
    chosen = record.settings.batch_size
    assert chosen in (50, 100)  # 1,050 samples make 7 steps an epoch up to 150: 50 and 100 are tried
    assert record.settings.batch_size_auto and record.settings.hyperparameters["batch_size"] == chosen
    assert record.epochs[0].steps == math.ceil(1_050 / chosen)
    assert record.tuning_note.startswith("batch sizes tried, samples/s: 50 ")
    assert record.tuning_s >= tuning.TRIAL_SECONDS  # each size tried is timed for at least that long
    assert "median (range) of each size's blocks" in record.tuning_note


def test_the_cli_says_what_a_batch_size_may_be(tmp_path):
    completed = CliRunner().invoke(app, ["run", "mnist-cnn2", "--batch-size", "many", "--db", str(tmp_path / "d")])
    assert completed.exit_code == 2
    assert "--batch-size 'many': write a whole number, e.g. --batch-size 64, or --batch-size auto" in completed.output


def test_a_sweep_over_modes_runs_every_seed_point_before_any_tuned_one(monkeypatch):
    from devicebench.cli import sweep as sweep_command

    asked = []

    def capture(job_plan, **options):
        asked.extend(job_plan.jobs)
        raise SystemExit(0)

    monkeypatch.setattr(sweep_command, "train_and_show", capture)
    CliRunner().invoke(
        app, ["sweep", "mnist-cnn2", "--batch-size", "32,64", "--mode", "seed,tuned", "--devices", "cpu"]
    )
    assert [(job.mode, job.batch_size) for job in asked] == [
        ("seed", 32),
        ("seed", 64),
        ("tuned", 32),
        ("tuned", 64),
    ]  # tuned mode's allocator outlives its runs


def test_a_workload_that_is_not_a_torch_model_says_tuned_mode_left_it_alone():
    pytest.importorskip("xgboost")
    config = RunConfig(
        workloads=("gbdt-synthetic",),
        devices="cpu",
        data="synthetic",
        epochs=2,
        max_steps=1,
        overrides=("rows=2000", "features=5"),
        mode="tuned",
    )
    (record,) = runner.run(planning.plan(config)).runs
    assert record.status == "ok", record.error
    assert record.tuning_note == "not a torch model: it trains as in seed mode, with nothing to tune"
    assert record.settings.precision == "fp32" and not record.settings.fused_optimizer
