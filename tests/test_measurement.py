"""The timing audit: for each of DESIGN.md's ten rules of measuring truthfully, a test that fails if the rule breaks.

docs/measurement.md maps every rule to the code that keeps it and to these tests (and to older ones elsewhere). No
test here reads a real clock to decide anything: a fake device whose queued work only lands on the clock when it is
synchronized, fake memory counters and known epoch times make every expected number exact.

    python -m pytest tests/test_measurement.py -q
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import resource
import time
from pathlib import Path

import fakes
import psutil
import pytest
import torch
from result_fixtures import machine, run, session
from torch import nn
from training_fixtures import DelayedBatches, learnable_dataset, linear_setup
from typer.testing import CliRunner

import devicebench
from devicebench import RunConfig, planning, runner
from devicebench.cli import app
from devicebench.data import synthetic_dataset
from devicebench.data.pipeline import HostBatches
from devicebench.devices import DeviceError
from devicebench.engine import loop
from devicebench.engine.loop import TrainingPlan, TrainingSetup, train
from devicebench.engine.timing import Stopwatch
from devicebench.events import RunReporter
from devicebench.host import BYTES_PER_MIB
from devicebench.report.tables import comparison_text
from devicebench.results.compare import compare
from devicebench.results.schema import EpochRecord, RunRecord, RunSettings, RunSummary
from devicebench.results.speed_settings import SPEED_SETTINGS, setting_text

CPU = torch.device("cpu")
BOX = machine("box", "m1")

# What each part of the work costs on the fake device, in seconds: powers of two, so that the sum a timer shows
# tells which parts it saw (a part left out of a timer is a missing bit).
FORWARD_S = 1.0
LOSS_S = 2.0
BACKWARD_S = 4.0
OPTIMIZER_STEP_S = 8.0
ZERO_GRAD_S = 16.0
BATCH_LOAD_S = 32.0  # host work: the clock moves at once
EVAL_BATCH_S = 64.0
BUILD_S = 128.0
TRAINING_STEP_S = FORWARD_S + LOSS_S + BACKWARD_S + OPTIMIZER_STEP_S + ZERO_GRAD_S + BATCH_LOAD_S  # 63 s
STEPS, EVAL_BATCHES, EPOCHS, BATCH = 4, 2, 3, 32


class QueuedDevice:
    """A fake accelerator: launching work returns at once and only queues it, as on CUDA, so the host's clock moves
    by the queued seconds only when `synchronize` waits for them. Work on the host itself moves the clock at once."""

    def __init__(self) -> None:
        self.seconds = 0.0  # the host's monotonic clock
        self.queued_s = 0.0  # launched on the device, not yet waited for
        self.events: list[str] = []

    def launch(self, seconds: float, event: str) -> None:
        self.queued_s += seconds
        self.events.append(event)

    def host_work(self, seconds: float, event: str) -> None:
        self.seconds += seconds
        self.events.append(event)

    def synchronize(self, device: torch.device) -> None:
        self.seconds += self.queued_s
        self.queued_s = 0.0
        self.events.append("sync")

    def read_clock(self) -> float:
        self.events.append("clock")
        return self.seconds

    def read_host_clock(self) -> float:
        return self.seconds

    def stopwatch(self, synchronize: bool = True) -> Stopwatch:
        """A Stopwatch on this device; `synchronize=False` is the broken timer the tests must tell apart."""
        return Stopwatch(
            CPU,
            clock=self.read_clock,
            host_clock=self.read_host_clock,
            synchronize=self.synchronize if synchronize else lambda device: None,
        )


class QueuedModel(nn.Module):
    """A linear model whose forward, backward and evaluation batches queue known work on the fake device."""

    def __init__(self, device: QueuedDevice) -> None:
        super().__init__()
        self.device = device
        self.linear = nn.Linear(64, 4)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        outputs = self.linear(images.flatten(1))
        if not self.training:
            self.device.launch(EVAL_BATCH_S, "eval")
            return outputs
        self.device.launch(FORWARD_S, "forward")
        outputs.register_hook(lambda gradient: self.device.launch(BACKWARD_S, "backward"))
        return outputs


class QueuedLoss(nn.CrossEntropyLoss):
    def __init__(self, device: QueuedDevice) -> None:
        super().__init__()
        self.device = device

    def forward(self, outputs: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():  # a training step's loss; evaluation's is part of EVAL_BATCH_S
            self.device.launch(LOSS_S, "loss")
        return super().forward(outputs, labels)


class QueuedSGD(torch.optim.SGD):
    def __init__(self, parameters, device: QueuedDevice) -> None:
        super().__init__(parameters, lr=0.1)
        self.device = device

    def step(self, closure=None):
        self.device.launch(OPTIMIZER_STEP_S, "optimizer step")
        return super().step(closure)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.device.launch(ZERO_GRAD_S, "zero grad")
        super().zero_grad(set_to_none)


def new_record(epochs: int = EPOCHS) -> RunRecord:
    settings = RunSettings(
        batch_size=BATCH,
        epochs=epochs,
        max_steps=STEPS,
        max_eval_steps=EVAL_BATCHES,
        seed=0,
        threads=1,
        data_source="synthetic",
    )
    return RunRecord("tiny", "", "cpu", "test cpu", 0, settings, "2026-01-01T00:00:00Z")


def train_on_queued_device(synchronize: bool = True, target_accuracy: float | None = None) -> RunRecord:
    device = QueuedDevice()
    data = learnable_dataset()

    def build() -> TrainingSetup:
        device.launch(BUILD_S, "build")  # e.g. copying the weights to the device: model creation's, no epoch's
        model = QueuedModel(device)
        return TrainingSetup(model, QueuedLoss(device), QueuedSGD(model.parameters(), device))

    record = new_record()
    train(
        record,
        build,
        DelayedBatches(
            HostBatches(data.train_images, data.train_labels, BATCH, CPU),
            lambda: device.host_work(BATCH_LOAD_S, "batch"),
        ),
        HostBatches(data.test_images, data.test_labels, BATCH, CPU, shuffle=False),
        TrainingPlan(epochs=EPOCHS, max_steps=STEPS, max_eval_steps=EVAL_BATCHES, target_accuracy=target_accuracy),
        device.stopwatch(synchronize),
    )
    return record


# --- rules 1, 2, 5 and 8: what lands inside the epoch's timer, on a device that queues its work -----------------


def test_every_part_of_a_step_is_inside_the_epoch_timer_and_evaluation_is_outside_it():
    record = train_on_queued_device()
    assert TRAINING_STEP_S == 63
    for epoch in record.epochs:
        # 4 x 63 s: data loading, forward, loss, backward, optimizer step and zero-grad; no evaluation, no build
        assert epoch.train_time_s == STEPS * TRAINING_STEP_S
        assert epoch.eval_time_s == EVAL_BATCHES * EVAL_BATCH_S  # timed apart
        assert epoch.input_wait_s == STEPS * BATCH_LOAD_S  # of train_time_s, the waiting for batches
        assert epoch.samples_per_s == STEPS * BATCH / (STEPS * TRAINING_STEP_S)  # rule 5: samples per second
        assert epoch.step_time_ms == TRAINING_STEP_S * 1000  # ... and milliseconds per step
    assert record.model_build_s == BUILD_S  # the build's queued work is waited for before epoch 1 starts
    assert record.end_to_end_s == BUILD_S + EPOCHS * (STEPS * TRAINING_STEP_S + EVAL_BATCHES * EVAL_BATCH_S)


def test_a_timer_that_did_not_synchronize_would_see_only_the_host_s_share():
    """The control: the fake device really does hide its work from an unsynchronized timer, so the test above
    would fail if the loop timed without synchronizing."""
    record = train_on_queued_device(synchronize=False)
    assert record.epochs[0].train_time_s == STEPS * BATCH_LOAD_S  # 128 s of 252: the device's work is missing


def test_time_to_target_counts_training_alone_or_says_that_it_includes_evaluation():
    record = train_on_queued_device(target_accuracy=0.0)  # reached by the first epoch
    epoch_s, evaluation_s = STEPS * TRAINING_STEP_S, EVAL_BATCHES * EVAL_BATCH_S
    assert record.time_to_target_train_s == epoch_s
    assert record.time_to_target_wall_s == BUILD_S + epoch_s + evaluation_s


# --- rule 1: only engine/timing.py reads a clock -------------------------------------------------------------------

SOURCE = Path(devicebench.__file__).parent
CLOCK_FUNCTIONS = {
    "perf_counter",
    "perf_counter_ns",
    "monotonic",
    "monotonic_ns",
    "process_time",
    "process_time_ns",
    "time_ns",
    "elapsed_time",
}  # elapsed_time: a CUDA event's


def clock_readings(tree: ast.AST) -> list[int]:
    """Lines that read a clock: time.perf_counter and its kin, time.time, datetime.now, a CUDA event's elapsed_time,
    or any of them imported by name."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value.id if isinstance(node.value, ast.Name) else ""
            if node.attr in CLOCK_FUNCTIONS or (owner, node.attr) in {
                ("time", "time"),
                ("datetime", "now"),
                ("datetime", "utcnow"),
            }:
                lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "time":
            lines += [node.lineno for alias in node.names if alias.name in CLOCK_FUNCTIONS | {"time"}]
    return lines


