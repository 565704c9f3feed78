"""Tuned mode: the same accuracy as seed mode on real digits, the faster option kept, every choice recorded.

    python -m pytest tests/test_tuning.py -q
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from devicebench import RunConfig, runner
from devicebench.cli import app
from devicebench.config import ConfigError
from devicebench.data import ArrayDataset
from devicebench.data.pipeline import HostBatches
from devicebench.engine import tuning
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.timing import Stopwatch
from devicebench.engine.tuning import (
    Tuning,
    candidates,
    choose_tuning,
    process_settings,
    tuned_setup,
)
from devicebench.runner import new_record, train_record
from devicebench.workloads import get_workload

CPU = torch.device("cpu")


@pytest.mark.slow
def test_tuned_mode_reaches_the_accuracy_of_seed_mode_on_real_digits(real_digits):
    """bf16 autocast, channels_last and the fused optimizer change how each step runs, not what it learns."""
    entry = get_workload("mnist-cnn2")
    accuracies = {}
    for mode, precision in (("seed", "auto"), ("tuned", "bf16")):
        config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", epochs=2, data="real", mode=mode,
                           precision=precision)
        record = new_record(entry, real_digits, CPU, 0, config)
        train_record(record, entry, real_digits, CPU, config)
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


# --- choosing --------------------------------------------------------------------------------------------------


class FakeClock:
    """Seconds that pass only when a step says so: trial rates become exact numbers."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __call__(self) -> float:
        return self.seconds


def tiny_batches(samples: int = 400, batch_size: int = 10) -> HostBatches:
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (samples, 1, 4, 4), dtype=np.uint8)
    labels = generator.integers(0, 3, samples).astype(np.int64)
    return HostBatches(images, labels, batch_size, CPU)


def timed_builder(clock: FakeClock, seconds_per_step: dict[str, float], failing: tuple[str, ...] = ()):
    """A build for `choose_tuning` whose forward pass takes a known (fake) time per precision."""

    def build(option: Tuning) -> TrainingSetup:
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            if option.precision in failing:
                raise RuntimeError("no kernel for this dtype")
            clock.seconds += seconds_per_step[option.precision]
            return model(inputs)

        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        return TrainingSetup(model=model, loss_function=nn.CrossEntropyLoss(), optimizer=optimizer, forward=forward)

    return build


OPTIONS = [Tuning(precision="fp32"), Tuning(precision="bf16")]


def test_the_clearly_faster_option_is_kept_and_the_note_gives_each_rate():
    clock = FakeClock()
    watch = Stopwatch(CPU, clock=clock, synchronize=lambda device: None)
    chosen, note = choose_tuning(OPTIONS, timed_builder(clock, {"fp32": 0.1, "bf16": 0.05}), tiny_batches(), watch)
    assert chosen.precision == "bf16"
    assert note == "trial samples/s: fp32 100, bf16 200; kept bf16"  # 10 samples per 0.1 s and per 0.05 s


def test_a_marginal_gain_keeps_the_plainer_option():
    clock = FakeClock()
    watch = Stopwatch(CPU, clock=clock, synchronize=lambda device: None)
    build = timed_builder(clock, {"fp32": 0.1, "bf16": 0.1 / 1.02})  # 2% faster: within noise
    chosen, note = choose_tuning(OPTIONS, build, tiny_batches(), watch)
    assert chosen.precision == "fp32" and note.endswith("kept fp32")


def test_an_option_that_fails_is_left_out_and_named():
    clock = FakeClock()
    watch = Stopwatch(CPU, clock=clock, synchronize=lambda device: None)
    build = timed_builder(clock, {"fp32": 0.1, "bf16": 0.05}, failing=("bf16",))
    chosen, note = choose_tuning(OPTIONS, build, tiny_batches(), watch)
    assert chosen.precision == "fp32"
    assert note == "trial samples/s: fp32 100; bf16 failed (RuntimeError); kept fp32"


def test_when_every_option_fails_the_run_is_told_why():
    clock = FakeClock()
    watch = Stopwatch(CPU, clock=clock, synchronize=lambda device: None)
    with pytest.raises(RuntimeError, match=r"every tuned option failed in the trial: fp32 failed \(RuntimeError\); "
                                           r"bf16 failed"):
        choose_tuning(OPTIONS, timed_builder(clock, {}, failing=("fp32", "bf16")), tiny_batches(), watch)


def test_a_single_option_needs_no_trial():
    def build(option: Tuning) -> TrainingSetup:
        raise AssertionError("no trial should run")

    chosen, note = choose_tuning([Tuning(precision="bf16")], build, tiny_batches(), Stopwatch(CPU))
    assert chosen.precision == "bf16" and note == ""


