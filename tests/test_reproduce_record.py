"""`devicebench reproduce` of a reference model: the public record's figures beside this machine's, in the unit each
was published in, the fastest single-GPU figure of each GPU and precision unless every row is asked for."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from rich.console import Console
from typer.testing import CliRunner

from devicebench.cli import app
from devicebench.report.answer import answer_parts
from devicebench.report.reproduction import record_table
from devicebench.report.text import rate_text
from devicebench.reproduce import (
    ReproduceError,
    factor_text,
    figure_precision,
    in_unit,
    record_comparison,
    reference_workloads,
    seed_workloads,
)
from devicebench.results.compare import compare
from devicebench.results.record import published_figures
from devicebench.workloads import get_workload

STEADY_SAMPLES_PER_S = 900.0  # conftest's runs: 1,000 samples in 1.0 s and in 1.25 s, the median of the two rates


def rows_of(make_run, make_result, workload, **hyperparameters):
    run = make_run(workload, "cpu")
    run.settings = dataclasses.replace(
        run.settings, hyperparameters={**run.settings.hyperparameters, **hyperparameters}
    )
    return compare([make_result(runs=[run])])[workload]


def shown(comparison) -> str:
    console = Console(file=io.StringIO(), width=80)
    console.print(record_table(comparison))
    return " ".join(console.file.getvalue().split())


def test_reproduce_takes_reference_models_by_name_beside_seeds():
    assert [entry.name for entry in seed_workloads(["bert-base", "S1", "resnet50"])] == [
        "mnist-cnn2",
        "mnist-cnn4",
        "bert-base",
        "resnet50",
    ]
    assert {entry.name for entry in reference_workloads()} == {
        "resnet50",
        "resnet152",
        "vgg16",
        "bert-base",
        "bert-large",
        "gpt2-small",
        "gnmt",
    }
    with pytest.raises(ReproduceError, match="unknown seed experiment RESNET18.*reference models: resnet50"):
        seed_workloads(["resnet18"])


def test_each_gpu_and_precision_shows_its_fastest_single_gpu_figure(make_run, make_result):
    rows = rows_of(make_run, make_result, "resnet50")
    brief = record_comparison(get_workload("resnet50"), rows)
    every = record_comparison(get_workload("resnet50"), rows, every_row=True)
    assert len(every.figures) == len(published_figures("resnet50"))  # images: every row compares
    assert all(figure.gpus == 1 for figure in brief.figures)
    keys = [(figure.gpu, figure.precision) for figure in brief.figures]
    assert len(keys) == len(set(keys))
    for figure in brief.figures:  # none faster of its GPU and precision is left out
        assert figure.throughput == max(
            other.throughput
            for other in every.figures
            if (other.gpu, other.precision, other.gpus) == (figure.gpu, figure.precision, 1)
        )
    rates = [figure.per_gpu_throughput for figure in brief.figures]
    assert rates == sorted(rates, reverse=True)  # the fastest first
    assert brief.not_shown == len(every.figures) - len(brief.figures) > 0
    text = shown(brief)
    fastest = brief.figures[0]
    assert f"{fastest.throughput / STEADY_SAMPLES_PER_S:.2g}x" in text.replace(",", "")
    assert "--every-row" in text and "Measured here: cpu model (cpu): 900.0 images/s at batch 50" in text


def test_tokens_per_second_count_each_samples_tokens(make_run, make_result):
    rows = rows_of(make_run, make_result, "gpt2-small", sequence_length=256)
    workload = get_workload("gpt2-small")
    assert in_unit(workload, rows[0], "tokens/s") == STEADY_SAMPLES_PER_S * 256
    comparison = record_comparison(workload, rows)
    assert comparison.figures and all(figure.unit == "tokens/s" for figure in comparison.figures)
    text = shown(comparison)
    top = comparison.figures[0]
    assert f"{top.throughput:,.0f}" in text and f"{top.throughput / (900 * 256):.2g}x" in text
    assert "Rows at 1,024 tokens a sequence, this run at 256" in text


def test_a_sequence_length_the_record_has_no_figures_at_is_said_not_compared(make_run, make_result):
    rows = rows_of(make_run, make_result, "bert-base", sequence_length=192)
    comparison = record_comparison(get_workload("bert-base"), rows)
    assert comparison.figures == () and comparison.other_lengths == {384: len(published_figures("bert-base"))}
    text = shown(comparison)
    assert "no figures of bert-base at the sequence length trained here" in text
    assert "--set sequence_length=384 compares with them" in text


def test_runs_answer_for_a_reference_model_spans_the_records_gpus(make_run, make_result):
    rows = {"resnet50": rows_of(make_run, make_result, "resnet50")}
    console = Console(file=io.StringIO(), width=300)  # no cell folds
    for part in answer_parts(rows):
        console.print(part)
    text = " ".join(console.file.getvalue().split())
    # like for like where the record allows it: its fp32 figures on synthetic data, as this CPU ran
    alike = [
        figure
        for figure in record_comparison(get_workload("resnet50"), rows["resnet50"]).figures
        if figure_precision(figure) == "fp32" and figure.data == "synthetic"
    ]
    slowest, fastest = (extreme(alike, key=lambda figure: figure.throughput) for extreme in (min, max))
    batches = sorted({figure.batch_per_gpu for figure in alike})
    assert (
        f"{factor_text(slowest.throughput / STEADY_SAMPLES_PER_S)} ({slowest.gpu}) to "
        f"{factor_text(fastest.throughput / STEADY_SAMPLES_PER_S)} ({fastest.gpu}) "
        f"(batch {batches[0]}–{batches[-1]} there, 50 here: not a speedup)"
    ) in text
    assert "the public record: devicebench reproduce" in text


@pytest.mark.parametrize(
    ("value", "text"), [(0.2134, "0.21"), (9.44, "9.4"), (10.4, "10"), (1732.2, "1,732"), (0.0, "0"), (None, "—")]
)
def test_a_throughput_below_ten_keeps_two_significant_figures(value, text):
    assert rate_text(value) == text


def test_list_says_a_reference_model_runs_when_named_and_what_the_record_holds_of_it():
    listed = CliRunner().invoke(app, ["list", "resnet50", "--json"])
    assert listed.exit_code == 0, listed.output
    [entry] = json.loads(listed.output)
    assert entry["in_suites"] is False and entry["record_figures"] == len(published_figures("resnet50"))
    table = CliRunner().invoke(app, ["list", "resnet50"], env={"COLUMNS": "200"})
    gpus = len({figure.gpu for figure in published_figures("resnet50")})
    assert "reference model, run when named" in table.output
    assert f"the public record: {entry['record_figures']} figures on {gpus} GPUs" in table.output


@pytest.mark.slow  # trains ResNet-50 at 32 pixels under a budget that halves its batch: about 12 s on 2 cores
def test_reproduce_trains_a_reference_model_and_sets_the_record_beside_it(tmp_path):
    shown = CliRunner().invoke(
        app,
        [
            "reproduce",
            "resnet50",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--set",
            "image_size=32",
            "--budget",
            "12s",
            "--db",
            str(tmp_path / "r.sqlite"),
        ],
        env={"COLUMNS": "80"},
    )
    assert shown.exit_code == 0, shown.output
    text = " ".join(shown.output.split())
    # 32 pixels a side is another model than the record's 224: no figure of it is set beside this one
    assert "this run set image_size=32 (published 224): another model, so none of them is set beside it" in text
    assert "÷ cpu" not in text and "Measured here:" in text and "images/s at batch" in text
    assert "resnet50 on cpu trains at batch" in text and "(planned: 256)" in text  # the budget halved it


def test_the_html_report_gives_a_reference_model_the_records_figures(make_run, make_result, tmp_path):
    from devicebench.report.html import write_report

    page = write_report([make_result(runs=[make_run("resnet50", "cpu")])], tmp_path / "report.html").read_text()
    figures = published_figures("resnet50")
    fastest = max((figure for figure in figures if figure.gpus == 1), key=lambda figure: figure.throughput)
    assert "A reference model, on which the field&#39;s GPU tables are measured" in page
    assert "Published figures (the public record, not measured here)" in page
    assert f"{len(figures)} figures on {len({figure.gpu for figure in figures})} GPUs" in page
    assert fastest.describe() in page and "your own model" not in page


def test_a_records_source_is_printed_whole_on_its_line_at_80_columns(make_run, make_result):
    """A URL broken mid-word cannot be copied or clicked: each source is one line, whatever its length."""
    rows = rows_of(make_run, make_result, "resnet50")
    comparison = record_comparison(get_workload("resnet50"), rows)
    console = Console(file=io.StringIO(), width=80, color_system=None)
    console.print(record_table(comparison), crop=False)  # as `reproduce` prints it
    lines = console.file.getvalue().splitlines()
    assert max(len(line) for line in lines if not line.startswith("[")) <= 80  # the tables still fit
    sources = {figure.source for figure in comparison.figures}
    assert any(len(source) > 76 for source in sources)  # longer than the screen: the case that broke
    for source in sources:
        assert any(line.endswith(f"] {source}") for line in lines), source
