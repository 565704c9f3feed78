"""An interrupted run (Ctrl-C, a stop) never pools with finished ones unless asked, in every command that prints a
speedup: `compare`, `report`, the tables and the answer `run` ends with (and `reproduce`'s, which are drawn from the
same rows).

    python -m pytest tests/test_interrupted_apart.py -q
"""

from __future__ import annotations

import io

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from devicebench.cli import app
from devicebench.report.answer import answer_parts, answers
from devicebench.report.tables import comparison_tables
from devicebench.reproduce import reproductions
from devicebench.results.compare import compare
from devicebench.results.store import Store

cli = CliRunner()
FINISHED_SAMPLES_PER_S = 1000.0  # conftest's runs: steady epochs of 1,000 samples in 1.0 s ...
INTERRUPTED_EPOCHS_S = (2.0, 4.0, 4.0)  # ... and the interrupted one's in 4 s: 250 samples/s


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def sessions(make_run, make_result):
    """One session whose CPU and GPU runs finished, then one whose CPU run was interrupted, 4 times slower."""
    finished = make_result(
        runs=[
            make_run("cifar10-mlp", "cpu", epoch_times_s=(2.0, 1.0, 1.0)),
            make_run("cifar10-mlp", "cuda:0", epoch_times_s=(1.0, 0.1, 0.1)),
        ]
    )
    interrupted = make_result(
        runs=[make_run("cifar10-mlp", "cpu", epoch_times_s=INTERRUPTED_EPOCHS_S, status="interrupted")],
        created_utc="2026-03-02T09:59:00Z",
    )
    return [finished, interrupted]


def test_an_interrupted_run_gets_its_own_row_and_is_no_finished_rows_baseline(sessions):
    rows = compare(sessions)["cifar10-mlp"]
    cpu, gpu, cut_short = rows
    assert [row.settings["interrupted"] for row in rows] == [False, False, True]
    assert cpu.samples_per_s.median == FINISHED_SAMPLES_PER_S and cpu.statuses == {"ok": 1}
    assert cut_short.label == "laptop/cpu (interrupted)" and cpu.label == "laptop/cpu"
    assert gpu.baseline is cpu and gpu.speedup.ratio == pytest.approx(10.0)
    assert cut_short.baseline is cut_short  # its own baseline, not the finished CPU's
    pooled = compare(sessions, pool_interrupted=True)["cifar10-mlp"]
    assert len(pooled) == 2 and pooled[0].statuses == {"ok": 1, "interrupted": 1}


def test_compare_and_report_keep_an_interrupted_run_apart_unless_asked(sessions, tmp_path):
    database = tmp_path / "runs.sqlite"
    store = Store(database)
    store.import_results(sessions)
    store.close()
    shown = cli.invoke(app, ["compare", "--db", str(database)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    text = flat(shown.output)
    assert "│ cpu (interrupted) │ 250 │" in text and "│ cpu │ 1,000 │" in text and "10.00x" in text
    asked = cli.invoke(app, ["compare", "--db", str(database), "--pool-interrupted"], env={"COLUMNS": "200"})
    assert "(interrupted)" in asked.output and "│ cpu (interrupted) │ 625 │" in flat(asked.output)  # pooled, flagged
    for pool, apart in ((False, True), (True, False)):
        page = tmp_path / f"report-{pool}.html"
        written = cli.invoke(
            app, ["report", "--db", str(database), "--out", str(page), *(["--pool-interrupted"] * pool)]
        )
        assert written.exit_code == 0, written.output
        assert ("laptop/cpu (interrupted)" in page.read_text()) == apart


def test_runs_tables_and_answer_are_drawn_from_the_finished_rows(make_run, make_result):
    """One session in which the second repeat was interrupted: `run`'s tables and its answer (and `reproduce`'s,
    drawn from the same rows) show the finished repeat's figures apart from it."""
    session = make_result(
        runs=[
            make_run("cifar10-mlp", "cpu", epoch_times_s=INTERRUPTED_EPOCHS_S, status="interrupted", repeat=1),
            make_run("cifar10-mlp", "cpu", epoch_times_s=(2.0, 1.0, 1.0)),
        ]
    )
    rows = compare([session])
    console = Console(file=io.StringIO(), width=200, color_system=None)
    for part in [*comparison_tables(rows), *answer_parts(rows)]:
        console.print(part)
    text = flat(console.file.getvalue())
    assert "│ cpu (interrupted) │ 250 │" in text and "│ cpu │ 1,000 │" in text
    (found,) = answers(rows)
    assert found.cpu is not None and not found.cpu.settings["interrupted"]
    assert found.cpu.samples_per_s.median == FINISHED_SAMPLES_PER_S
    (reproduced,) = reproductions(rows)
    assert reproduced.measured_cpu_samples_per_s == FINISHED_SAMPLES_PER_S


def test_a_stopped_session_says_which_run_it_stored_as_interrupted_and_how_to_forget_it(
    make_run, make_result, tmp_path, capsys
):
    from devicebench.cli.session import Outcome, exit_for

    result = make_result(
        runs=[
            make_run("cifar10-mlp", "cpu", run_id="aaaa1111" * 4),
            make_run("cifar10-mlp", "cuda:0", run_id="3f9c2a1b" * 4, status="interrupted"),
        ]
    )
    result.interrupted = True
    with pytest.raises(typer.Exit) as stopped:
        exit_for(Outcome(result, None, tmp_path / "runs.sqlite", None))
    assert stopped.value.exit_code == 130
    said = flat(capsys.readouterr().err)
    assert (
        f"kept above, in {tmp_path / 'runs.sqlite'}. Stored as interrupted: run 3f9c2a1b (cifar10-mlp on cuda:0)"
        in said
    )
    assert "`devicebench forget 3f9c2a1b` removes it" in said and "aaaa1111" not in said