def test_bf16_is_tried_only_where_the_cpu_computes_it_natively(force_cpu_isa):
    force_cpu_isa("avx2,avx512f")
    assert [option.precision for option in candidates(Tuning(), CPU, "auto", "auto")] == ["fp32"]
    force_cpu_isa("avx2,avx512f,avx512_bf16")
    assert [option.precision for option in candidates(Tuning(), CPU, "auto", "auto")] == ["fp32", "bf16"]
    assert [option.precision for option in candidates(Tuning(), CPU, "fp32", "auto")] == ["fp32"]  # asked for


def test_compile_is_tried_on_gpus_and_on_cpus_only_when_asked():
    assert [option.compiled for option in candidates(Tuning(), CPU, "fp32", "auto")] == [False]
    assert [option.compiled for option in candidates(Tuning(), CPU, "fp32", "on")] == [True]
    assert [option.compiled for option in candidates(Tuning(), torch.device("cuda"), "fp32", "auto")] == [False, True]


# --- applying --------------------------------------------------------------------------------------------------


def small_conv_setup(optimizer_class=torch.optim.Adam) -> TrainingSetup:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3))
    return TrainingSetup(model=model, loss_function=nn.CrossEntropyLoss(),
                         optimizer=optimizer_class(model.parameters(), lr=0.01))


def test_tuned_setup_runs_the_same_model_in_bf16_channels_last_with_a_fused_step():
    plain = small_conv_setup()
    inputs = torch.rand(5, 1, 8, 8)
    expected = plain.model(inputs)
    setup, applied = tuned_setup(small_conv_setup(), Tuning(precision="bf16", channels_last=True,
                                                            fused_optimizer=True), CPU)
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
    monkeypatch.setattr(tuning, "_set_glibc_thresholds", thresholds.append)
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark)
    with process_settings(Tuning(tf32_matmul=True, cudnn_benchmark=True, allocator_keeps_memory=True)):
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.benchmark
        assert thresholds == [tuning.KEPT_FREED_BYTES]
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.benchmark) == before
    assert thresholds == [tuning.KEPT_FREED_BYTES, tuning.GLIBC_SETTLED_MMAP_BYTES]


# --- the run -----------------------------------------------------------------------------------------------------


def test_seed_mode_refuses_tuned_only_choices():
    with pytest.raises(ConfigError, match="--precision is a tuned-mode choice.*--mode tuned"):
        RunConfig(workloads=("mnist-cnn2",), precision="bf16")
    with pytest.raises(ConfigError, match="unknown --mode 'fast'; choose one of: seed, tuned"):
        RunConfig(workloads=("mnist-cnn2",), mode="fast")


def test_repeats_share_one_trial_and_record_every_choice(monkeypatch):
    trials = []
    real_choose = runner.choose_tuning

    def counted(*arguments):
        trials.append(arguments[0])
        return real_choose(*arguments)

    monkeypatch.setattr(runner, "choose_tuning", counted)
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=4,
                       max_eval_steps=1, repeats=2, mode="tuned")
    result = runner.run(config)
    assert len(trials) == 1
    first, second = result.runs
    assert first.status == second.status == "ok"
    assert first.tuning_note == second.tuning_note and first.tuning_note.startswith("trial samples/s: fp32 ")
    assert first.settings == second.settings
    assert first.settings.mode == "tuned" and first.settings.channels_last and first.settings.fused_optimizer


def test_the_cli_shows_what_tuned_mode_chose(tmp_path):
    output = tmp_path / "result.json"
    completed = CliRunner().invoke(app, [
        "run", "cifar10-mlp", "--mode", "tuned", "--precision", "fp32", "--devices", "cpu", "--data", "synthetic",
        "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1", "--quiet", "--db", str(tmp_path / "db.sqlite"),
        "--json", str(output),
    ])
    assert completed.exit_code == 0, completed.output
    assert "cpu: tuned: fp32, fused optimizer" in completed.output
    settings = json.loads(output.read_text())["runs"][0]["settings"]
    assert (settings["mode"], settings["precision"], settings["channels_last"]) == ("tuned", "fp32", False)


# --- --batch-size auto -------------------------------------------------------------------------------------------


def sized_builder(clock: FakeClock, seconds_per_step, out_of_memory_from: int | None = None):
    """A build whose step takes `seconds_per_step(batch size)` of fake time, and runs out of memory from a size."""

    def build() -> TrainingSetup:
        model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))

        def forward(inputs: torch.Tensor) -> torch.Tensor:
            if out_of_memory_from is not None and len(inputs) >= out_of_memory_from:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            clock.seconds += seconds_per_step(len(inputs))
            return model(inputs)

        return TrainingSetup(model=model, loss_function=nn.CrossEntropyLoss(),
                             optimizer=torch.optim.SGD(model.parameters(), lr=0.1), forward=forward)

    return build


