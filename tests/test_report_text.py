"""Each figure's text (report/text.py) where a row is missing part of what it could have (a time to target that
some runs or none reached, epochs of which none finished), and the published figures the wide legend lists."""

from __future__ import annotations

import io

import pytest
from result_fixtures import machine, run, session
from rich.console import Console

from devicebench.report.tables import comparison_tables, published_text
from devicebench.report.text import length_text, target_text
from devicebench.results.compare import Row, compare
from devicebench.workloads import get_workload


def cpu_rows(*records) -> list[Row]:
    return compare([session(machine("laptop", "aaa111"), list(records))])["mnist-cnn2"]


def targeted(repeat: int, seconds: float | None):
    """A finished run with --target-accuracy set that reached it after `seconds` of training (None: never)."""
    record = run("cpu", [2.0, 1.0], repeat=repeat)
    record.target_accuracy = 0.9
    record.time_to_target_train_s = seconds
    return record


@pytest.mark.parametrize(
    ("times", "text"),
    [
        ([41.2, 43.0], "42.1"),  # the median of both
        ([41.2, None], "41.2 (1 of 2)"),
        ([None, None], "not reached"),
    ],
)
def test_time_to_target_is_the_median_of_the_runs_that_reached_it_and_says_how_many(times, text):
    (row,) = cpu_rows(*(targeted(repeat, seconds) for repeat, seconds in enumerate(times)))
    assert target_text(row) == text


def test_a_row_without_a_target_shows_a_dash():
    (row,) = cpu_rows(run("cpu", [2.0, 1.0]))
    assert target_text(row) == "—"


@pytest.mark.parametrize(
    ("caps", "text"), [((30, 40), "at most 30–40 steps (none finished)"), ((30, None), "full length")]
)
def test_epochs_of_which_none_finished_are_told_by_what_was_asked(caps, text):
    records = [run("cpu", [], repeat=repeat, steps=cap or 10) for repeat, cap in enumerate(caps)]
    for record, cap in zip(records, caps):
        record.settings.max_steps, record.settings.epochs, record.status = cap, 3, "failed"
    assert length_text(cpu_rows(*records)) == f"3 epochs of {text}"


def test_the_wide_legend_lists_the_published_figures_of_the_known_workloads_that_have_them():
    """mnist-cnn2 has its seed's figures; resnet50 (a reference model: the public record's) has none; the third is
    no workload of this devicebench."""
    records = [run("cpu", [2.0, 1.0], workload=name) for name in ("mnist-cnn2", "resnet50", "nobody-knows-it")]
    rows_by_workload = compare([session(machine("laptop", "aaa111"), records)])

    def words(wide: bool) -> str:
        screen = io.StringIO()
        Console(file=screen, width=200).print(*comparison_tables(rows_by_workload, wide=wide))
        return " ".join(screen.getvalue().split())

    mnist = published_text(get_workload("mnist-cnn2")).replace("\n", "; ")
    assert f"mnist-cnn2 published: {' '.join(mnist.split())}" in words(wide=True)
    assert "resnet50 published" not in words(wide=True) and "nobody-knows-it published" not in words(wide=True)
    assert "mnist-cnn2 published:" not in words(wide=False)