def test_no_module_but_engine_timing_reads_a_clock():
    timing = SOURCE / "engine" / "timing.py"
    assert clock_readings(ast.parse(timing.read_text())), "the check finds no clock even where one is read"
    elsewhere = {
        str(path.relative_to(SOURCE)): lines
        for path in SOURCE.rglob("*.py")
        if path != timing
        if (lines := clock_readings(ast.parse(path.read_text())))
    }
    assert elsewhere == {}, f"clocks read outside engine/timing.py (file: lines): {elsewhere}"


# --- rule 1: nothing is read back from the device inside a timed epoch ---------------------------------------------

READ_BACKS = ("item", "tolist", "numpy", "__float__", "__int__", "__bool__", "__index__", "__repr__", "__format__")


@pytest.fixture
def read_backs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every read of a tensor's value into Python, logged as "read" into the returned event list."""
    events: list[str] = []
    for name in READ_BACKS:
        original = getattr(torch.Tensor, name)

        def logged(tensor, *arguments, _original=original, **keywords):
            events.append("read")
            return _original(tensor, *arguments, **keywords)

        monkeypatch.setattr(torch.Tensor, name, logged)
    return events


def train_logging_reads(events: list[str], steps: int, build=linear_setup) -> None:
    """Train a real linear model on the CPU for 2 epochs, logging each synchronized clock reading ("clock") and
    each training forward pass ("step") into `events`, beside the read-backs."""

    def logged_build() -> TrainingSetup:
        setup = build()
        setup.model.register_forward_hook(
            lambda module, inputs, outputs: events.append("step") if module.training else None
        )
        return setup

    def clock() -> float:
        events.append("clock")
        return time.perf_counter()

    data = learnable_dataset()
    train(
        new_record(2),
        logged_build,
        HostBatches(data.train_images, data.train_labels, BATCH, CPU),
        HostBatches(data.test_images, data.test_labels, BATCH, CPU, shuffle=False),
        TrainingPlan(epochs=2, max_steps=steps, max_eval_steps=1),
        Stopwatch(CPU, clock=clock),
    )


