"""Before training: what cannot work is refused and what would surprise is said, from what is counted on the meta
device; and what ran is what the record keeps.

    python -m pytest tests/test_preflight.py -q
"""

from __future__ import annotations

import logging
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

import devicebench as db
from devicebench import RunConfig, planning
from devicebench.cli import EXIT_USAGE, app
from devicebench.config import ConfigError
from devicebench.data import ArrayDataset
from devicebench.runner import new_record, train_record
from devicebench.workloads.own import OwnModelError

cli = CliRunner()
GIB = 2**30
DEEP = RunConfig(workloads=("catdog-deep",), devices="cpu", data="synthetic", overrides=("depth=256",))
DEEP_PARAMETERS = 50_356_321  # catdog-deep at depth=256
DEEP_FLOPS_PER_SAMPLE = 57_433_129_728  # one training step's, forward and backward (engine/flops.py)
DEEP_TRAINING_GIB = DEEP_PARAMETERS * 4 * 4 / GIB  # fp32 weights, gradients and Adam's two state tensors: 0.75 GiB


@pytest.fixture
def free_memory(monkeypatch):
    """Set the host memory the planner sees as free, in GiB, whatever this machine has."""

    def set_free(gib: float) -> None:
        memory = SimpleNamespace(available=int(gib * GIB))
        monkeypatch.setattr(planning, "psutil", SimpleNamespace(virtual_memory=lambda: memory))

    return set_free


@pytest.fixture
def uncalibrated(monkeypatch):
    monkeypatch.setattr(planning, "peak_tflops", lambda *arguments: None)


# --- memory ------------------------------------------------------------------------------------------------------


def test_a_model_whose_training_state_cannot_fit_the_free_memory_is_refused_with_the_numbers(free_memory):
    free_memory(0.5)
    with pytest.raises(ConfigError) as refused:
        planning.plan(DEEP)
    assert str(refused.value) == (
        f"catdog-deep on cpu: its {DEEP_PARAMETERS:,} parameters need {DEEP_TRAINING_GIB:.1f} GiB to train (weights, "
        "gradients and 2 optimizer state copies, 4 bytes each) and cpu has 0.5 GiB free, before any activations: "
        "train a smaller model (fewer layers or units, through --set), or on a device with more memory"
    )


