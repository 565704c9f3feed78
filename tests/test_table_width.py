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
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from devicebench.cli import app, console, errors
from devicebench.report.fitting import fitted
from devicebench.report.history import history_table
from devicebench.report.progress import FIELD_GAP, RichReporter, epoch_fields, epoch_line
from devicebench.report.tables import (
    comparison_tables,
    published_text,
    row_label,
    sweep_tables,
    workloads_table,
)
from devicebench.report.text import median_text, percent_text
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
        session(
            server,
            [
                run("cpu", [80.0, 40.0, 44.0], workload="cifar10-mlp", energy_j=7200.0),
                run("cuda:0", [9.0, 4.0, 4.4], workload="cifar10-mlp", energy_j=1800.0),
                failed,
            ],
        ),
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
    numbers = [
        f"{epoch.median:,.2f}",
        f"{epoch.low:,.2f}–{epoch.high:,.2f}",
        median_text(row.step_time_ms, 2),
        median_text(row.warmup_epoch_s, 2),
        median_text(row.end_to_end_s, 1),
    ]
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
    assert all(set(column.split()) <= tokens(wide) for column in HIDDEN_COLUMNS)  # a heading may wrap at its space
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
    assert {f"{summary.steady_epoch_time_s:,.2f}" for _, summary in summaries if summary.steady_epoch_time_s} <= tokens(
        wide
    ) and "Epoch s" in wide


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
    assert (
        "mnist-cnn2 on cpu (cpu model), repeat 1, batch 512 (auto), 2 epochs of 7 steps, synthetic data, 2 threads"
        in flat
    )
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
    reason = (
        "covertype is 75 MB and the quick suite downloads nothing that large: run `devicebench data fetch "
        "covertype`, or put covtype.data.gz in /home/someone/.local/share/devicebench/data/covertype"
    )
    dataset = SimpleNamespace(source="synthetic", name="covertype", origin="covertype", fallback_reason=reason)
    screen = io.StringIO()
    RichReporter(Console(file=screen, width=80, color_system=None)).dataset_loaded(
        SimpleNamespace(name="covertype-gbdt"), dataset
    )
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
    ran = cli.invoke(
        app,
        [
            "run",
            "cifar100-mlp",
            "--epochs",
            "2",
            "--max-steps",
            "5",
            "--max-eval-steps",
            "1",
            "--data",
            "synthetic",
            "--devices",
            "cpu",
            "--target-accuracy",
            "0.001",
            "--db",
            str(database),
            "--json",
            str(output),
        ],
    )
    assert ran.exit_code == 0, ran.output
    assert_fits(ran.stdout, 80)
    (record,) = json.loads(output.read_text())["runs"]
    steady = record["summary"]
    flat = " ".join(ran.output.split())
    settings = record["settings"]
    assert (
        f"cifar100-mlp on cpu ({record['device_name']}), repeat 1, batch {settings['batch_size']}, 2 epochs of 5 "
        f"steps, synthetic data, {settings['threads']} threads"
    ) in flat
    expected = {
        f"{steady['steady_samples_per_s']:,.0f}",
        f"{record['time_to_target_train_s']:,.1f}",
        "1.00x",
        "baseline",
    }
    assert expected <= tokens(ran.stdout)
    assert "to target s: median" in " ".join(ran.stdout.split()) and ran.stdout.count(LEGEND_START) == 1
    compared = cli.invoke(app, ["compare", "--db", str(database)])
    assert compared.exit_code == 0, compared.output
    assert_fits(compared.stdout, 80)
    assert expected <= tokens(compared.stdout)
    wide = cli.invoke(app, ["compare", "--db", str(database), "--wide"])
    assert {f"{steady['steady_epoch_time_s']:,.2f}", "Warm-up", "End-to-end"} <= tokens(wide.stdout)
    assert_fits(wide.stdout, 80)


# --- every table, every identifier whole (issue 29, item 5) ---------------------------------------------------------

NARROW = 80


def assert_whole(text: str, words: set[str]) -> None:
    """Every word of `words` (an identifier, a number, a setting like max_steps=178) stands whole in `text`."""
    missing = words - tokens(text)
    assert not missing, f"cut or missing: {sorted(missing)}\n{text}"


