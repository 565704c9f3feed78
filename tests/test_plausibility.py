"""Numbers that break physics are flagged in `run`, `compare`, the JSON and the HTML report; runs of different
lengths or cut short are never pooled into a row or a scaling efficiency without saying so."""

from __future__ import annotations

import json

import pytest
from result_fixtures import machine, run, session
from typer.testing import CliRunner

from devicebench import runner
from devicebench.cli import app
from devicebench.report.html import write_report
from devicebench.report.tables import comparison_text
from devicebench.report.text import row_notes, tflops_text
from devicebench.results.compare import compare
from devicebench.results.plausibility import flag_run, run_flags
from devicebench.results.schema import Result, RunRecord
from devicebench.results.store import Store
from devicebench.results.transfer import read_results_file

H100 = "NVIDIA H100 80GB HBM3"  # datasheet: 67 TFLOP/s fp32, 3,350 GB/s
LAPTOP = machine("laptop", "aaaa1111")
cli = CliRunner()


def gpu_run(
    epoch_times=(2.0, 1.0, 1.0),
    *,
    name: str = H100,
    busy: float | None = None,
    waited: float = 0.0,
    flops_per_sample: float | None = None,
    **options,
) -> RunRecord:
    """A cuda:0 run of 1,000 samples an epoch at batch 50; `busy`: the GPU's utilisation in every epoch, `waited`:
    the share of each epoch spent waiting for batches."""
    record = run("cuda:0", list(epoch_times), **options)
    record.device_name, record.flops_per_sample = name, flops_per_sample
    for epoch in record.epochs:
        epoch.device_utilization_percent = busy
        epoch.input_wait_s = waited * epoch.train_time_s
    return record


def codes(record: RunRecord) -> list[str]:
    return [flag.code for flag in run_flags(record)]


# --- above the peak ----------------------------------------------------------------------------------------


def test_tflops_above_the_calibrated_peak_are_flagged_and_below_it_are_not():
    record = gpu_run(flops_per_sample=1e11)  # 1,000 samples/s x 100 GFLOP = 100 TFLOP/s
    record.peak_tflops = 120.0  # (the H100's datasheet says 67: a calibration may not claim more than twice that)
    assert run_flags(record) == []
    record.peak_tflops = 50.0
    (flag,) = run_flags(record)
    assert flag.code == "above-peak"
    assert flag.text.startswith("100 TFLOP/s per device is 200% of the calibrated fp32 peak (50 TFLOP/s)")


def test_without_a_calibration_the_datasheet_s_peak_of_the_precision_that_ran_is_the_limit():
    record = gpu_run(flops_per_sample=1e11)  # 100 TFLOP/s: above the H100's 67 fp32, below its 494.7 tf32
    assert codes(record) == ["above-peak"] and "149% of the H100 SXM datasheet's fp32 peak" in run_flags(record)[0].text
    record.settings.tf32_matmul = record.settings.tf32_cudnn = True
    assert codes(record) == []
    record.device_name = "cuda:0 model"  # no datasheet, no calibration: nothing to hold it against
    record.settings.tf32_matmul = record.settings.tf32_cudnn = False
    assert codes(record) == []


def test_several_processes_are_held_against_a_peak_each():
    record = gpu_run(flops_per_sample=1e11)  # 100 TFLOP/s over four GPUs: 25 each, below 67
    record.settings.world_size = 4
    assert codes(record) == []


def test_a_cpu_run_at_192_percent_mfu_is_flagged_in_the_run_s_table_and_json(tmp_path, monkeypatch):
    """What a new user saw after `calibrate --quick`: MFU far above 100%. Here the stored peak is understated on
    purpose: 1 MFLOP/s, which any CPU passes."""
    monkeypatch.setattr(runner, "peak_tflops", lambda machine_id, device, precision: 1e-6)
    out = tmp_path / "run.json"
    result = cli.invoke(
        app,
        [
            "run",
            "mnist-cnn2",
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
            "--json",
            str(out),
            "--db",
            str(tmp_path / "results.sqlite"),
        ],
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert "cpu (flagged:" in text and "implausible" in text  # the row, its cell folded to fit
    assert "FLAGGED above-peak: " in text and "% of the calibrated fp32 peak (1e-06 TFLOP/s)" in text
    (stored,) = json.loads(out.read_text())["runs"]
    assert stored["plausibility_flags"] == "above-peak"
    assert "of the calibrated fp32 peak (1e-06 TFLOP/s), which no device exceeds" in stored["plausibility_note"]
    with Store(tmp_path / "results.sqlite") as store:
        (session_read,) = store.results()
    assert session_read.runs[0].plausibility_flags == "above-peak"  # the database keeps the flag too


# --- above the bandwidth -----------------------------------------------------------------------------------


def test_weights_too_large_for_any_cache_bound_the_traffic_from_below():
    slow = gpu_run()
    slow.parameter_count = 1_000_000_000  # 4 GB of fp32 weights: 20 steps/s move at least 160 GB/s
    assert codes(slow) == []
    fast = gpu_run([0.0001] * 3)  # 10 million samples/s at batch 50: 200,000 steps/s
    fast.parameter_count = 1_000_000_000
    (flag,) = run_flags(fast)
    assert flag.code == "above-bandwidth" and "at least 1,600,000 GB/s" in flag.text and "3,350 GB/s" in flag.text
    fast.parameter_count = 10_000_000  # 40 MB, 16,000 GB/s if read from memory; but it may stay in the cache
    assert codes(fast) == []


# --- an idle device ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "busy, waited, flops_per_sample, name, cause",
    [
        (1.0, 0.7, 1e6, H100, "input-bound: the loop waited for batches 70% of training"),
        (1.0, 0.0, 1e6, H100, "launch-bound: a step's 0.05 GFLOP take it 1 us at its peak"),
        (1.0, 0.0, 2e10, H100, "the work ran elsewhere: a step's 1,000 GFLOP take it 14,925 us at its peak"),
        (1.0, 0.0, 2e10, "cuda:0 model", "the work ran elsewhere, or each step is too small"),
    ],
)
def test_a_gpu_at_1_percent_says_why_from_its_numbers(busy, waited, flops_per_sample, name, cause):
    record = gpu_run(busy=busy, waited=waited, flops_per_sample=flops_per_sample, name=name)
    (flag,) = [flag for flag in run_flags(record) if flag.code == "device-idle"]
    assert flag.text.startswith("cuda:0 was 1.0% busy while training: ") and cause in flag.text