def timed_epochs(events: list[str]) -> list[list[str]]:
    """The events between two synchronized clock readings that hold training steps: each timed epoch's inside."""
    between, current = [], []
    for event in events:
        if event == "clock":
            between.append(current)
            current = []
        else:
            current.append(event)
    return [part for part in between if "step" in part]


def test_no_value_is_read_back_inside_a_timed_epoch_and_reads_do_not_grow_with_steps(read_backs):
    train_logging_reads(read_backs, steps=2)
    epochs = timed_epochs(read_backs)
    assert [part.count("step") for part in epochs] == [2, 2]
    assert all("read" not in part for part in epochs), epochs
    reads_with_two_steps = read_backs.count("read")
    assert reads_with_two_steps > 0  # losses and accuracies are read: once an epoch, after the clock stopped

    read_backs.clear()
    train_logging_reads(read_backs, steps=6)
    assert all("read" not in part for part in timed_epochs(read_backs))
    assert read_backs.count("read") == reads_with_two_steps  # three times the steps, not one more read


def test_a_step_that_reads_its_loss_is_caught(read_backs):
    """The control: a `.item()` per step, as a careless loop would do, lands inside the timed epoch."""

    def item_per_step() -> TrainingSetup:
        setup = linear_setup()

        def step(model, batch, optimizer):
            inputs, labels = batch
            loss = nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            return loss.item()

        return dataclasses.replace(setup, step=step)

    train_logging_reads(read_backs, steps=2, build=item_per_step)
    assert all(part.count("read") >= 2 for part in timed_epochs(read_backs))