def test_compare_and_history_keep_machine_workload_and_device_names_whole(results):
    results[1].machine = results[0].machine  # one machine's workload: labels are devices; the other's too
    results.append(
        session(machine("gpu-server-in-the-basement", "ccc333"), [run("cuda:0", [3.0, 1.0, 1.1], data_source="real")])
    )  # beside the laptop's mnist-cnn2
    rows_by_workload = compare(results)
    labels = {f"{name}:" for name in rows_by_workload}  # each title's first word
    for rows in rows_by_workload.values():
        one_machine = len({row.machine_id for row in rows}) == 1
        labels |= tokens(Text.from_markup(" ".join(row_label(row, one_machine) for row in rows)).plain) - {""}
    assert "a-laptop-with-a-rather-long-name/cuda:0" in labels and "gpu-server-in-the-basement/cuda:0" in labels
    text = render(comparison_tables(rows_by_workload), NARROW)
    assert_fits(text, NARROW)
    assert_whole(text, labels)  # a-laptop-with-a-rather-long-name/cuda:0 was cut into three lines
    history = render([history_table(results, Path("/tmp/results.sqlite"), wide=True)], NARROW)
    assert_fits(history, NARROW)
    assert_whole(
        history,
        {result.machine["machine_name"] for result in results}
        | {record.workload for result in results for record in result.runs},
    )


def test_list_keeps_names_settings_and_published_numbers_whole():
    from devicebench.workloads import list_workloads

    entries = list_workloads()
    text = render([workloads_table(entries)], NARROW)
    assert_fits(text, NARROW)
    words = {entry.name for entry in entries} | {entry.dataset for entry in entries}
    words |= {f"{entry.parameter_count():,}" for entry in entries if entry.trainer is None}
    words |= {
        word.rstrip(",")
        for entry in entries
        for word in tokens(published_text(entry))
        if any(character.isdigit() for character in word)
    }  # 15,000-17,000 was cut after 17,00
    assert_whole(text.replace(",\n", "\n"), words)
    flat = text.replace(",", " ")
    assert_whole(
        flat,
        {
            f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}"
            for entry in entries
            for key, value in entry.defaults.items()
        },
    )  # learning_ra / te=0.0001


def test_check_table_keeps_device_names_and_figures_whole():
    from devicebench.check import document
    from devicebench.check.findings import FAIL, PASS, WARN, Check
    from devicebench.cli.check import checks_table

    checks = [
        Check(None, "software", "PyTorch build", PASS, "2.13.0+cu128 sees 1 GPU, driver 570.86.15"),
        Check(
            "cuda:0",
            "work",
            "catdog-original lands on the device",
            WARN,
            "0.41 s a step on cuda:0, 12,345 samples/s",
            advice="close the program using 97% of cuda:0",
        ),
        Check(
            "cuda:0",
            "ceilings",
            "Matmul fp32",
            FAIL,
            "12.34 TFLOP/s of 19.50 TFLOP/s (63%)",
            advice="check the power limit with nvidia-smi -q -d POWER",
        ),
    ]
    text = render([checks_table(checks, document(checks))], NARROW)
    assert_fits(text, NARROW)
    assert_whole(
        text, {"catdog-original", "2.13.0+cu128", "570.86.15", "12,345", "12.34", "19.50", "cuda:0", "nvidia-smi"}
    )


def test_any_rich_table_fitted_keeps_its_words_whole_and_wraps_its_title_between_words():
    """fitted(): what every rich table devicebench prints goes through (estimate, reproduce, data list, ...)."""
    table = Table(
        title="A title long enough that it must wrap at eighty columns, between its words, never inside "
        "identifiers such as gpu-server-in-the-basement/cuda:0",
        caption="caption words whole",
    )
    for heading in ("Workload", "Setting", "Samples/s", "Speedup", "Hardware"):
        table.add_column(heading)
    table.add_row(
        "catdog-original",
        "max_steps=178",
        "15,000-17,000",
        "9.78x [9.09–10.50]",
        "Tesla V100 vs dual Xeon Silver 4110 (16 cores)",
    )
    table.add_row("imdb-transformer", "learning_rate=0.0001", "1,234,567", "—", "a-very-long-hardware-name-indeed")
    text = render([fitted(table)], NARROW)
    assert_fits(text, NARROW)
    assert_whole(
        text,
        {
            "catdog-original",
            "imdb-transformer",
            "max_steps=178",
            "learning_rate=0.0001",
            "15,000-17,000",
            "1,234,567",
            "9.78x",
            "9.09–10.50",
            "a-very-long-hardware-name-indeed",
            "gpu-server-in-the-basement/cuda:0",
            "eighty",
        },
    )
    title_lines = text.split("┏")[0].splitlines()
    assert len(title_lines) == 2 and title_lines[0].startswith("A title")  # the screen's width, not the table's