def test_a_busy_gpu_and_the_cpu_are_never_idle():
    assert codes(gpu_run(busy=6.0, flops_per_sample=2e10)) == []
    cpu = run("cpu", [2.0, 1.0, 1.0])
    for epoch in cpu.epochs:
        epoch.device_utilization_percent = 0.0
    assert codes(cpu) == []


def test_a_gpu_row_at_1_percent_is_flagged_in_compare_the_json_and_the_html_report(tmp_path):
    idle = gpu_run(busy=1.0, flops_per_sample=2e10)
    flag_run(idle)
    result = session(LAPTOP, [run("cpu", [2.0, 1.0, 1.0]), idle])
    assert idle.plausibility_flags == "device-idle" and "the work ran elsewhere" in idle.plausibility_note
    path = tmp_path / "result.json"
    result.write_json(path)
    assert json.loads(path.read_text())["runs"][1]["plausibility_flags"] == "device-idle"

    table = " ".join(comparison_text([result]).split())  # what `run` and `compare` print
    assert "cuda:0 (flagged: device-idle)" in table or "cuda:0 (flagged:" in table
    assert "laptop/cuda:0: FLAGGED device-idle: cuda:0 was 1.0% busy while training" in table
    database = tmp_path / "results.sqlite"
    with Store(database) as store:
        store.import_results([result])
    compared = cli.invoke(app, ["compare", "--db", str(database)])
    assert compared.exit_code == 0 and "FLAGGED device-idle" in " ".join(compared.stdout.split())

    html = write_report([result], tmp_path / "report.html").read_text()
    assert "flagged: device-idle (see the notes)" in html and "FLAGGED device-idle: cuda:0 was 1.0% busy" in html


def test_results_stored_before_the_flags_existed_are_read_and_flagged_when_compared(tmp_path):
    document = session(LAPTOP, [gpu_run(busy=1.0, flops_per_sample=2e10)]).to_dict()
    document["schema_version"] = 1
    for stored in document["runs"]:
        del stored["plausibility_flags"], stored["plausibility_note"]
    path = tmp_path / "old.json"
    path.write_text(json.dumps(document))
    (old,) = read_results_file(path)
    assert old.runs[0].plausibility_flags is None
    (row,) = compare([old])["mnist-cnn2"]
    assert [flag.code for flag in row.flags] == ["device-idle"]


def test_an_implausible_mfu_is_marked_in_its_cell():
    record = gpu_run(flops_per_sample=1e11)
    record.peak_tflops = 50.0
    (row,) = compare([session(LAPTOP, [record])])["mnist-cnn2"]
    assert tflops_text(row) == "100 (200% MFU) implausible"
    record.peak_tflops = 120.0
    (row,) = compare([session(LAPTOP, [record])])["mnist-cnn2"]
    assert tflops_text(row) == "100 (83% MFU)"


# --- a GPU slower than the CPU -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "busy, waited, flops_per_sample, cause",
    [
        (90.0, 0.6, None, "input-bound: it waited for batches 60% of training"),
        (90.0, 0.0, 1e6, "launch-bound: a step's 0.05 GFLOP take it 1 us at its peak"),
        (30.0, 0.0, None, "too small a batch: batch 50 kept it 30% busy"),
        (90.0, 0.0, None, "no cause shows in its numbers: `devicebench check`"),
    ],
)
def test_a_gpu_slower_than_the_cpu_on_the_same_work_is_explained(busy, waited, flops_per_sample, cause):
    slow = gpu_run([4.0, 2.0, 2.0], busy=busy, waited=waited, flops_per_sample=flops_per_sample)
    cpu, gpu = compare([session(LAPTOP, [run("cpu", [2.0, 1.0, 1.0]), slow])])["mnist-cnn2"]
    assert gpu.speedup.ratio == pytest.approx(0.5)
    (flag,) = [flag for flag in gpu.flags if flag.code == "slower-than-baseline"]
    assert flag.text.startswith("cuda:0 trained at 0.50x the speed of laptop/cpu: ") and cause in flag.text
    assert cpu.flags == []


