"""Machines of one name, forged machine ids and forged run ids: labels stay unique and unforgeable, the whole id
always names a machine, an imported run never joins another machine's rows, and `forget` can always name a run.

    python -m pytest tests/test_hostile_machines.py -q

1. Two machines whose ids start alike get labels that tell them apart; `--baseline` by label or whole id picks
   exactly one, and a start of an id that names two is refused in words.
2. A machine named like a label (`vm@7212cd0e41b5`) is refused on import; one already stored never takes a label's
   place.
3. A session claiming a stored (or this) machine's id under another name is refused, and runs under one id but two
   names never pool; an input wait longer than the epoch's training is refused.
4. Run ids: one that would make `forget` ambiguous, or that it could never name (" ", a line break), is refused on
   import; a whole id always names its run.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sqlite3

import pytest
from typer.testing import CliRunner

from devicebench.cli import app
from devicebench.environment import machine_fingerprint
from devicebench.results.compare import compare
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError
from devicebench.results.transfer import export_document

cli = CliRunner()
LOCAL_ID, IMPORTED_ID = "7212cd0e41b5", "7212cdffffff"  # the ids the hostile round saw: six digits alike


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def session(make_result, make_run, name: str, machine_id: str, seconds: float, **run_fields):
    """A session of `name` with one CPU run whose steady epochs took `seconds` each (1000 samples)."""
    result = make_result(name, [make_run(epoch_times_s=(seconds, seconds, seconds), **run_fields)])
    result.machine["machine_id"] = machine_id
    return result


def write_export(path, *results) -> None:
    path.write_text(json.dumps(export_document(results)))


def stored_runs(db) -> int:
    with sqlite3.connect(db) as connection:
        count = connection.execute("SELECT count(*) FROM runs").fetchone()[0]
    connection.close()
    return count


# --- 1. labels that tell machines of one name apart ---------------------------------------------------------------


def test_1_two_ids_starting_alike_get_labels_that_differ(make_result, make_run):
    rows = compare(
        [
            session(make_result, make_run, "vm", LOCAL_ID, 1.0),
            session(make_result, make_run, "vm", IMPORTED_ID, 0.5),
        ]
    )["mnist-cnn2"]
    assert sorted(row.label for row in rows) == ["vm@7212cd0/cpu", "vm@7212cdf/cpu"]


def test_1_the_whole_id_and_the_label_each_pick_their_machine_as_the_baseline(make_result, make_run):
    results = [
        session(make_result, make_run, "vm", LOCAL_ID, 1.0),
        session(make_result, make_run, "vm", IMPORTED_ID, 0.5),
    ]
    for spec, ratios in (
        (f"vm@{LOCAL_ID}/cpu", {LOCAL_ID: 1.0, IMPORTED_ID: 2.0}),
        (f"{LOCAL_ID}/cpu", {LOCAL_ID: 1.0, IMPORTED_ID: 2.0}),
        ("vm@7212cdf/cpu", {LOCAL_ID: 0.5, IMPORTED_ID: 1.0}),
        (f"vm@{IMPORTED_ID}/cpu", {LOCAL_ID: 0.5, IMPORTED_ID: 1.0}),
    ):
        rows = compare(results, baseline=spec)["mnist-cnn2"]
        found = {row.machine_id: round(row.speedup.ratio, 6) for row in rows if row.speedup is not None}
        assert found == ratios, spec


def test_1_a_start_of_an_id_that_names_two_machines_picks_none_and_says_so(make_result, make_run):
    results = [
        session(make_result, make_run, "vm", LOCAL_ID, 1.0),
        session(make_result, make_run, "vm", IMPORTED_ID, 0.5),
    ]
    for row in compare(results, baseline="vm@7212cd/cpu")["mnist-cnn2"]:
        assert row.speedup is None and row.baseline is None
        assert row.speedup_note == (
            "no baseline: vm@7212cd names 2 machines (vm@7212cd0, vm@7212cdf); name one as the table does, or by its "
            "whole id"
        )


def test_1_compare_on_the_command_line_shows_both_labels_and_takes_the_whole_id(tmp_path, make_result, make_run):
    db = tmp_path / "runs.sqlite"
    with Store(db) as store:
        store.import_results(
            [
                session(make_result, make_run, "vm", LOCAL_ID, 1.0),
                session(make_result, make_run, "vm", IMPORTED_ID, 0.5),
            ]
        )
    outcome = cli.invoke(app, ["compare", "--db", str(db), "--baseline", f"vm@{LOCAL_ID}/cpu"], terminal_width=250)
    assert outcome.exit_code == 0, outcome.output
    assert re.search(r"vm@7212cd0/cpu .*1\.00x \(baseline\)", outcome.output)
    assert re.search(r"vm@7212cdf/cpu .*2\.00x", outcome.output)
    assert "no cpu run" not in outcome.output


# --- 2. a name that could pass for a label -------------------------------------------------------------------------


@pytest.mark.parametrize("name", [f"vm@{LOCAL_ID}", "@"])
def test_2_a_machine_named_like_a_label_is_refused_on_import(tmp_path, make_result, make_run, name):
    db, export = tmp_path / "runs.sqlite", tmp_path / "forged.json"
    write_export(export, session(make_result, make_run, name, IMPORTED_ID, 0.001))
    outcome = cli.invoke(app, ["import", str(export), "--db", str(db)])
    assert outcome.exit_code != 0
    assert f"machine.machine_name: {name!r} holds @, which tables put between" in unwrapped(outcome.output)
    assert not db.exists() or stored_runs(db) == 0


def test_2_a_stored_machine_named_like_a_label_never_becomes_that_machines_baseline(make_result, make_run):
    """A forged name stored before imports refused it: its label shows its own id, and naming the real machine's
    label picks the real machine."""
    results = [
        session(make_result, make_run, "vm", LOCAL_ID, 1.0),
        session(make_result, make_run, f"vm@{LOCAL_ID}", "0badc0ffee00", 0.001),
    ]
    rows = {row.machine_id: row for row in compare(results, baseline=f"vm@{LOCAL_ID}/cpu")["mnist-cnn2"]}
    assert rows["0badc0ffee00"].label == f"vm@{LOCAL_ID}@0badc0/cpu"
    assert rows["0badc0ffee00"].baseline is rows[LOCAL_ID] and rows[LOCAL_ID].baseline is rows[LOCAL_ID]


# --- 3. one id is one machine --------------------------------------------------------------------------------------


def test_3_a_session_claiming_this_machines_id_under_another_name_is_refused(tmp_path, make_result, make_run):
    db, export = tmp_path / "runs.sqlite", tmp_path / "forged.json"
    local = machine_fingerprint()
    write_export(export, session(make_result, make_run, "elsewhere", local["machine_id"], 0.001))
    outcome = cli.invoke(app, ["import", str(export), "--db", str(db)])
    assert outcome.exit_code != 0
    text = unwrapped(outcome.output)
    assert f"which is the id of this machine, {local['machine_name']!r}: one id is one machine" in text
    assert "Nothing was imported" in text and stored_runs(db) == 0


def test_3_a_session_claiming_a_stored_machines_id_under_another_name_is_refused(tmp_path, make_result, make_run):
    db = tmp_path / "runs.sqlite"
    with Store(db) as store:
        store.import_results([session(make_result, make_run, "vm", LOCAL_ID, 1.0)])
        with pytest.raises(StoreError, match="which is the id of a stored machine, 'vm'"):
            store.import_results([session(make_result, make_run, "other", LOCAL_ID, 0.001)])
    assert stored_runs(db) == 1


def test_3_runs_under_one_id_and_two_names_never_pool(make_result, make_run):
    """As an older database may hold them: two rows, and the row of the other name is no baseline for this one."""
    rows = compare(
        [session(make_result, make_run, "vm", LOCAL_ID, 1.0), session(make_result, make_run, "other", LOCAL_ID, 0.01)]
    )["mnist-cnn2"]
    assert sorted((row.label, len(row.runs)) for row in rows) == [("other/cpu", 1), ("vm/cpu", 1)]
    assert all(row.baseline is row for row in rows)
    assert {round(row.samples_per_s.median) for row in rows} == {1000, 100_000}


def test_3_an_input_wait_longer_than_the_training_is_refused(tmp_path, make_result, make_run):
    db, export = tmp_path / "runs.sqlite", tmp_path / "waits.json"
    forged = session(make_result, make_run, "vm", IMPORTED_ID, 1.0)
    run = forged.runs[0]
    run.epochs[1] = dataclasses.replace(run.epochs[1], input_wait_s=5.32)
    write_export(export, forged)
    outcome = cli.invoke(app, ["import", str(export), "--db", str(db)])
    assert outcome.exit_code != 0
    assert "results[0].runs[0].epochs[1].input_wait_s: 5.32 s is longer than the epoch's training (1 s)" in unwrapped(
        outcome.output
    )
    assert stored_runs(db) == 0


# --- 4. run ids that forget can always name -----------------------------------------------------------------------


@pytest.mark.parametrize("run_id", [" ", "\n", "a b", "3f9c2a1b\u00e9"])
def test_4_a_run_id_forget_could_not_name_is_refused_on_import(tmp_path, make_result, make_run, run_id):
    db, export = tmp_path / "runs.sqlite", tmp_path / "ids.json"
    write_export(export, session(make_result, make_run, "vm", IMPORTED_ID, 1.0, run_id=run_id))
    outcome = cli.invoke(app, ["import", str(export), "--db", str(db)])
    assert outcome.exit_code != 0
    assert "results[0].runs[0].run_id:" in outcome.output and "is not an id devicebench writes" in outcome.output
    assert stored_runs(db) == 0


def test_4_a_forged_id_equal_to_the_start_of_a_real_one_is_refused(tmp_path, make_result, make_run):
    db, export = tmp_path / "runs.sqlite", tmp_path / "forged.json"
    real = session(make_result, make_run, "vm", LOCAL_ID, 1.0)
    with Store(db) as store:
        store.import_results([real])
    real_id = real.runs[0].run_id
    for forged_id in (real_id[:8], real_id + "0"):
        write_export(export, session(make_result, make_run, "other", IMPORTED_ID, 1.0, run_id=forged_id))
        outcome = cli.invoke(app, ["import", str(export), "--db", str(db)])
        assert outcome.exit_code != 0
        assert f"run {forged_id} and the stored run {real_id} start alike" in unwrapped(outcome.output)
        assert stored_runs(db) == 1


def test_4_a_whole_id_names_its_run_even_where_another_id_starts_with_it(tmp_path, make_result, make_run):
    """As an older database may hold them: `forget ID` takes the run whose whole id it is, and `forget " "` the run
    whose id is a space, each leaving the other runs."""
    db = tmp_path / "runs.sqlite"
    with Store(db) as store:  # the store's own import, before files were checked
        store.import_results([session(make_result, make_run, "vm", LOCAL_ID, 1.0, run_id="3f9c2a1b" + "0" * 24)])
        store.import_results([session(make_result, make_run, "vm", LOCAL_ID, 1.0, run_id=" ")])
    with sqlite3.connect(db) as connection:  # a short one that starts the real one, stored by an older version
        connection.execute("UPDATE runs SET run_id = '3f9c2a1b' WHERE run_id = ' '")
        connection.execute("UPDATE epochs SET run_id = '3f9c2a1b' WHERE run_id = ' '")
    connection.close()
    with Store(db) as store:
        store.import_results([session(make_result, make_run, "vm", LOCAL_ID, 1.0, run_id="\n")])
    for run_id, left in (("3f9c2a1b", 2), ("\n", 1)):
        outcome = cli.invoke(app, ["forget", run_id, "--db", str(db), "--yes"])
        assert outcome.exit_code == 0, outcome.output
        assert stored_runs(db) == left
    with sqlite3.connect(db) as connection:
        assert [row[0] for row in connection.execute("SELECT run_id FROM runs")] == ["3f9c2a1b" + "0" * 24]
    connection.close()