# --- rule 3: warm-up is its own phase -----------------------------------------------------------------------------


def test_the_warmup_epoch_changes_no_steady_figure_and_no_speedup():
    # two epochs each: had warm-up been pooled, the median rates would be (10 + 100) / 2 and (1 + 500) / 2
    cpu, gpu = compare([session(BOX, [run("cpu", [100, 10]), run("cuda:0", [1000, 2])])])["mnist-cnn2"]
    assert gpu.speedup.ratio == pytest.approx(5.0)
    assert (gpu.epoch_time_s.median, gpu.warmup_epoch_s.median) == (2, 1000)
    assert gpu.end_to_end_s.median == 1000 + 2 + 1.0  # end to end keeps everything, warm-up included
    assert cpu.runs[0].summary().steady_epoch_time_s == 10 and cpu.runs[0].summary().warmup_epoch_time_s == 100


# --- rule 4: medians with their spread ----------------------------------------------------------------------------


def test_the_speedup_is_a_ratio_of_medians_so_one_slow_epoch_does_not_move_it():
    # CPU steady epochs 10, 10, 40 s: median rate 100 samples/s (the mean, 75, would give 6.67x)
    cpu, gpu = compare([session(BOX, [run("cpu", [20, 10, 10, 40]), run("cuda:0", [5, 2, 2, 2])])])["mnist-cnn2"]
    assert gpu.speedup.ratio == pytest.approx(5.0)
    assert (cpu.epoch_time_s.median, cpu.epoch_time_s.low, cpu.epoch_time_s.high) == (10, 10, 40)
    assert gpu.speedup.low <= 5.0 <= gpu.speedup.high


# --- rule 5: units in names ---------------------------------------------------------------------------------------

UNIT_SUFFIXES = ("_s", "_ms", "_per_s", "_j", "_w", "_mib", "_percent", "_tflops", "_per_sample")
UNITLESS = {  # fractions of 1, or losses, which have no unit
    "train_loss",
    "test_loss",
    "train_accuracy",
    "test_accuracy",
    "target_accuracy",
    "final_test_accuracy",
    "best_test_accuracy",
    "run_to_run_cv",  # a coefficient of variation
    "run_to_run_freedom",  # degrees of freedom, not whole where they are Welch-Satterthwaite's
}
COUNTS = {  # whole numbers of things, named after the things
    "epoch",
    "steps",
    "samples",
    "eval_samples",
    "repeat",
    "parameter_count",
    "diverged_at_step",
    "epochs_completed",
    "steady_epochs",
    "batch_size",
    "epochs",
    "max_steps",
    "max_eval_steps",
    "seed",
    "threads",
    "workers",
    "world_size",
    "compile_recompiles",
    "compile_graph_breaks",
}


