"""Seed mode is strict fp32 on every GPU, tuned mode records each TF32 switch it turned on, and MFU divides by the
calibrated peak of the precision that really ran.

    python -m pytest tests/test_precision.py -q
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import pytest
import torch
from torch import nn

from devicebench import RunConfig, planning, runner
from devicebench.data import load_dataset
from devicebench.engine.tuning import Tuning, base_tuning
from devicebench.engine.tuning_applied import process_settings
from devicebench.results.plausibility import peak_precision
from devicebench.results.schema import RunSettings
from devicebench.runner import new_record, train_record

CPU, GPU = torch.device("cpu"), torch.device("cuda", 0)  # a cuda device object needs no GPU until it is used
TINY = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=1, max_steps=2, max_eval_steps=1)


def tf32_switches() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


@pytest.fixture
def process_allows_tf32() -> Iterator[None]:
    """The process has both TF32 switches on, as `torch.set_float32_matmul_precision("high")` and cuDNN's own default
    leave them; put back as they were after the test."""
    before = tf32_switches()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_seed_mode_turns_both_tf32_switches_off_and_puts_them_back_after(process_allows_tf32):
    with process_settings(Tuning()):
        assert tf32_switches() == (False, False)
    assert tf32_switches() == (True, True)


def test_tuned_settings_turn_on_exactly_the_switches_they_name(process_allows_tf32):
    with process_settings(Tuning(tf32_matmul=True, tf32_cudnn=False)):
        assert tf32_switches() == (True, False)
    assert tf32_switches() == (True, True)


def test_a_seed_run_trains_with_tf32_off_and_records_it_off(process_allows_tf32, monkeypatch):
    seen = []
    real_train = runner.train

    def train_and_look(*arguments, **keywords):
        seen.append(tf32_switches())
        return real_train(*arguments, **keywords)

    monkeypatch.setattr(runner, "train", train_and_look)
    dataset = load_dataset("mnist", "synthetic", seed=0)
    (job,) = planning.plan(TINY).jobs
    record = new_record(job, dataset, 0)
    train_record(record, job, dataset)
    assert record.status == "ok", record.error
    assert seen == [(False, False)]
    assert (record.settings.tf32_matmul, record.settings.tf32_cudnn) == (False, False)
    assert tf32_switches() == (True, True)  # the process is left as it was


def test_tuned_mode_turns_on_tf32_for_matmuls_and_cudnn_on_a_gpu_and_neither_on_a_cpu():
    conv_net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.LazyLinear(10))
    on_gpu = base_tuning(GPU, conv_net, resident_possible=True)
    on_cpu = base_tuning(CPU, conv_net, resident_possible=True)
    assert (on_gpu.tf32_matmul, on_gpu.tf32_cudnn) == (True, True)
    assert (on_cpu.tf32_matmul, on_cpu.tf32_cudnn) == (False, False)
    # every Tuning field lands in the record's settings under the same name (runner._note_tuning)
    assert {field.name for field in dataclasses.fields(Tuning)} <= {
        field.name for field in dataclasses.fields(RunSettings)
    }


SETTINGS = RunSettings(
    batch_size=64, epochs=1, max_steps=None, max_eval_steps=None, seed=0, threads=1, data_source="synthetic"
)


@pytest.mark.parametrize(
    ("device", "changes", "peak"),
    [
        ("cpu", {}, "fp32"),
        ("cpu", {"precision": "bf16"}, "bf16"),
        ("cuda:0", {}, "fp32"),  # seed mode: strict fp32, so the fp32 peak, not TF32's eight times higher one
        ("cuda:0", {"tf32_matmul": True, "tf32_cudnn": True}, "tf32"),
        ("cuda:1", {"precision": "bf16", "tf32_matmul": True, "tf32_cudnn": True}, "bf16"),
        ("cuda:0", {"tf32_matmul": True}, None),  # matmuls on TF32, convolutions in fp32: no one peak fits
        ("cuda:0", {"tf32_cudnn": True}, None),
    ],
)
def test_mfu_divides_by_the_peak_of_the_precision_that_really_ran(device, changes, peak):
    assert peak_precision(device, dataclasses.replace(SETTINGS, **changes)) == peak


def test_the_run_asks_the_calibration_for_that_precision_and_nothing_when_none_fits(monkeypatch, make_run):
    asked = []
    monkeypatch.setattr(runner, "peak_tflops", lambda machine, device, precision: asked.append(precision) or 7.5)
    record = make_run(device="cuda:0")
    record.settings = dataclasses.replace(record.settings, tf32_matmul=True, tf32_cudnn=True)
    assert runner._calibrated_peak_tflops(record) == 7.5 and asked == ["tf32"]
    record.settings = dataclasses.replace(record.settings, tf32_cudnn=False)
    assert runner._calibrated_peak_tflops(record) is None and asked == ["tf32"]
