"""Nothing read from a file is trusted, and every failure is a message, never a traceback: imported results, the
calibration file and the results database itself, each as the user meets it on the command line.

    python -m pytest tests/test_hostile_imports.py -q

1. An imported result with any field of the wrong type or out of range is refused whole, the field named by path.
2. A session whose id is already stored with other content is refused; the same session again adds nothing.
3. A calibration file with figures that are not finite positive numbers is refused, and nothing of it is used.
4. A damaged database (malformed, a table missing, invalid JSON in it) or one that is a FIFO is a clear error.
5. An import that the database cannot take (a full disk, a foreign key it breaks) is a clear error and adds nothing.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.engine.calibration_files import calibration_path
from devicebench.environment import machine_fingerprint
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError
from devicebench.results.transfer import export_document

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "2", "--max-eval-steps", "1"]


def unwrapped(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def db(tmp_path):
    return tmp_path / "results.sqlite"


def stored_runs(db) -> int:
    with Store(db) as store:
        return sum(len(result.runs) for result in store.results())


# --- 1. every field of an imported result is checked ------------------------------------------------------------


def _set(path: str, value):
    """An edit of a result's dict: the field at `path` (dots and [i]) becomes `value`."""

    def edit(data):
        *parents, last = path.replace("[", ".").replace("]", "").split(".")
        for key in parents:
            data = data[int(key) if key.isdigit() else key]
        data[int(last) if last.isdigit() else last] = value

    return edit


def _swap_epochs(data):
    data["runs"][1]["epochs"][1]["epoch"] = 3


HOSTILE_FIELDS = {
    "a rate as text": (
        _set("runs[1].epochs[1].samples_per_s", "fast"),
        "runs[1].epochs[1].samples_per_s: expected a finite number ≥ 0, got 'fast'",
    ),
    "an epoch number as text": (
        _set("runs[0].epochs[0].epoch", "1"),
        "runs[0].epochs[0].epoch: expected a whole number ≥ 1, got '1'",
    ),
    "an unknown status": (_set("runs[1].status", "pwned"), "runs[1].status: expected one of 'running', 'ok'"),
    "a run still running": (_set("runs[0].status", "running"), "runs[0].status: 'running' is not a finished run's"),
    "an unknown phase": (_set("runs[0].epochs[2].phase", "turbo"), "runs[0].epochs[2].phase: expected one of"),
    "a negative time": (
        _set("runs[0].epochs[1].train_time_s", -1.0),
        "runs[0].epochs[1].train_time_s: expected a finite number ≥ 0, got -1.0",
    ),
    "an infinite time": (_set("runs[0].end_to_end_s", float("inf")), "runs[0].end_to_end_s: expected a finite"),
    "an accuracy above 1": (
        _set("runs[0].epochs[2].test_accuracy", 1.5),
        "runs[0].epochs[2].test_accuracy: expected a finite number in [0, 1], got 1.5",
    ),
    "a bool for a count": (
        _set("runs[0].parameter_count", True),
        "runs[0].parameter_count: expected a whole number ≥ 0, got true",
    ),
    "a string for a bool": (_set("interrupted", "no"), "interrupted: expected true or false, got 'no'"),
    "a setting as text": (
        _set("runs[0].settings.batch_size", "50"),
        "runs[0].settings.batch_size: expected a whole number ≥ 0, got '50'",
    ),
    "a setting unknown": (_set("runs[0].settings.rm_rf", True), "runs[0].settings.rm_rf: not a field"),
    "epochs out of order": (_swap_epochs, "runs[1].epochs[1].epoch: expected 2 (epochs are numbered 1, 2, 3..."),
    "an epoch twice": (_set("runs[1].epochs[2].epoch", 2), "runs[1].epochs[2].epoch: expected 3"),
    "runs as text": (_set("runs", "all of them"), "runs: expected a list, got 'all of them'"),
    "a run id shared by two runs": (_set("runs[1].run_id", "same"), None),
}


