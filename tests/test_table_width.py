"""Tables that fit: at 80 columns, at 250, and in a file, every number of `run`, `compare`, `sweep` and `history`
is printed whole, no line is wider than the console, nothing is cut with "…", the legend comes once, and the run
header says the batch and the steps that really ran.

    python -m pytest tests/test_table_width.py -q
"""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from result_fixtures import machine, run, session
from rich.console import Console
from typer.testing import CliRunner

from devicebench.cli import app, console, errors
from devicebench.report.progress import RichReporter, epoch_line
from devicebench.report.tables import (
    comparison_tables,
    history_table,
    median_text,
    percent_text,
    sweep_tables,
)
from devicebench.results.compare import Row, compare
from devicebench.results.prices import parse_prices
from devicebench.results.schema import Result

cli = CliRunner()
WIDTHS = (80, 120, 250)
LEGEND_START = "Samples/s: median over the steady epochs"
HIDDEN_COLUMNS = ("Epoch s", "ms/step", "TFLOP/s", "Busy", "Warm-up s", "End-to-end s", "Energy Wh")


@pytest.fixture
def results() -> list[Result]:
    """Two machines with long names, two workloads; targets, waiting shares, FLOPs, energy, a failed run."""
    laptop = machine("a-laptop-with-a-rather-long-name", "aaa111")
    server = machine("server", "bbb222")
    gpu = run("cuda:0", [3.0, 1.0, 1.1], data_source="real", energy_j=900.0)
    cpu = run("cpu", [20.0, 10.0, 10.5], data_source="real")
    for record, reached in ((cpu, None), (gpu, 2.1)):
        record.target_accuracy, record.time_to_target_train_s = 0.65, reached
        record.flops_per_sample, record.input_verdict = 2e6, "compute-bound"
        for epoch in record.epochs:
            epoch.input_wait_s = epoch.train_time_s * 0.03
    failed = run("cuda:0", [9.5], workload="cifar10-mlp", repeat=1, status="failed")
    failed.error = "CUDA error: out of memory while allocating a tensor of 2.00 GiB (a long error that must wrap)"
    return [
        session(laptop, [cpu, gpu, run("cpu", [24.0, 12.0, 12.5], data_source="real", batch_size=64)]),
        session(server, [run("cpu", [80.0, 40.0, 44.0], workload="cifar10-mlp", energy_j=7200.0),
                         run("cuda:0", [9.0, 4.0, 4.4], workload="cifar10-mlp", energy_j=1800.0), failed]),
    ]


def render(parts: list, width: int, *, terminal: bool = True) -> str:
    screen = Console(width=width, file=io.StringIO(), record=True, force_terminal=terminal, color_system=None)
    for part in parts:
        screen.print(part)
    return screen.export_text()


def tokens(text: str) -> set[str]:
    """The words of `text`: what lies between spaces, box lines and brackets."""
    return set(re.split(r"[\s│┃|\[\]()]+", text))


def assert_fits(text: str, width: int) -> None:
    assert "…" not in text and "..." not in text
    assert max(len(line) for line in text.splitlines()) <= width, text


def compact_numbers(row: Row) -> list[str]:
    numbers = [median_text(row.samples_per_s, 0), percent_text(row.test_accuracy.median)]
    if row.speedup is not None and row.baseline is not row:
        numbers += [f"{row.speedup.ratio:.2f}x", f"{row.speedup.low:.2f}–{row.speedup.high:.2f}"]
    if row.input_wait_share is not None:
        numbers.append(f"{row.input_wait_share.median:.0%}")
    if row.time_to_target_s is not None:
        numbers.append(f"{row.time_to_target_s.median:,.1f}")
    return numbers


