"""The machine's run-to-run variation: measured in fresh processes, its epochs' own share taken out, stored beside
the ceilings with when and under what load, read back checked, shown by `calibrate`, and recorded with every run
that follows so that its speedup interval includes it.

    python -m pytest tests/test_run_to_run.py -q
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from devicebench import RunConfig, planning, runner
from devicebench.cli import app
from devicebench.cli import calibrate as calibrate_command
from devicebench.data import DataUnavailable
from devicebench.engine import run_to_run
from devicebench.engine.calibration_store import CalibrationError, load_calibration, save_calibration, stored_run_to_run
from devicebench.engine.run_to_run import RunToRunMeasurement, measure_run_to_run
from devicebench.environment import machine_fingerprint
from devicebench.results.stats import between_process_cv

cli = CliRunner()
# each fresh process's timed epochs, samples/s: the processes differ by about 10%, their epochs by about 1%
PROCESSES = [[100.0, 101.0, 99.0], [110.0, 111.0, 109.0], [90.0, 91.0, 89.0], [105.0, 104.0, 106.0], [95.0, 96.0, 94.0]]


def known_processes():
    """A launcher whose every call is the next of PROCESSES, and the devices it was asked for."""
    asked: list[str] = []
    turns = iter(PROCESSES)

    def launch(device: str) -> list[float]:
        asked.append(device)
        return next(turns)

    return launch, asked


@pytest.fixture
def calibration_folder(no_stored_calibration):
    return no_stored_calibration


def test_the_run_to_run_cv_is_taken_between_processes_with_their_epochs_share_left_out(monkeypatch):
    launch, asked = known_processes()
    monkeypatch.setattr(os, "getloadavg", lambda: (1.25, 1.0, 1.0))
    measured = measure_run_to_run(torch.device("cpu"), launch=launch)
    assert asked == ["cpu"] * 5  # one process after another, each asked for the device
    assert measured.process_epoch_rates == tuple(tuple(process) for process in PROCESSES)
    assert measured.cv == pytest.approx(between_process_cv(PROCESSES).cv)
    assert 0.07 < measured.cv < 0.08  # the processes' own spread, 7.9% of the mean, less their epochs' 1%/sqrt 3
    assert measured.load_average == 1.25 and measured.measured_utc.endswith("Z")
    assert RunToRunMeasurement.from_dict(json.loads(json.dumps(measured.to_dict()))) == measured


def test_a_figure_of_0_is_said_to_be_below_what_the_epochs_can_show_not_that_processes_never_differ():
    """The estimate is 0 when the processes' levels differ no more than their epochs' own variation explains: that
    is no measurement of 0.0%, and calibrate and check say what it is."""
    alike = [[100.0, 104.0, 96.0], [101.0, 97.0, 102.0], [99.0, 103.0, 98.0]]  # levels within the epochs' spread
    turns = iter(alike)
    measured = measure_run_to_run(torch.device("cpu"), processes=3, launch=lambda device: next(turns))
    assert measured.cv == 0.0
    said = calibrate_command.run_to_run_text(measured)
    assert "0.0%" not in said
    assert "cpu run-to-run: too small to tell from their epochs' own variation between 3 fresh processes" in said
    assert "(counted as 0%)" in said
    turns = iter(PROCESSES)
    differing = measure_run_to_run(torch.device("cpu"), launch=lambda device: next(turns))
    assert differing.between_text() == f"{differing.cv:.1%} between 5 fresh processes"


def test_calibrate_stores_it_beside_the_ceilings_and_every_later_run_records_it(calibration_folder, monkeypatch):
    launch, _ = known_processes()
    monkeypatch.setattr(
        calibrate_command, "measure_run_to_run", lambda device: measure_run_to_run(device, launch=launch)
    )
    monkeypatch.setattr(
        calibrate_command,
        "default_plan",
        lambda device: calibrate_command.QUICK_PLAN.__class__(
            matmul_size=64,
            memory_copy_bytes=2**20,
            host_to_device_bytes=2**20,
            warmup_s=0.01,
            stretch_s=0.02,
            stretches=1,
            cap_s=0.2,
        ),
    )
    result = cli.invoke(app, ["calibrate", "--devices", "cpu"])
    assert result.exit_code == 0, result.output
    expected = between_process_cv(PROCESSES)
    said = " ".join(result.stdout.split())
    assert f"cpu run-to-run: {expected.cv:.1%} between 5 fresh processes" in said and "90-110 samples/s" in said
    machine = machine_fingerprint()["machine_id"]
    stored = stored_run_to_run(machine, "cpu")
    assert stored is not None and stored.cv == pytest.approx(expected.cv) and stored.run_to_run == expected
    assert load_calibration(machine)["devices"]["cpu"]["matmul"]  # beside the ceilings

    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=3, max_steps=2)
    record = runner.new_record(
        planning.plan(config).jobs[0], DataUnavailable("none", Path("."), [], "no data is needed to start a record"), 0
    )
    assert (record.run_to_run_cv, record.run_to_run_freedom) == (pytest.approx(expected.cv), expected.freedom)
    assert record.process_id == runner.PROCESS_ID


def test_a_later_calibration_keeps_other_devices_and_a_hand_edited_entry_is_refused(calibration_folder):
    launch, _ = known_processes()
    measured = measure_run_to_run(torch.device("cpu"), processes=2, launch=launch)
    path = save_calibration("m1", "vm", [], run_to_run=[measured])
    save_calibration("m1", "vm", [])  # a calibration of other devices keeps the CPU's figure
    assert load_calibration("m1")["run_to_run"]["cpu"]["process_epoch_rates"] == [PROCESSES[0], PROCESSES[1]]
    document = json.loads(path.read_text())
    document["run_to_run"]["cpu"]["process_epoch_rates"] = [[100.0, 101.0]]  # one process: no CV at all
    path.write_text(json.dumps(document))
    with pytest.raises(CalibrationError, match="run-to-run entry for 'cpu'"):
        load_calibration("m1")
    assert stored_run_to_run("m1", "cpu") is None  # a run goes on without it


def test_a_file_from_before_run_to_run_was_measured_has_none(calibration_folder):
    path = save_calibration("m2", "vm", [])
    document = json.loads(path.read_text())
    del document["run_to_run"]
    path.write_text(json.dumps(document))
    assert stored_run_to_run("m2", "cpu") is None


@pytest.mark.slow
def test_each_process_is_a_fresh_interpreter_that_trains_and_reports_its_epochs():
    measured = measure_run_to_run(torch.device("cpu"), processes=2)
    assert len(measured.process_epoch_rates) == 2
    assert all(len(process) == run_to_run.CALIBRATION_EPOCHS for process in measured.process_epoch_rates)
    assert all(rate > 0 for process in measured.process_epoch_rates for rate in process)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")
def test_on_a_gpu_each_fresh_process_trains_on_the_gpu():
    measured = measure_run_to_run(torch.device("cuda", 0), processes=2)
    assert measured.device == "cuda:0" and len(measured.process_epoch_rates) == 2
    assert all(rate > 0 for process in measured.process_epoch_rates for rate in process)


def test_an_entry_filed_under_another_device_is_refused(calibration_folder):
    """A hand-moved entry (cpu's figures filed under cuda:0) would lend one device's ceilings or run-to-run term to
    another: the file is refused, naming both."""
    launch, _ = known_processes()
    measured = measure_run_to_run(torch.device("cpu"), processes=2, launch=launch)
    path = save_calibration("m1", "vm", [], run_to_run=[measured])
    document = json.loads(path.read_text())
    document["run_to_run"] = {"cuda:0": document["run_to_run"]["cpu"]}
    path.write_text(json.dumps(document))
    with pytest.raises(CalibrationError, match="run-to-run entry for 'cuda:0' holds that of 'cpu'"):
        load_calibration("m1")
