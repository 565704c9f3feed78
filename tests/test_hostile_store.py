"""The results database when a run cannot finish storing: a disk that fills mid-run says what it left and how to
mend it, and the run's --json file mends it; an export while a run is live writes only what imports again.

    python -m pytest tests/test_hostile_store.py -q
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.results import store as store_module
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--max-steps", "1", "--max-eval-steps", "1", "--quiet"]


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def runs_and_epochs(db) -> list[tuple[str, int]]:
    with sqlite3.connect(db) as connection:
        rows = connection.execute(
            "SELECT status, (SELECT count(*) FROM epochs WHERE epochs.run_id = runs.run_id) FROM runs"
        ).fetchall()
    connection.close()
    return rows


@pytest.fixture
def full_from_epoch_2(monkeypatch) -> Callable[[], None]:
    """The disk fills as a run's second epoch is stored (SQLite's own error, from inside the write) until the
    function returned is called."""
    epoch_row = store_module.epoch_row

    def full(run_id, epoch):
        if epoch.epoch >= 2:
            raise sqlite3.OperationalError("database or disk is full")
        return epoch_row(run_id, epoch)

    monkeypatch.setattr(store_module, "epoch_row", full)
    return monkeypatch.undo


def test_a_disk_that_fills_mid_run_leaves_a_run_that_its_complete_record_completes(
    tmp_path, make_result, make_run, full_from_epoch_2
):
    db, result = tmp_path / "runs.sqlite", make_result("vm", [make_run()])
    run = result.runs[0]
    with Store(db) as store:
        store.add_session(result)
        store.start_run(result.result_id, dataclasses.replace(run, status="running", epochs=[]))
        store.add_epoch(run.run_id, run.epochs[0])
        with pytest.raises(StoreError) as refused:
            store.add_epoch(run.run_id, run.epochs[1])
        message = unwrapped(str(refused.value))
        assert "the disk holding it is full" in message and "the file is unchanged" not in message
        assert f"run {run.run_id} stays stored as started, with the epochs stored before" in message
        assert runs_and_epochs(db) == [("running", 1)]
        full_from_epoch_2()  # space freed
        assert store.import_results([result]) == 1  # its record, as the run's --json file holds it
        assert runs_and_epochs(db) == [("ok", 3)]
        assert store.import_results([result]) == 0
    assert runs_and_epochs(db) == [("ok", 3)]


@pytest.mark.slow
def test_a_disk_that_fills_mid_run_says_what_it_left_and_the_json_completes_the_run(tmp_path, full_from_epoch_2):
    db, written = tmp_path / "runs.sqlite", tmp_path / "run.json"
    outcome = cli.invoke(
        app, ["run", "mnist-cnn2", *TINY_RUN, "--epochs", "3", "--db", str(db), "--json", str(written)]
    )
    full_from_epoch_2()
    assert outcome.exit_code == EXIT_FAILED_RUN, outcome.output
    text = unwrapped(outcome.output)
    run_id = json.loads(written.read_text())["runs"][0]["run_id"]
    assert f"could not store epoch 2 of run {run_id}" in text and "the disk holding it is full" in text
    assert "the file is unchanged" not in text  # the run's start and first epoch are in it
    assert f"run {run_id} stays stored as started, with the epochs stored before" in text
    assert f"`devicebench import` of the run's --json file completes it, or `devicebench forget {run_id[:8]}`" in text
    assert runs_and_epochs(db) == [("running", 1)]

    imported = cli.invoke(app, ["import", str(written), "--db", str(db)])
    assert imported.exit_code == 0, imported.output
    assert f"{written}: 1 run added, 0 already present" in unwrapped(imported.output)
    assert runs_and_epochs(db) == [("ok", 3)]
    with Store(db) as store:
        assert [len(run.epochs) for result in store.results() for run in result.runs] == [3]
    again = cli.invoke(app, ["import", str(written), "--db", str(db)])
    assert "0 runs added, 1 already present" in unwrapped(again.output) and runs_and_epochs(db) == [("ok", 3)]


def test_an_import_never_completes_a_run_another_live_process_is_writing(tmp_path, make_result, make_run):
    db = tmp_path / "runs.sqlite"
    finished = make_result("vm", [make_run()])
    started = make_result("vm", [make_run(status="running", epoch_times_s=())])
    started.result_id = finished.result_id
    started.runs[0].run_id = finished.runs[0].run_id
    with Store(db) as store:
        store.add_session(started)
        store.start_run(started.result_id, started.runs[0])
    with sqlite3.connect(db) as connection:  # the process writing it: alive, and not this one
        connection.execute("UPDATE live_runs SET process_id = 1")
    connection.close()
    with Store(db) as store:
        assert store.import_results([finished]) == 0
    assert runs_and_epochs(db) == [("running", 0)]


def test_an_export_while_a_run_is_live_leaves_it_out_and_imports_again(tmp_path, make_result, make_run):
    db, exported, other = tmp_path / "runs.sqlite", tmp_path / "export.json", tmp_path / "other.sqlite"
    finished = make_result("vm", [make_run()])
    live = make_result("vm", [make_run(status="running", epoch_times_s=(2.0,), started_utc="2026-03-01T11:00:00Z")])
    with Store(db) as store:
        store.import_results([finished])
        store.add_session(live)
        store.start_run(live.result_id, live.runs[0])  # by this process, which is alive: the run is live
        store.add_epoch(live.runs[0].run_id, live.runs[0].epochs[0])
    outcome = cli.invoke(app, ["export", str(exported), "--db", str(db)])
    assert outcome.exit_code == 0, outcome.output
    assert "Wrote 1 run" in outcome.output and "left out 1 still running" in unwrapped(outcome.output)
    imported = cli.invoke(app, ["import", str(exported), "--db", str(other)])
    assert imported.exit_code == 0, imported.output
    assert "1 run added" in imported.output and runs_and_epochs(other) == [("ok", 3)]

    only_live = cli.invoke(app, ["export", str(exported), "--db", str(db), "--last", "1"])
    assert only_live.exit_code != 0
    assert "every matching run in" in unwrapped(only_live.output) and "is still running" in only_live.output
    assert "1 run added" in cli.invoke(app, ["import", str(exported), "--db", str(tmp_path / "third.sqlite")]).output


def test_tensorboard_naming_the_database_is_refused_before_anything_is_stored(tmp_path):
    db = tmp_path / "runs.sqlite"
    outcome = cli.invoke(
        app, ["run", "mnist-cnn2", *TINY_RUN, "--epochs", "1", "--db", str(db), "--tensorboard", str(db)]
    )
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"--tensorboard {db} is the results database" in unwrapped(outcome.output)
    assert not db.exists()


def test_a_tensorboard_folder_that_cannot_be_made_is_refused_before_any_run_is_stored(tmp_path):
    db, in_the_way = tmp_path / "runs.sqlite", tmp_path / "a-file"
    in_the_way.write_text("")
    logs = in_the_way / "logs"
    outcome = cli.invoke(
        app, ["run", "mnist-cnn2", *TINY_RUN, "--epochs", "1", "--db", str(db), "--tensorboard", str(logs)]
    )
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"cannot write TensorBoard logs into --tensorboard {logs}: Not a directory" in unwrapped(outcome.output)
    assert not db.exists() or runs_and_epochs(db) == []  # no run cut short, interrupted 0/1