@pytest.mark.parametrize("schema", [EpochRecord, RunRecord, RunSummary, RunSettings])
def test_every_number_in_the_schema_names_its_unit_or_is_a_known_fraction_or_count(schema):
    numbers = [field for field in dataclasses.fields(schema) if "float" in str(field.type) or "int" in str(field.type)]
    assert numbers
    for field in numbers:
        if field.name.endswith(UNIT_SUFFIXES):
            continue
        known = UNITLESS if "float" in str(field.type) else COUNTS
        assert field.name in known, f"{schema.__name__}.{field.name} ({field.type}) names no unit"


def test_peak_rss_is_recorded_in_mebibytes():
    before_mib = psutil.Process().memory_info().rss / BYTES_PER_MIB
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=1, max_steps=1, max_eval_steps=1
            )
        )
    )
    peak_mib = result.runs[0].peak_rss_mib
    high_water_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux counts kibibytes
    assert before_mib <= peak_mib <= high_water_kib / 1024  # kB or bytes would miss by a factor of 1024


# --- rule 6: never fall back silently -----------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: nothing to refuse")
def test_cuda_asked_on_a_machine_without_it_fails_before_training_and_says_why(monkeypatch):
    # a CPU-only build, whichever build runs the test
    fakes.install_machine(monkeypatch, fakes.this_machine(cuda_build=None, hip_build=None))
    trained = []
    with pytest.raises(DeviceError, match="'cuda' is not available on this machine. Devices present: cpu") as caught:
        runner.run(
            planning.plan(
                RunConfig(workloads=("mnist-cnn2",), devices="cuda", data="synthetic", epochs=1, max_steps=1)
            ),
            reporter=type("Recorder", (RunReporter,), {"run_started": trained.append})(),
        )
    assert "CPU-only build" in str(caught.value) and "https://pytorch.org" in str(caught.value)  # and what to do
    assert trained == []


def test_data_that_fell_back_to_synthetic_says_so_before_training_in_the_table_and_in_the_json(tmp_path, monkeypatch):
    reason = "real MNIST could not be had (https://x.invalid/mnist: refused); using synthetic data of the same shape"

    def fallback(name, source, **options):
        return dataclasses.replace(
            synthetic_dataset(name, seed=options.get("seed", 0), train_size=200, test_size=50), fallback_reason=reason
        )

    monkeypatch.setattr("devicebench.runner.load_dataset", fallback)
    output = tmp_path / "run.json"
    result = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--data",
            "auto",
            "--epochs",
            "2",
            "--max-steps",
            "2",
            "--max-eval-steps",
            "1",
            "--json",
            str(output),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "SYNTHETIC data" in result.output and "https://x.invalid/mnist: refused" in result.output  # the notice
    assert "SYNTHETIC DATA" in result.stdout  # under the table
    assert json.loads(output.read_text())["runs"][0]["settings"]["data_source"] == "synthetic"


# --- rule 7: several processes ------------------------------------------------------------------------------------
# tests/test_distributed.py::test_throughput_is_global_samples_over_the_slowest_rank


# --- rule 9: memory as well as time -------------------------------------------------------------------------------


def test_peak_device_memory_covers_model_creation_to_the_last_epoch(monkeypatch):
    events: list[str] = []
    monkeypatch.setattr(loop, "reset_peak_memory", lambda device: events.append("reset"))
    monkeypatch.setattr(loop, "peak_memory_mib", lambda device: events.append("peak") or 812.5)

    def build() -> TrainingSetup:
        events.append("build")
        return linear_setup()

    data = learnable_dataset()
    record = new_record(2)
    train(
        record,
        build,
        HostBatches(data.train_images, data.train_labels, BATCH, CPU),
        HostBatches(data.test_images, data.test_labels, BATCH, CPU, shuffle=False),
        TrainingPlan(epochs=2, max_steps=2, max_eval_steps=1),
        Stopwatch(CPU),
    )
    assert events == ["reset", "build", "peak"]  # counted afresh before the model exists, read after it all
    assert record.peak_device_memory_mib == 812.5