def wide_numbers(row: Row) -> list[str]:
    epoch = row.epoch_time_s
    numbers = [f"{epoch.median:,.2f}", f"{epoch.low:,.2f}–{epoch.high:,.2f}", median_text(row.step_time_ms, 2),
               median_text(row.warmup_epoch_s, 2), median_text(row.end_to_end_s, 1)]
    if row.energy_wh is not None:
        numbers.append(median_text(row.energy_wh, 2))
    if row.cost_per_million_samples is not None:
        numbers.append(f"{row.cost_per_million_samples:,.3f}")
    return numbers


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("terminal", [True, False])
def test_every_number_of_the_compare_tables_is_whole_at_any_width(results, width, terminal):
    rows_by_workload = compare(results, prices=parse_prices("cpu=0.10,cuda=2.50"))
    rows = [row for rows in rows_by_workload.values() for row in rows if row.samples_per_s is not None]
    compact = render(comparison_tables(rows_by_workload), width, terminal=terminal)
    assert_fits(compact, width)
    assert {number for row in rows for number in compact_numbers(row)} <= tokens(compact)
    assert compact.count(LEGEND_START) == 1  # once for the two workloads, after the last table
    assert compact.index(LEGEND_START) > compact.rindex("cifar10-mlp: batch 50")
    assert compact.count("a-laptop-with-a-rather-long-name/cpu: cpu model") == 1  # the device lines, once too
    assert {"not", "reached"} <= tokens(compact)  # the laptop set a target; its CPU missed it (a cell may wrap)
    assert "to target s: median" in " ".join(compact.split())
    assert "compute-bound" in compact
    assert not [column for column in HIDDEN_COLUMNS if column in compact]
    assert "Cost/1M" in compact  # --price asks for the cost: shown without --wide
    assert "epoch s:" not in compact  # the legend speaks of the columns shown only

    wide = render(comparison_tables(rows_by_workload, wide=True), width, terminal=terminal)
    assert_fits(wide, width)
    assert {number for row in rows for number in compact_numbers(row) + wide_numbers(row)} <= tokens(wide)
    assert all(column in " ".join(wide.split()) for column in HIDDEN_COLUMNS)
    assert wide.count(LEGEND_START) == 1 and "epoch s: steady median" in " ".join(wide.split())


def test_the_target_column_comes_only_with_a_target(results):
    for result in results:
        for record in result.runs:
            record.target_accuracy = record.time_to_target_train_s = None
    text = render(comparison_tables(compare(results)), 80)
    assert "To target s" not in text and "to target s" not in text


def test_a_flagged_tflops_figure_is_shown_without_wide(results):
    record = results[0].runs[0]
    record.peak_tflops = 1e-6  # a calibrated peak far below what it reached: above-peak
    text = render(comparison_tables(compare(results)), 80)
    assert "TFLOP/s" in text and "implausible" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_sweep_tables_fit_and_say_the_steps_each_point_ran(width):
    points = []
    for batch_size, steps in ((32, 30), (128, 7)):  # a larger batch: fewer steps in the same epoch
        for device, seconds in (("cpu", 4.0), ("cuda:0", 0.5)):
            record = run(device, [seconds * 2, seconds, seconds * 1.1], batch_size=batch_size)
            for epoch in record.epochs:
                epoch.steps = steps
            points.append(record)
    rows_by_workload = compare([session(machine("laptop", "aaa111"), points)])
    text = render(sweep_tables(rows_by_workload, ["batch_size"]), width)
    assert_fits(text, width)
    flat = " ".join(text.split())
    assert "3 epochs of 7–30 steps" in flat and "60 steps" not in flat  # never a cap that did not run
    rows = rows_by_workload["mnist-cnn2"]
    assert {number for row in rows for number in compact_numbers(row)} <= tokens(text)
    assert text.count(LEGEND_START) == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_history_fits_with_every_number(results, width):
    text = render([history_table(results, Path("/tmp/results.sqlite"))], width)
    assert_fits(text, width)
    summaries = [(record, record.summary()) for result in results for record in result.runs]
    expected = {record.run_id[:8] for record, _ in summaries}
    expected |= {f"{summary.steady_samples_per_s:,.0f}" for _, summary in summaries if summary.steady_samples_per_s}
    expected |= {f"{summary.final_test_accuracy:.1%}" for _, summary in summaries if summary.final_test_accuracy}
    assert expected <= tokens(text)
    wide = render([history_table(results, Path("/tmp/results.sqlite"), wide=True)], width)
    assert_fits(wide, width)
    assert {f"{summary.steady_epoch_time_s:,.2f}" for _, summary in summaries if summary.steady_epoch_time_s} \
        <= tokens(wide) and "Epoch s" in wide