def test_a_gpu_faster_than_the_cpu_is_not_flagged():
    cpu, gpu = compare([session(LAPTOP, [run("cpu", [2.0, 1.0, 1.0]), gpu_run(busy=90.0)])])["mnist-cnn2"]
    assert gpu.speedup.ratio == pytest.approx(1.0) and gpu.flags == []


# --- what is pooled ----------------------------------------------------------------------------------------


def capped(record: RunRecord, max_steps: int, world_size: int = 1) -> RunRecord:
    record.settings.max_steps, record.settings.world_size = max_steps, world_size
    return record


def test_runs_of_different_lengths_are_never_pooled_into_one_row():
    runs = [
        capped(run("cpu", [2.0, 1.0, 1.0]), 20),
        capped(run("cpu", [2.0, 0.9, 0.9]), 30),
        capped(run("cpu", [2.0, 0.8, 0.8]), 60),
    ]
    rows = compare([session(LAPTOP, runs)])["mnist-cnn2"]
    assert [(len(row.runs), row.differs_by) for row in rows] == [(1, "20 steps"), (1, "30 steps"), (1, "60 steps")]


def test_scaling_efficiency_is_taken_against_one_process_of_the_same_length():
    one_short, one_long = capped(run("cpu", [2.0, 1.0, 1.0]), 20), capped(run("cpu", [2.0, 0.8, 0.8]), 60)
    two = capped(run("cpu", [1.0, 0.5, 0.5]), 60, world_size=2)
    rows = compare([session(LAPTOP, [one_short, one_long, two])])["mnist-cnn2"]
    data_parallel = rows[2]
    assert data_parallel.baseline is rows[1]  # the 60-step one-process row, not the first one
    assert data_parallel.scaling_efficiency == pytest.approx((1000 / 0.5) / (1000 / 0.8) / 2)  # 80%
    assert data_parallel.scaling_note == ""


def test_no_scaling_efficiency_across_lengths_or_from_an_interrupted_run_and_the_notes_say_why():
    """The new user's 143%: two processes set against one-process runs of other lengths. An interrupted one-process
    run is no baseline at all now (its row stands apart: tests/test_interrupted_apart.py), so no efficiency either."""
    interrupted = capped(run("cpu", [2.0, 1.4, 1.4], status="interrupted"), 60)
    two = capped(run("cpu", [1.0, 0.5, 0.5]), 60, world_size=2)
    rows = compare([session(LAPTOP, [interrupted, two])])["mnist-cnn2"]
    data_parallel = next(row for row in rows if row.settings["world_size"] == 2)
    assert data_parallel.baseline is not next(row for row in rows if row is not data_parallel)
    assert data_parallel.scaling_efficiency is None
    one = capped(run("cpu", [2.0, 1.4, 1.4]), 20)
    single, data_parallel = compare([session(LAPTOP, [one, two])])["mnist-cnn2"]
    assert data_parallel.baseline is single and data_parallel.speedup.ratio == pytest.approx(2.8)
    assert data_parallel.scaling_efficiency is None
    assert data_parallel.scaling_note == "its epochs were capped at 60 steps, the one-process row's at 20"
    notes = row_notes([single, data_parallel])
    assert any(
        "no scaling efficiency against one process: its epochs were capped at 60 steps" in note for note in notes
    )
    assert any(
        "speedup against laptop/cpu (1 process, 20 steps), whose epochs were capped at 20 steps (this row's at 60)"
        in note
        for note in notes
    )
    assert not [note for note in notes if "scaling efficiency 1" in note or "143%" in note]


def test_a_fair_scaling_efficiency_above_100_percent_says_to_check_it():
    one, two = capped(run("cpu", [2.0, 1.0, 1.0]), 60), capped(run("cpu", [1.0, 0.35, 0.35]), 60, world_size=2)
    rows = compare([session(LAPTOP, [one, two])])["mnist-cnn2"]
    assert rows[1].scaling_efficiency == pytest.approx(1 / 0.35 / 2)
    assert any("scaling efficiency 143%" in note and "above 100%, so check" in note for note in row_notes(rows))


def test_a_flagged_result_survives_a_round_trip_through_json(tmp_path):
    idle = gpu_run(busy=1.0, flops_per_sample=2e10)
    flag_run(idle)
    path = tmp_path / "result.json"
    session(LAPTOP, [idle]).write_json(path)
    (read,) = Result.read_json(path).runs
    assert (read.plausibility_flags, read.plausibility_note) == (idle.plausibility_flags, idle.plausibility_note)