def test_the_command_line_refuses_it_in_one_line_and_stores_nothing(free_memory, tmp_path):
    free_memory(0.5)
    store = tmp_path / "results.sqlite"
    result = cli.invoke(app, ["run", "catdog-deep", "--set", "depth=256", "--devices", "cpu", "--db", str(store)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "need 0.8 GiB to train" in result.output and "Traceback" not in result.output
    assert not store.exists()


def test_a_model_that_nearly_fills_the_free_memory_is_warned_about_and_planned(free_memory, uncalibrated, caplog):
    free_memory(1.0)  # 0.75 GiB of training state: above half of it, activations come on top
    with caplog.at_level(logging.WARNING, logger=planning.__name__):
        (job,) = planning.plan(DEEP).jobs
    assert job.hyperparameters["depth"] == 256
    (warning,) = [record.getMessage() for record in caplog.records if "out of memory" in record.getMessage()]
    assert warning.startswith(
        f"catdog-deep on cpu may run out of memory: its {DEEP_PARAMETERS:,} parameters need 0.8 GiB to train"
    )
    assert "cpu has 1.0 GiB free" in warning


def test_plenty_of_memory_and_a_short_step_say_nothing(free_memory, uncalibrated, caplog):
    free_memory(64)
    with caplog.at_level(logging.WARNING, logger=planning.__name__):
        planning.plan(DEEP)
    assert not [record for record in caplog.records if record.name == planning.__name__]


def test_sgd_without_momentum_keeps_no_optimizer_state():
    model, data = nn.Linear(1000, 1000), (torch.zeros(4, 1000), torch.zeros(4, dtype=torch.long))  # 1,001,000
    sgd = db.plan(
        model=model, data=data, optimizer=lambda parameters: torch.optim.SGD(parameters, lr=0.1), devices="cpu"
    ).jobs[0]
    assert planning.training_state_bytes(sgd.workload, sgd.hyperparameters, 1_001_000) == (1_001_000 * 4 * 2, 0)
    adam = db.plan(model=model, data=data, devices="cpu").jobs[0]
    assert planning.training_state_bytes(adam.workload, adam.hyperparameters, 1_001_000) == (1_001_000 * 4 * 4, 2)


# --- step time ---------------------------------------------------------------------------------------------------


def test_a_step_estimated_at_minutes_is_warned_about_with_the_estimate_and_how_to_stop(
    free_memory, uncalibrated, caplog
):
    free_memory(64)
    config = RunConfig(
        workloads=("catdog-deep",), devices="cpu", data="synthetic", overrides=("depth=256",), batch_size=8192
    )
    with caplog.at_level(logging.WARNING, logger=planning.__name__):
        planning.plan(config)
    seconds = DEEP_FLOPS_PER_SAMPLE * 8192 / (planning.NOMINAL_PEAK_TFLOPS["cpu"] * 1e12)  # 94 s at 5 TFLOP/s
    (warning,) = [record.getMessage() for record in caplog.records if record.name == planning.__name__]
    assert warning == (
        f"catdog-deep on cpu: one training step of batch 8,192 is estimated to take at least "
        f"{seconds:,.0f} s (its FLOPs at 5 TFLOP/s, a nominal peak for any CPU: a rough bound). "
        "Ctrl-C stops at the end of the step, a second Ctrl-C at once; a smaller --batch-size or "
        "model shortens it"
    )
    assert seconds > planning.SLOW_STEP_S


def test_the_step_estimate_uses_the_calibrated_peak_when_there_is_one(free_memory, monkeypatch):
    free_memory(64)
    monkeypatch.setattr(planning, "peak_tflops", lambda machine, device, precision: 20.0)
    config = RunConfig(
        workloads=("catdog-deep",), devices="cpu", data="synthetic", overrides=("depth=256",), batch_size=8192
    )
    (job,) = planning.plan(config).jobs
    seconds, rate, source = planning.estimated_step_s(job)
    assert (rate, source) == (20.0, "its calibrated peak")
    assert seconds == pytest.approx(DEEP_FLOPS_PER_SAMPLE * 8192 / 20e12)  # 23.5 s: under a minute, no warning


# --- the batch that ran ------------------------------------------------------------------------------------------


def test_a_batch_larger_than_the_training_set_is_recorded_as_the_batch_that_ran(caplog):
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (1_100, 1, 28, 28), dtype=np.uint8)
    labels = generator.integers(0, 10, 1_100).astype(np.int64)
    dataset = ArrayDataset(
        "mnist", "synthetic", images[:1_050], labels[:1_050], images[1_050:], labels[1_050:], num_classes=10
    )
    config = RunConfig(
        workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=1, batch_size=10**9, max_eval_steps=1
    )
    (job,) = planning.plan(config).jobs
    assert job.batch_size == 10**9  # what was asked
    record = new_record(job, dataset, 0)
    with caplog.at_level(logging.WARNING):
        train_record(record, job, dataset)
    assert record.status == "ok", record.error
    assert record.settings.batch_size == record.settings.hyperparameters["batch_size"] == 1_050
    assert (record.epochs[0].steps, record.epochs[0].samples) == (1, 1_050)
    assert "batch 1,000,000,000 is larger than the 1,050 training samples: trained with batch 1,050" in caplog.text


# --- a loss that cannot take the outputs -------------------------------------------------------------------------


@pytest.fixture
def class_labels(tmp_path, monkeypatch):
    """A module of a 10-class model and data whose targets are class indices, as `--model`/`--data` import it."""
    (tmp_path / "classlabels_mse.py").write_text(
        textwrap.dedent("""
        import torch
        from torch import nn

        def build():
            return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 10))

        def load():
            generator = torch.Generator().manual_seed(0)
            return torch.randn(64, 8, generator=generator), torch.randint(0, 10, (64,), generator=generator)
    """)
    )
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_mse_on_class_labels_is_refused_before_training_with_the_fix(class_labels):
    store = class_labels / "results.sqlite"
    result = cli.invoke(
        app,
        [
            "run",
            "--model",
            "classlabels_mse:build",
            "--data",
            "classlabels_mse:load",
            "--loss",
            "mse",
            "--devices",
            "cpu",
            "--db",
            str(store),
        ],
    )
    assert result.exit_code == EXIT_USAGE, result.output
    said = " ".join(result.output.split())
    assert (
        "--loss mse needs float targets shaped like the model's outputs (N, 10), but the targets are class "
        "indices (N,): use --loss cross_entropy for classes, or make the data return float targets shaped "
        "(N, 10) (one-hot)"
    ) in said
    assert "Traceback" not in result.output and "FLOPs" not in result.output
    assert not store.exists()  # refused before any session was opened


def test_the_api_refuses_it_too_and_a_loss_that_fits_passes():
    model, inputs = nn.Linear(8, 10), torch.randn(64, 8)
    with pytest.raises(OwnModelError, match=r"loss='mse' needs float targets .* use loss='cross_entropy'"):
        db.plan(model=model, data=(inputs, torch.randint(0, 10, (64,))), loss="mse", devices="cpu")
    with pytest.raises(OwnModelError, match=r"loss='l1' .* but the targets are \(N, 3\) float32"):
        db.plan(model=model, data=(inputs, torch.randn(64, 3)), loss="l1", devices="cpu")
    with pytest.raises(
        OwnModelError,
        match=r"loss='cross_entropy' cannot take the model's outputs \(N, 10\) "
        r"float32 and the targets \(N,\) float32",
    ):
        db.plan(model=model, data=(inputs, torch.randn(64)), loss="cross_entropy", devices="cpu")
    (job,) = db.plan(model=model, data=(inputs, torch.randn(64, 10)), loss="mse", devices="cpu").jobs
    assert job.workload.output == "values"
    (job,) = db.plan(model=model, data=(inputs, torch.randint(0, 10, (64,))), devices="cpu").jobs
    assert job.workload.output == "logits"  # cross-entropy on class indices: planned
