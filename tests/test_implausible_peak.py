"""A calibrated matmul peak no device reaches (hand-edited or imported: 1e30 TFLOP/s, or three times a GPU's
datasheet) is never the divisor of an MFU that would read "0%": a calibration file holding one is not read (the run
goes on without it, a warning says why), and a stored run carrying one is flagged `implausible-peak`, its MFU left
out and its datasheet's peak used for the other checks.

    python -m pytest tests/test_implausible_peak.py -q
"""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
import result_fixtures
from test_calibrate import MACHINE, ceilings
from typer.testing import CliRunner

from devicebench.cli import app
from devicebench.engine import calibration_store
from devicebench.engine.calibration_store import CalibrationError, load_calibration, peak_tflops, save_calibration
from devicebench.report.text import tflops_text
from devicebench.results.compare import compare
from devicebench.results.plausibility import (
    LARGEST_DEVICE_TFLOPS,
    MOST_OVER_DATASHEET,
    peak_doubt,
    run_flags,
)
from devicebench.results.transfer import export_document

H100_NAME = "NVIDIA H100 80GB HBM3"  # the H100 SXM: fp32 67 TFLOP/s on its datasheet


def test_the_bounds_the_tests_below_assume():
    assert (LARGEST_DEVICE_TFLOPS, MOST_OVER_DATASHEET) == (10_000.0, 2.0)


@pytest.mark.parametrize(
    ("device_name", "tflops", "doubt"),
    [
        ("cpu model", 1e30, "1e+30 TFLOP/s is more than any device computes (under 10,000 TFLOP/s)"),
        ("cpu model", 10_001.0, "1e+04 TFLOP/s is more than any device computes"),
        (H100_NAME, 200.0, "200 TFLOP/s is 2.99x the H100 SXM datasheet's fp32 peak (67 TFLOP/s)"),
        (H100_NAME, 1e30, "1e+30 TFLOP/s is 1.49e+28x the H100 SXM datasheet's fp32 peak"),
        ("cpu model", float("inf"), "inf TFLOP/s is not a rate"),
        ("cpu model", 0.5, None),
        ("cpu model", 9_999.0, None),  # an unknown device: only the absolute bound
        (H100_NAME, 134.0, None),  # twice its datasheet is still believed
    ],
)
def test_a_peak_is_doubted_above_any_device_or_twice_its_datasheet(device_name, tflops, doubt):
    found = peak_doubt(device_name, "fp32", tflops)
    assert (found is None) if doubt is None else (found is not None and found.startswith(doubt)), found


@pytest.mark.parametrize(
    ("device", "device_name", "fp32", "said"),
    [
        (
            "cpu",
            "cpu model",
            1e30,
            "its fp32 matmul peak of cpu cannot have been measured: 1e+30 TFLOP/s is more than any device computes",
        ),
        (
            "cuda:0",
            H100_NAME,
            200.0,
            "its fp32 matmul peak of cuda:0 cannot have been measured: 200 TFLOP/s is 2.99x "
            "the H100 SXM datasheet's fp32 peak (67 TFLOP/s)",
        ),
    ],
)
def test_a_calibration_file_with_an_impossible_peak_is_not_read(device, device_name, fp32, said, caplog):
    path = save_calibration(MACHINE, "laptop", [ceilings(device, fp32=fp32, device_name=device_name)])
    with pytest.raises(CalibrationError) as raised:
        load_calibration(MACHINE)
    assert str(path) in str(raised.value) and said in str(raised.value)
    assert "Run `devicebench calibrate` again: it will overwrite the file" in str(raised.value)
    with caplog.at_level(logging.WARNING, logger=calibration_store.__name__):
        assert peak_tflops(MACHINE, device, "fp32") is None  # no MFU rather than 0%
    assert said in caplog.text
    save_calibration(MACHINE, "laptop", [ceilings(device, fp32=50.0, device_name=device_name)])  # measured again
    assert peak_tflops(MACHINE, device, "fp32") == 50.0


def cpu_run(peak: float | None):
    """A CPU run of 1,000 samples/s at 5e7 FLOPs a sample: 0.05 TFLOP/s."""
    return dataclasses.replace(result_fixtures.run("cpu", [2.0, 1.0, 1.0]), flops_per_sample=5e7, peak_tflops=peak)


def test_a_stored_run_with_an_impossible_peak_is_flagged_and_has_no_mfu():
    forged, honest = cpu_run(1e30), cpu_run(0.5)
    (flag,) = run_flags(forged)
    assert flag.code == "implausible-peak"
    assert flag.text.startswith(
        "the calibrated fp32 peak stored with the run cannot have been measured: 1e+30 "
        "TFLOP/s is more than any device computes"
    )
    assert run_flags(honest) == []
    (row,) = compare([result_fixtures.session(result_fixtures.machine("box", "m1"), [forged])])["mnist-cnn2"]
    assert row.mfu is None and [flag.code for flag in row.flags] == ["implausible-peak"]
    assert tflops_text(row) == "0.05"  # no "(0% MFU)"
    (row,) = compare([result_fixtures.session(result_fixtures.machine("box", "m1"), [honest])])["mnist-cnn2"]
    assert row.mfu.median == pytest.approx(0.05 / 0.5) and tflops_text(row) == "0.05 (10% MFU)"


def test_an_impossible_peak_does_not_hide_a_gpu_run_above_its_datasheet():
    record = result_fixtures.run("cuda:0", [2.0, 1.0, 1.0])  # 1,000 samples/s
    record = dataclasses.replace(record, device_name=H100_NAME, flops_per_sample=1e11, peak_tflops=1e30)  # 100 TFLOP/s
    assert [flag.code for flag in run_flags(record)] == ["implausible-peak", "above-peak"]
    assert "of the H100 SXM datasheet's fp32 peak (67 TFLOP/s)" in run_flags(record)[1].text


def test_compare_shows_the_flag_not_zero_percent_mfu(tmp_path):
    """1e12 TFLOP/s: within the figures an import takes (schema.LARGEST_WHOLE_NUMBER), more than any device computes."""
    exported = tmp_path / "forged.json"
    exported.write_text(
        json.dumps(export_document([result_fixtures.session(result_fixtures.machine("box", "m1"), [cpu_run(1e12)])]))
    )
    db = tmp_path / "db.sqlite"
    assert CliRunner().invoke(app, ["import", str(exported), "--db", str(db)]).exit_code == 0
    outcome = CliRunner().invoke(app, ["compare", "--wide", "--db", str(db)])
    text = " ".join(outcome.output.split())
    assert outcome.exit_code == 0, text
    assert "MFU)" not in text.split("Samples/s:")[0]  # the table, before the legend
    assert "FLAGGED implausible-peak" in text