def test_an_epoch_line_folds_between_its_fields_at_80_columns():
    record = run("cpu", [1.0, 1.0])
    epoch = dataclasses.replace(
        record.epochs[1], steps=1563, samples_per_s=1732.4, eval_time_s=0.9, train_loss=1.6234, test_accuracy=0.4412
    )
    fields = epoch_fields(record, epoch)
    assert len(epoch_line(record, epoch)) > NARROW  # too long for one line
    screen = io.StringIO()
    narrow = Console(file=screen, width=NARROW, soft_wrap=True, color_system=None)  # as the CLI's stderr
    RichReporter(narrow).epoch_finished(record, epoch)
    lines = screen.getvalue().splitlines()
    assert len(lines) == 2 and all(len(line) <= NARROW for line in lines)
    assert lines[1].startswith("    ")  # the continuation reads as the same epoch's
    assert [field for line in lines for field in line.strip().split(FIELD_GAP)] == fields  # no field split


@pytest.mark.parametrize("arguments", [["run", "--help"], ["reproduce", "--help"], ["history", "--help"], ["--help"]])
def test_help_shows_no_bool_type_and_no_markup_eaten(arguments):
    shown = cli.invoke(app, arguments, terminal_width=100)
    assert shown.exit_code == 0, shown.output
    text = shown.output
    assert "<bool>" not in text  # a flag takes no value
    assert "--help" in text
    if arguments[0] == "run":
        assert "'devicebench[tensorboard]'" in " ".join(text.split())  # rich took [tensorboard] for markup
    if arguments[0] == "reproduce":
        assert "SEEDS.md" not in text and "docs/workloads.md" in " ".join(text.replace("│", " ").split())
    if arguments[0] == "history":
        line = next(line for line in text.splitlines() if line.startswith("│ --last"))
        assert " N " in line and "(N ≥ 1)" in line and "9223372036854775807" not in text


def test_last_refuses_zero_with_the_range_in_words():
    refused = cli.invoke(app, ["history", "--last", "0"])
    assert refused.exit_code == 2
    assert "Invalid value for '--last'" in refused.output and "N ≥ 1" in refused.output


def test_the_dry_run_names_every_workload_whole_and_says_budget_and_synthetic_data(monkeypatch):
    """The quick suite's plan at 80 columns: names whole (gbdt… and mnis… were cut), the steps sized to the
    budget with the budget said, and the workloads that will train on synthetic data, with how to get the real."""
    for screen in (console, errors):
        monkeypatch.setattr(screen, "width", NARROW)
    shown = cli.invoke(app, ["run", "--dry-run", "--devices", "cpu"])
    assert shown.exit_code == 0, shown.output
    text = shown.stdout
    assert_fits(text, NARROW)
    from devicebench.config import RunConfig

    names = {entry.name for entry in RunConfig(devices="cpu").selected_workloads()}
    assert_whole(text, names)
    flat = " ".join(text.split())
    assert "Sized: a time budget of 2 min 00 s, start-up included" in flat
    assert (
        "cifar10-mlp, cifar10-cnn will train on SYNTHETIC data: CIFAR-10 (170 MB) is not downloaded by the "
        "quick suite; `devicebench data fetch cifar10` gets it" in flat
    )
    assert "gbdt-synthetic will train on SYNTHETIC data: generated" in flat
    assert "mnist-cnn2, mnist-cnn4: mnist downloads 11.6 MB first" in flat  # small: downloaded when run
    rows = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") > 3}
    assert "sized" in rows["mnist-cnn2"] and "all" not in rows["mnist-cnn2"]  # 'all' when 3 steps will run


def test_a_budgeted_run_shows_the_epochs_its_share_leaves_it_not_the_plans():
    """`run resnet50` planned 90 epochs and its budget ended it after 3: the header and every epoch line say so."""
    record = run("cpu", [2.0, 1.0, 1.0], steps=3)
    record.settings = dataclasses.replace(record.settings, epochs=90)
    screen = Console(file=io.StringIO(), width=80, color_system=None)
    reporter = RichReporter(screen)
    reporter.run_started(record)
    reporter.run_budgeted(record, 3, 35.0)
    reporter.epoch_started(1, 3)
    reporter.epoch_finished(record, record.epochs[0])
    shown = " ".join(screen.file.getvalue().split())
    assert "about 3 of 90 epochs (its 35 s of the budget) of 3 steps" in shown and "Epoch 1/~3 " in shown
    assert "90 epochs of" not in shown and "/90" not in shown