def choose_sizes(seconds_per_step, out_of_memory_from=None, largest=400):
    clock = FakeClock()
    watch = Stopwatch(CPU, clock=clock, synchronize=lambda device: None)
    build = sized_builder(clock, seconds_per_step, out_of_memory_from)
    return tuning.choose_batch_size(10, largest, build, lambda size: tiny_batches(4_000, size), watch)


def test_auto_batch_size_grows_while_doubling_pays():
    # a fixed 0.1 s per step up to 40 samples (throughput doubles), then time grows with the batch (flat throughput)
    size, note = choose_sizes(lambda batch: 0.1 * max(1.0, batch / 40))
    assert size == 40
    assert note == ("batch sizes tried, samples/s: 10 100, 20 200, 40 400, 80 400 (stopped: 80 gained less than 5%); "
                    "kept 40")


def test_auto_batch_size_backs_off_from_out_of_memory():
    size, note = choose_sizes(lambda batch: 0.1, out_of_memory_from=40)
    assert size == 20
    assert note == "batch sizes tried, samples/s: 10 100, 20 200 (stopped: 40 ran out of memory); kept 20"


def test_auto_batch_size_out_of_memory_at_the_first_size_is_the_run_s_error():
    with pytest.raises(torch.OutOfMemoryError):
        choose_sizes(lambda batch: 0.1, out_of_memory_from=10)


def test_auto_batch_size_stops_at_the_data_and_at_slow_steps():
    size, note = choose_sizes(lambda batch: 0.01, largest=40)  # always faster, but the data runs out
    assert size == 40 and "(stopped: 40 is the most that fits the training set)" in note
    size, note = choose_sizes(lambda batch: batch / 10)  # 10 samples/s whatever the size: stops gaining
    assert size == 10
    size, note = choose_sizes(lambda batch: 1.5 if batch == 10 else 2.5)  # 20 is 20% faster, but 2.5 s a step
    assert size == 20 and "(stopped: a step of 20 took 2.5 s)" in note


def test_a_run_with_auto_batch_size_records_the_size_it_trained_with():
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (1_400, 1, 28, 28), dtype=np.uint8)
    labels = generator.integers(0, 10, 1_400).astype(np.int64)
    dataset = ArrayDataset("mnist", "synthetic", images[:1_050], labels[:1_050], images[1_050:], labels[1_050:],
                           num_classes=10)
    entry = get_workload("mnist-cnn2")
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, batch_size_auto=True)
    record = new_record(entry, dataset, CPU, 0, config)
    train_record(record, entry, dataset, CPU, config)
    assert record.status == "ok", record.error
    chosen = record.settings.batch_size
    assert chosen in (50, 100)  # 1,050 samples leave a 7-step trial up to 150: 50 and 100 are tried
    assert record.settings.batch_size_auto and record.settings.hyperparameters["batch_size"] == chosen
    assert record.epochs[0].steps == math.ceil(1_050 / chosen)
    assert record.tuning_note.startswith("batch sizes tried, samples/s: 50 ")


def test_the_cli_says_what_a_batch_size_may_be(tmp_path):
    completed = CliRunner().invoke(app, ["run", "mnist-cnn2", "--batch-size", "many", "--db", str(tmp_path / "d")])
    assert completed.exit_code == 2
    assert "--batch-size 'many': write a whole number, e.g. --batch-size 64, or --batch-size auto" in completed.output


def test_a_sweep_over_modes_runs_every_seed_point_before_any_tuned_one(monkeypatch):
    from devicebench.cli import sweep as sweep_command

    asked = []

    def capture(configs, **options):
        asked.extend(configs)
        raise SystemExit(0)

    monkeypatch.setattr(sweep_command, "train_and_show", capture)
    CliRunner().invoke(app, ["sweep", "mnist-cnn2", "--batch-size", "32,64", "--mode", "seed,tuned"])
    assert [(config.mode, config.batch_size) for config in asked] == [
        ("seed", 32), ("seed", 64), ("tuned", 32), ("tuned", 64)]  # tuned mode's allocator outlives its runs


def test_a_workload_that_is_not_a_torch_model_says_tuned_mode_left_it_alone():
    pytest.importorskip("xgboost")
    config = RunConfig(workloads=("gbdt-synthetic",), devices="cpu", data="synthetic", epochs=2, max_steps=1,
                       overrides=("rows=2000", "features=5"), mode="tuned")
    (record,) = runner.run(config).runs
    assert record.status == "ok", record.error
    assert record.tuning_note == "not a torch model: it trains as in seed mode, with nothing to tune"
    assert record.settings.precision == "fp32" and not record.settings.fused_optimizer
