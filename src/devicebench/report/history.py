"""`devicebench history`'s table: one line per stored run, the columns that do not fit an 80-column screen
following under the run ids, one machine's name and the year said once in the title.

    devicebench history --last 10
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich import box
from rich.markup import escape
from rich.text import Text

from devicebench.report.fitting import FittedColumn, FittedTable
from devicebench.report.text import number_text, percent_text, rate_text
from devicebench.results.schema import Result, RunRecord

STATUS_STYLES = {"ok": "green", "running": "yellow", "interrupted": "yellow"}  # the failures are red


def history_table(results: list[Result], path: Path, *, wide: bool = False) -> FittedTable:
    """`devicebench history`: one line per stored run; epochs, epoch time, data and batch with --wide. Too wide for
    the terminal, the columns that do not fit follow under the run ids."""
    runs = [(result, run, run.summary()) for result in results for run in result.runs]
    # one machine's runs: its name once, in the title, not on every line (eight columns a long workload name needs,
    # or the times went under the dates and the table doubled in height)
    machines = {result.machine["machine_name"] for result in results}
    years = {run.started_utc[:4] for _, run, _ in runs}  # one year: said once, in the title; the times 5 columns less
    start = slice(5 if len(years) == 1 else 0, 16)
    text = {"justify": "left", "no_wrap": True}
    number = {"justify": "right", "no_wrap": True}
    words = {"justify": "left"}  # names wrap at their spaces; in a narrow terminal the time goes under the date
    wanted: list[tuple[str, dict[str, Any], bool, Callable[[Result, RunRecord, Any], str | Text]]] = [
        ("Started (UTC)", words, True, lambda result, run, summary: run.started_utc[start].replace("T", " ")),
        ("Machine", words, len(machines) > 1, lambda result, run, summary: escape(result.machine["machine_name"])),
        ("Workload", words, True, lambda result, run, summary: escape(run.workload)),
        ("Device", words, True, lambda result, run, summary: escape(run.device)),
        (
            "Status",
            text,
            True,
            lambda result, run, summary: Text(run.status, style=STATUS_STYLES.get(run.status, "red")),
        ),
        ("Epochs", text, wide, lambda result, run, summary: f"{summary.epochs_completed}/{run.settings.epochs}"),
        ("Samples/s", number, True, lambda result, run, summary: rate_text(summary.steady_samples_per_s)),
        ("Epoch s", number, wide, lambda result, run, summary: number_text(summary.steady_epoch_time_s, 2)),
        ("Test acc", number, True, lambda result, run, summary: percent_text(summary.final_test_accuracy)),
        ("Data", text, wide, lambda result, run, summary: run.settings.data_source),
        ("Batch", number, wide, lambda result, run, summary: str(run.settings.batch_size)),
    ]
    columns = [
        FittedColumn(heading, [cell(result, run, summary) for result, run, summary in runs], options=options)
        for heading, options, shown, cell in wanted
        if shown
    ]
    run_ids = FittedColumn("Run id", [run.run_id[:8] for _, run, _ in runs], options=text)  # to the minute above: the
    count = len(runs)  # id tells runs apart
    return FittedTable(
        f"{count} run{'' if count == 1 else 's'}"
        + (f" of {escape(next(iter(machines)))}" if len(machines) == 1 else "")
        + f" in {escape(str(path))}"
        + (f", started in {next(iter(years))}" if len(years) == 1 else ""),
        [run_ids],
        columns,
        # a rule under the header and a single space between columns
        {
            "box": box.SIMPLE_HEAD,
            "show_edge": False,
            "pad_edge": False,
            "caption": ("Samples/s and epoch s: medians" if wide else "Samples/s: median")
            + " of the steady epochs, warm-up left out. Test acc: after the last epoch."
            + ("" if wide else " --wide adds the epochs, epoch time, data and batch."),
            "caption_justify": "left",
        },
        padding=0,
        edges=False,
    )