def test_the_run_header_says_the_batch_and_steps_that_ran_and_wraps():
    record = run("cpu", [1.0, 1.0], batch_size=32)
    record.settings.max_steps, record.settings.workers = 60, 0
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=80, force_terminal=True, color_system=None))
    reporter.run_started(record)
    record.settings = dataclasses.replace(record.settings, batch_size=512, batch_size_auto=True)  # what auto chose
    reporter.epoch_started(1, 7)
    reporter.close()
    text = screen.getvalue()
    assert_fits(text, 80)
    flat = " ".join(text.split())
    assert "mnist-cnn2 on cpu (cpu model), repeat 1, batch 512 (auto), 2 epochs of 7 steps, synthetic data, 2 threads" \
        in flat
    assert "batch 32" not in flat and "60" not in flat and "loader workers" not in flat


def test_the_run_header_of_boosted_trees_counts_rounds():
    record = run("cpu", [1.0, 1.0], workload="covertype-gbdt", batch_size=0)
    record.settings.workers = 2
    screen = io.StringIO()
    reporter = RichReporter(Console(file=screen, width=200, color_system=None))
    reporter.run_started(record)
    reporter.epoch_started(1, 25)
    flat = " ".join(screen.getvalue().split())
    assert "every row each round, 2 epochs of 25 rounds" in flat and "2 loader workers" in flat and "steps" not in flat


def test_the_synthetic_data_notice_wraps_whole_at_80_columns():
    reason = ("covertype is 75 MB and the quick suite downloads nothing that large: run `devicebench data fetch "
              "covertype`, or put covtype.data.gz in /home/someone/.local/share/devicebench/data/covertype")
    dataset = SimpleNamespace(source="synthetic", name="covertype", origin="covertype", fallback_reason=reason)
    screen = io.StringIO()
    RichReporter(Console(file=screen, width=80, color_system=None)).dataset_loaded(
        SimpleNamespace(name="covertype-gbdt"), dataset)
    text = screen.getvalue()
    assert_fits(text, 80)
    assert reason in " ".join(text.split()) and "SYNTHETIC data" in text


def test_an_epoch_line_says_when_evaluation_took_longer_than_training():
    record = run("cpu", [1.0, 1.0])
    slow = dataclasses.replace(record.epochs[1], eval_time_s=3.1)
    assert "eval 3.1s (eval > training: --max-eval-steps caps it)" in epoch_line(record, slow)
    assert "eval >" not in epoch_line(record, record.epochs[1])  # 0.1 s of evaluation after 1 s of training


def test_run_and_compare_at_80_columns_print_every_number_whole(tmp_path, monkeypatch):
    """The real CLI, as `COLUMNS=80 devicebench run ...` prints it, then `compare` of what it stored."""
    for screen in (console, errors):
        monkeypatch.setattr(screen, "width", 80)
    database, output = tmp_path / "results.sqlite", tmp_path / "run.json"
    ran = cli.invoke(app, ["run", "cifar100-mlp", "--epochs", "2", "--max-steps", "5", "--max-eval-steps", "1",
                           "--data", "synthetic", "--devices", "cpu", "--target-accuracy", "0.001", "--db",
                           str(database), "--json", str(output)])
    assert ran.exit_code == 0, ran.output
    assert_fits(ran.stdout, 80)
    (record,) = json.loads(output.read_text())["runs"]
    steady = record["summary"]
    flat = " ".join(ran.output.split())
    settings = record["settings"]
    assert (f"cifar100-mlp on cpu ({record['device_name']}), repeat 1, batch {settings['batch_size']}, 2 epochs of 5 "
            f"steps, synthetic data, {settings['threads']} threads") in flat
    expected = {f"{steady['steady_samples_per_s']:,.0f}", f"{record['time_to_target_train_s']:,.1f}",
                "1.00x", "baseline"}
    assert expected <= tokens(ran.stdout)
    assert "to target s: median" in " ".join(ran.stdout.split()) and ran.stdout.count(LEGEND_START) == 1
    compared = cli.invoke(app, ["compare", "--db", str(database)])
    assert compared.exit_code == 0, compared.output
    assert_fits(compared.stdout, 80)
    assert expected <= tokens(compared.stdout)
    wide = cli.invoke(app, ["compare", "--db", str(database), "--wide"])
    assert {f"{steady['steady_epoch_time_s']:,.2f}", "Warm-up", "End-to-end"} <= tokens(wide.stdout)
    assert_fits(wide.stdout, 80)