def test_work_before_training_is_said_while_it_lasts_on_a_terminal_and_gone_after():
    """Making 231 MB of synthetic ImageNet took 55 s with the screen still: a spinner says what is being done."""
    screen = Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None)
    reporter = RichReporter(screen)
    reporter.preparing("making synthetic imagenet data for resnet50")
    assert reporter.status is not None and str(reporter.status.status) == "making synthetic imagenet data for resnet50…"
    record = run("cpu", [2.0, 1.0], steps=3)
    reporter.run_started(record)
    reporter.epoch_started(1, 3)  # training begins: the spinner gives way to the bar
    assert reporter.status is None and reporter.progress is not None
    reporter.close()
    quiet = RichReporter(Console(file=io.StringIO(), force_terminal=True), quiet=True)
    quiet.preparing("loading mnist data for mnist-cnn2")
    assert quiet.status is None


def test_reproduces_speedup_cells_hold_a_ratio_and_its_basis_is_said_beneath():
    """A post's basis in the Speedup cell wrapped over 11 lines of 80 columns: the cell holds the ratio alone."""
    from devicebench.report.reproduction import reproduction_table
    from devicebench.reproduce import reproductions

    records = [
        run("cpu", [2.0, 1.0, 1.0], workload="cifar10-cnn", batch_size=128),
        run("cuda:0", [2.0, 0.1, 0.1], workload="cifar10-cnn", batch_size=128),
    ]
    found = reproductions(compare([session(machine("vm", "m1"), records)]))
    screen = Console(file=io.StringIO(), width=80, color_system=None)
    screen.print(reproduction_table(found))
    lines = screen.file.getvalue().splitlines()
    assert max(map(len, lines)) <= 80
    published, measured = (next(line for line in lines if kind in line) for kind in ("│ published", "│ measured"))
    assert published.rstrip("│ ").endswith("75x") and measured.rstrip("│ ").endswith("10.00x")
    text = " ".join(screen.file.getvalue().split())
    assert f"cifar10-cnn, published 75x: {found[0].published.basis}." in text
    assert "cifar10-cnn, measured here 10.00x: steady samples/s, the fastest accelerator over the CPU" in text


def test_history_keeps_one_line_a_run_on_80_columns_when_a_long_workload_name_is_stored():
    """A model of your own (`mypkg.models:build`) took the columns the times had: each went under its date and
    the table doubled in height. One machine's name is said once, in the title."""
    from devicebench.report.history import history_table

    records = [run("cpu", [2.0, 1.0, 1.0]) for _ in range(3)]
    records.append(run("cpu", [2.0, 1.0, 1.0], workload="mypackage.models:build"))
    screen = Console(file=io.StringIO(), width=80, color_system=None)
    screen.print(history_table([session(machine("laptop", "m1"), records)], Path("/tmp/results.sqlite")))
    lines = screen.file.getvalue().splitlines()
    assert lines[0] == "4 runs of laptop in /tmp/results.sqlite, started in 2026" and "Machine" not in lines[1]
    assert "(continued)" not in screen.file.getvalue() and max(map(len, lines)) <= 80
    rows = [line for line in lines if " 01-01 00:00 " in line and line.rstrip().endswith("80.0%")]
    assert len(rows) == 4 and "mypackage.models:build" in rows[-1]


def test_a_throughput_axis_in_millions_reads_in_plain_numbers_not_a_bare_1e6():
    from devicebench.report.charts import axis_number
    from devicebench.report.workload_plots import _throughput_figure

    # 1,000 samples in 0.4 ms: 2,500,000 samples/s, as boosted trees run on a GPU
    rows = compare([session(machine("vm", "m1"), [run("cpu", [1.0, 0.0004, 0.0004])])])["mnist-cnn2"]
    figure = _throughput_figure("mnist-cnn2", rows, None)
    figure.canvas.draw()
    axis = figure.axes[0].xaxis
    labels = [label.get_text() for label in axis.get_ticklabels() if label.get_text()]
    assert axis.get_offset_text().get_text() == "" and "2,000,000" in labels
    assert not any("e" in label for label in labels)
    assert (axis_number(2_500_000), axis_number(0.5), axis_number(10)) == ("2,500,000", "0.5", "10")


def test_a_headings_unit_stays_beside_its_word():
    """`compare --wide` on 80 columns wrapped a heading as `Warm-up` over `s`."""
    from devicebench.report.fitting import FittedColumn, FittedTable

    warm_up = FittedColumn("Warm-up s", ["0.52", "1.10"])
    assert warm_up.narrowest() == len("Warm-up s") and FittedColumn("Samples", ["1"]).narrowest() == len("Samples")
    figures = [FittedColumn(f"Figure {index}", ["1,234,567 a", "1 a"]) for index in range(6)]
    screen = Console(file=io.StringIO(), width=80, color_system=None)
    screen.print(FittedTable("t", [FittedColumn("Device", ["cpu", "cuda:0"])], [*figures, warm_up]))
    assert "Warm-up s" in screen.file.getvalue()