# --- rule 10: what changes the numbers is recorded, and runs that differ in it are never pooled ---------------------

CHANGED = {
    "mode": "tuned",
    "precision": "bf16",
    "batch_size": 64,
    "batch_size_auto": True,
    "data_source": "real",
    "workers": 2,
    "overrides": {"learning_rate": 0.1},
    "threads": 4,
    "tf32_matmul": True,
    "tf32_cudnn": True,
    "compiled": True,
    "step_graph": True,
    "world_size": 2,
    "max_steps": 30,
    "channels_last": True,
    "fused_optimizer": True,
    "cudnn_benchmark": True,
    "device_resident": True,
    "allocator_keeps_memory": True,
}


def test_every_speed_setting_is_a_recorded_setting_with_a_changed_value_here():
    assert set(CHANGED) == set(SPEED_SETTINGS)
    assert set(SPEED_SETTINGS) <= {field.name for field in dataclasses.fields(RunSettings)}


@pytest.mark.parametrize("setting", SPEED_SETTINGS)
def test_runs_that_differ_in_one_speed_setting_are_never_pooled(setting):
    changed = run("cpu", [2, 1, 1])
    setattr(changed.settings, setting, CHANGED[setting])
    rows = compare([session(BOX, [run("cpu", [2, 1, 1]), changed])])["mnist-cnn2"]
    assert len(rows) == 2 and all(len(row.runs) == 1 for row in rows)
    assert rows[0].label != rows[1].label  # and the labels tell them apart: the changed row names its value
    assert rows[1].differs_in == (setting,) and rows[1].differs_by == setting_text(setting, CHANGED[setting]) != ""


def test_a_run_records_its_speed_settings_and_the_software_it_ran_on():
    result = runner.run(
        planning.plan(
            RunConfig(
                workloads=("mnist-cnn2",),
                devices="cpu",
                data="synthetic",
                epochs=1,
                max_steps=1,
                max_eval_steps=1,
                threads=1,
                batch_size=20,
                workers=0,
            )
        )
    )
    settings = result.runs[0].settings
    assert (settings.threads, settings.batch_size, settings.workers, settings.data_source) == (1, 20, 0, "synthetic")
    assert (settings.mode, settings.precision, settings.compiled, settings.channels_last) == (
        "seed",
        "fp32",
        False,
        False,
    )
    assert not (settings.tf32_matmul or settings.tf32_cudnn)  # seed mode is strict fp32, whatever the process allows
    assert result.machine["torch"] == torch.__version__ and result.machine["devicebench"] == result.devicebench_version
    assert {"python", "os", "cpu", "accelerators"} <= set(result.machine)
    assert "synthetic data" in comparison_text([result]).lower()


# --- the docs that name tests name tests that exist -----------------------------------------------------------------

REPOSITORY = Path(__file__).resolve().parent.parent


def named_tests(document: str) -> list[tuple[str, str]]:
    """(test file, test function) for every `file.py::test_name` in `document`, and every `::test_name` that
    continues the list of the file named last."""
    named, file = [], None
    for match in re.finditer(r"`(?:tests/)?(test_\w+\.py)?::(test_\w+)", (REPOSITORY / document).read_text()):
        file = match[1] or file
        named.append((file, match[2]))
    return named


@pytest.mark.parametrize("document", ["docs/measurement.md", "SECURITY.md"])
def test_every_test_a_document_names_exists(document):
    named = named_tests(document)
    assert len(named) > 40
    missing = []
    for file, test in named:
        tree = ast.parse((REPOSITORY / "tests" / file).read_text())
        if test not in {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}:
            missing.append(f"{file}::{test}")
    assert not missing, f"{document} names tests that do not exist: {missing}"