@pytest.mark.parametrize("edit, message", HOSTILE_FIELDS.values(), ids=HOSTILE_FIELDS)
def test_1_an_imported_result_with_any_wrong_field_is_refused_whole(tmp_path, db, make_result, make_run, edit, message):
    data = make_result("elsewhere", [make_run(run_id="first"), make_run("cifar10-mlp", run_id="second")]).to_dict()
    if message is None:  # two runs of one id: the second would be silently dropped
        data["runs"][0]["run_id"] = "same"
        message = "runs[1].run_id: 'same' is also the id of runs[0]"
    edit(data)
    good = tmp_path / "good.json"
    make_result("laptop", [make_run(run_id="good")]).write_json(good)
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(data))
    outcome = cli.invoke(app, ["import", str(hostile), "--db", str(db)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert outcome.exception is None or isinstance(outcome.exception, SystemExit)
    text = unwrapped(outcome.output)
    assert f"{hostile} holds a result devicebench cannot read, so nothing of it was imported" in text
    assert message in text
    assert stored_runs(db) == 0
    assert cli.invoke(app, ["import", str(good), "--db", str(db)]).exit_code == 0  # the database is still whole
    for command in (["history"], ["compare"], ["export", str(tmp_path / "out.json")]):
        assert cli.invoke(app, [*command, "--db", str(db)]).exit_code == 0


def test_1_a_field_of_an_export_is_named_by_its_path_in_the_export(tmp_path, db, make_result, make_run):
    export = {
        "schema_version": 2,
        "kind": "devicebench-export",
        "results": [
            make_result("a", [make_run(run_id="a")]).to_dict(),
            make_result("b", [make_run(run_id="b")]).to_dict(),
        ],
    }
    export["results"][1]["runs"][0]["epochs"][0]["samples_per_s"] = "fast"
    (tmp_path / "export.json").write_text(json.dumps(export))
    outcome = cli.invoke(app, ["import", str(tmp_path / "export.json"), "--db", str(db)])
    assert outcome.exit_code == EXIT_USAGE
    assert "results[1].runs[0].epochs[0].samples_per_s: expected a finite number ≥ 0, got 'fast'" in unwrapped(
        outcome.output
    )
    assert stored_runs(db) == 0  # the first session, valid, is not imported either


def test_1_deeply_nested_json_is_refused_in_words(tmp_path, db):
    nested = tmp_path / "nested.json"
    nested.write_text('{"schema_version": 2, "runs": ' + "[" * 100_000 + "]" * 100_000 + "}")
    outcome = cli.invoke(app, ["import", str(nested), "--db", str(db)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "its JSON is nested too deeply" in unwrapped(outcome.output)
    assert stored_runs(db) == 0


# --- 2. a session id already stored with other content --------------------------------------------------------------


def test_2_the_same_session_again_adds_nothing(tmp_path, db, make_result, make_run):
    make_result("laptop", [make_run(run_id="r1")]).write_json(tmp_path / "laptop.json")
    assert cli.invoke(app, ["import", str(tmp_path / "laptop.json"), "--db", str(db)]).exit_code == 0
    again = cli.invoke(app, ["import", str(tmp_path / "laptop.json"), "--db", str(db)])
    assert again.exit_code == 0 and "0 runs added, 1 already present" in again.output


def _colliding(tmp_path, make_result, make_run):
    mine = make_result("laptop", [make_run(run_id="mine")])
    theirs = make_result("server", [make_run("cifar10-mlp", run_id="theirs")], created_utc="2026-05-05T05:05:05Z")
    theirs.result_id = mine.result_id  # another machine's session under the same id
    mine.write_json(tmp_path / "mine.json")
    theirs.write_json(tmp_path / "theirs.json")


def test_2_a_session_id_already_stored_with_other_content_is_refused_by_the_store(tmp_path, db, make_result, make_run):
    _colliding(tmp_path, make_result, make_run)
    from devicebench.results.transfer import read_results_file

    with Store(db) as store:
        store.import_results(read_results_file(tmp_path / "mine.json"))
        with pytest.raises(
            StoreError,
            match="is already stored in .* with another machine id: two different sessions carry the same id",
        ):
            store.import_results(read_results_file(tmp_path / "theirs.json"))
        (session,) = store.results()
    assert [run.run_id for run in session.runs] == ["mine"]  # nothing of theirs was pooled with mine


def test_2_a_session_id_already_stored_with_other_content_is_refused_on_import(tmp_path, db, make_result, make_run):
    _colliding(tmp_path, make_result, make_run)
    assert cli.invoke(app, ["import", str(tmp_path / "mine.json"), "--db", str(db)]).exit_code == 0
    outcome = cli.invoke(app, ["import", str(tmp_path / "theirs.json"), "--db", str(db)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "two different sessions carry the same id" in unwrapped(outcome.output)
    assert stored_runs(db) == 1


# --- 3. the calibration file --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rate, problem",
    [
        ("nan", "rate: expected a finite number > 0, got 'nan'"),
        (-5.0, "rate: expected a finite number > 0, got -5.0"),
        (True, "rate: expected a finite number > 0, got True"),
    ],
)
def test_3_a_calibration_with_a_rate_that_is_no_rate_is_not_used(tmp_path, db, caplog, rate, problem):
    from devicebench.engine.calibrate import CPU_PLAN, DeviceCeilings, Measurement
    from devicebench.engine.calibration_store import save_calibration

    fingerprint = machine_fingerprint()
    figure = Measurement(rate=0.5, size=64, stretch_s=(1.0,), stretch_rates=(0.5,))
    save_calibration(
        fingerprint["machine_id"],
        fingerprint["machine_name"],
        [
            DeviceCeilings(
                device="cpu",
                device_name="CPU",
                matmul={"fp32": figure},
                not_native=(),
                memory_copy=figure,
                host_to_device={},
                plan=CPU_PLAN,
            )
        ],
    )
    path = calibration_path(fingerprint["machine_id"])
    document = json.loads(path.read_text())
    document["devices"]["cpu"]["matmul"]["fp32"]["rate"] = rate
    path.write_text(json.dumps(document))
    with caplog.at_level(logging.WARNING):
        outcome = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(db)])
    assert outcome.exit_code == 0, outcome.output
    warning = unwrapped(caplog.text)
    assert (
        f"{path} is not a readable devicebench calibration (its entry for 'cpu' is not a device's ceilings: "
        f"{problem})" in warning
    )
    with Store(db) as store:
        (session,) = store.results()
    assert session.runs[0].peak_tflops is None  # no MFU against a figure that is not one
    assert cli.invoke(app, ["compare", "--db", str(db)]).exit_code == 0


# --- 4. a damaged database, or one that is not a file -------------------------------------------------------------


@pytest.fixture
def filled(db, make_result, make_run):
    with Store(db) as store:
        store.import_results([make_result("laptop", [make_run(run_id="r1"), make_run("cifar10-mlp", run_id="r2")])])
    return db


def test_4_a_missing_table_is_a_damaged_database_in_every_command(tmp_path, filled):
    with sqlite3.connect(filled) as connection:
        connection.execute("DROP TABLE epochs")
    for command in (
        ["history"],
        ["compare"],
        ["report", "--out", str(tmp_path / "r.html")],
        ["export", str(tmp_path / "out.json")],
    ):
        outcome = cli.invoke(app, [*command, "--db", str(filled)])
        assert outcome.exit_code == EXIT_USAGE, (command, outcome.output)
        assert f"{filled} is a damaged devicebench results database: table epochs is missing" in unwrapped(
            outcome.output
        )
        assert "sqlite3 FILE .recover" in unwrapped(outcome.output)
    assert not (tmp_path / "out.json").exists()


def _break_settings(db):
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE runs SET settings_json = '{not json' WHERE run_id = 'r2'")


def test_4_invalid_json_in_the_database_is_a_store_error_naming_it(filled):
    _break_settings(filled)
    with (
        Store(filled) as store,
        pytest.raises(
            StoreError, match="is a damaged devicebench results database: run r2's settings_json is not JSON"
        ),
    ):
        store.results()


def test_4_a_stored_field_of_the_wrong_type_is_a_store_error_naming_it(filled):
    with sqlite3.connect(filled) as connection:
        connection.execute("UPDATE epochs SET samples_per_s = 'fast' WHERE run_id = 'r1' AND epoch = 2")
    with (
        Store(filled) as store,
        pytest.raises(
            StoreError,
            match=r"runs\[0\]\.epochs\[1\]\.samples_per_s: expected a "
            "finite number ≥ 0, got 'fast'",
        ),
    ):
        store.results()


@pytest.mark.parametrize("command", [["history"], ["compare"], ["export", "out.json"], ["report", "--out", "r.html"]])
def test_4_invalid_json_in_the_database_is_an_error_in_every_command(tmp_path, filled, command, monkeypatch):
    _break_settings(filled)
    monkeypatch.chdir(tmp_path)
    outcome = cli.invoke(app, [*command, "--db", str(filled)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "r2's settings_json is not JSON" in unwrapped(outcome.output)


def test_4_a_malformed_database_is_an_error_saying_what_to_do(tmp_path, filled):
    with sqlite3.connect(filled) as connection:
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page_size = connection.execute("PRAGMA page_size").fetchone()[0]
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
    data = bytearray(filled.read_bytes())
    for page in range(1, pages):  # every page but the first (the schema) made garbage
        data[page * page_size : (page + 1) * page_size] = b"\xff" * page_size
    filled.write_bytes(bytes(data))
    for command in (["history"], ["export", str(tmp_path / "out.json")]):
        outcome = cli.invoke(app, [*command, "--db", str(filled)])
        assert outcome.exit_code == EXIT_USAGE, (command, outcome.output)
        message = unwrapped(outcome.output)
        assert (
            f"cannot open the results database {filled}: it is damaged (database disk image is malformed)" in message
            and "sqlite3 FILE .recover" in message
        )
    assert filled.read_bytes() == bytes(data)  # left as it was


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_4_a_fifo_as_the_database_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "results.sqlite"
    os.mkfifo(fifo)
    outcome = cli.invoke(app, ["history", "--db", str(fifo)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"the results database {fifo} is a FIFO (named pipe), not a regular file" in unwrapped(outcome.output)


# --- 5. an import that the database cannot take ---------------------------------------------------------------------


def _an_export(tmp_path, make_result, make_run, machine="workstation", runs=1):
    path = tmp_path / "other.json"
    result = make_result(machine, [make_run(run_id=f"x{number}") for number in range(runs)])
    path.write_text(json.dumps(export_document([result])))
    return path


def test_5_an_import_onto_a_full_disk_is_an_error_and_imports_nothing(
    tmp_path, filled, make_result, make_run, monkeypatch
):
    export = _an_export(tmp_path, make_result, make_run, runs=200)  # more than the free space in its pages
    connect = sqlite3.connect

    def full(*args, **kwargs):  # SQLite's own limit on pages: it fails exactly as on a full disk (SQLITE_FULL)
        connection = connect(*args, **kwargs)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        return connection

    monkeypatch.setattr(sqlite3, "connect", full)
    outcome = cli.invoke(app, ["import", str(export), "--db", str(filled)])
    monkeypatch.undo()
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert f"could not import the results in {filled}: the disk holding it is full" in unwrapped(outcome.output)
    assert "Traceback" not in outcome.output
    assert stored_runs(filled) == 2  # the two runs it held, and none of the import


def test_5_an_import_that_breaks_a_foreign_key_is_an_error_and_imports_nothing(tmp_path, filled, make_result, make_run):
    """A database edited by another program: a unique index on machine names makes the new machine's row be
    skipped, so its session names a machine that is not there, which the foreign key refuses."""
    with sqlite3.connect(filled) as connection:
        connection.execute("CREATE UNIQUE INDEX one_name ON machines (machine_name)")
        connection.execute("UPDATE machines SET machine_name = 'workstation'")
    export = _an_export(tmp_path, make_result, make_run)
    outcome = cli.invoke(app, ["import", str(export), "--db", str(filled)])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    message = unwrapped(outcome.output)
    assert f"could not import the results in {filled}: what it holds contradicts what was to be added" in message
    assert "FOREIGN KEY constraint failed" in message and "Traceback" not in outcome.output
    assert stored_runs(filled) == 2
