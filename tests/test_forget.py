"""`devicebench forget`: stored runs deleted by id, with their epochs and a session left empty, after a yes; an
unknown or ambiguous id, a no, a missing terminal and a read-only database delete nothing.

    python -m pytest tests/test_forget.py -q
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.results.store import Store

cli = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def database(tmp_path, make_result, make_run) -> tuple[Path, list[str], list[str]]:
    """Two sessions: the first with runs a and b, the second with run c. Returns the path, the run ids and the
    session ids."""
    path = tmp_path / "results.sqlite"
    first = make_result(
        "laptop", [make_run(started_utc="2026-03-01T10:00:00Z"), make_run(started_utc="2026-03-01T10:01:00Z")]
    )
    second = make_result("server", [make_run(started_utc="2026-03-02T10:00:00Z")])
    with Store(path) as store:
        store.import_results([first, second])
    return path, [run.run_id for result in (first, second) for run in result.runs], [first.result_id, second.result_id]


def stored(path: Path) -> tuple[list[str], list[str], int]:
    """The run ids, the session ids and the number of epochs in the database."""
    with sqlite3.connect(path) as connection:
        runs = [row[0] for row in connection.execute("SELECT run_id FROM runs ORDER BY started_utc, run_id")]
        sessions = [row[0] for row in connection.execute("SELECT result_id FROM sessions ORDER BY created_utc")]
        epochs = connection.execute("SELECT count(*) FROM epochs").fetchone()[0]
    connection.close()
    return runs, sessions, epochs


@pytest.fixture
def terminal(monkeypatch):
    """Input from a terminal, whose answers the test types."""
    monkeypatch.setattr("devicebench.cli.options.input_is_terminal", lambda: True)


def test_yes_deletes_the_runs_their_epochs_and_the_session_left_empty(database, terminal, tmp_path):
    path, (first, second, third), (laptop, server) = database
    _, _, epochs_before = stored(path)
    outcome = cli.invoke(app, ["forget", first[:8], third, "--db", str(path)], input="y\n")
    assert outcome.exit_code == 0, outcome.output
    text = flat(outcome.output)
    assert f"{first[:8]} 2026-03-01T10:00:00Z laptop" in text and f"{third[:8]} 2026-03-02T10:00:00Z server" in text
    assert f"Delete these 2 runs from {path}?" in text
    assert f"Deleted 2 runs from {path}, and 1 session left with no run" in text
    runs, sessions, epochs = stored(path)
    assert runs == [second] and sessions == [laptop]  # the laptop's session keeps its other run
    assert epochs == epochs_before * 1 / 3  # each run had the same number of epochs
    history = cli.invoke(app, ["history", "--json", "--db", str(path)])
    assert [run["run_id"] for result in json.loads(history.output)["results"] for run in result["runs"]] == [second]
    export = tmp_path / "export.json"
    assert cli.invoke(app, ["export", str(export), "--db", str(path)]).exit_code == 0
    exported = json.loads(export.read_text())["results"]
    assert [run["run_id"] for result in exported for run in result["runs"]] == [second]
    assert "server" not in flat(cli.invoke(app, ["compare", "--db", str(path)]).output)


def test_no_deletes_nothing(database, terminal):
    path, (first, _, _), _ = database
    before = stored(path)
    outcome = cli.invoke(app, ["forget", first, "--db", str(path)], input="n\n")
    assert outcome.exit_code == 0 and "Nothing deleted." in outcome.output, outcome.output
    assert f"Delete this run from {path}?" in flat(outcome.output)  # one run: never "these 1 run"
    assert stored(path) == before


def test_without_a_terminal_and_without_yes_nothing_is_deleted(database):
    path, (first, _, _), _ = database
    before = stored(path)
    outcome = cli.invoke(app, ["forget", first, "--db", str(path)])
    assert outcome.exit_code == EXIT_USAGE
    assert "refusing to delete without confirmation when input is not a terminal; add --yes" in flat(outcome.output)
    assert stored(path) == before
    assert cli.invoke(app, ["forget", first, "--db", str(path), "--yes"]).exit_code == 0
    assert first not in stored(path)[0]


@pytest.mark.parametrize("unknown", ["ffffffff", "", "  "])
def test_an_unknown_id_is_named_and_nothing_is_deleted(database, unknown):
    path, (first, _, _), _ = database
    before = stored(path)
    outcome = cli.invoke(app, ["forget", first, unknown, "--db", str(path), "--yes"])  # the known one stays too
    assert outcome.exit_code == EXIT_USAGE
    said = outcome.output.replace("\n", "")  # the message as one line, its quoted blanks kept
    assert f"no run {unknown!r} in {path}" in said and "Nothing was deleted" in said
    assert stored(path) == before


def test_an_ambiguous_prefix_is_refused_and_a_unique_one_is_enough(tmp_path, make_result, make_run, terminal):
    path = tmp_path / "results.sqlite"
    ids = ["3f9c2a1b" + "0" * 24, "3f9c77e0" + "0" * 24, "77e0d415" + "0" * 24]
    with Store(path) as store:
        store.import_result(make_result("laptop", [dataclasses.replace(make_run(), run_id=run_id) for run_id in ids]))
    outcome = cli.invoke(app, ["forget", "3f9c", "--db", str(path), "--yes"])
    assert outcome.exit_code == EXIT_USAGE
    assert f"'3f9c' starts 2 run ids in {path} ({ids[0]}, {ids[1]}); give more of the id" in flat(outcome.output)
    assert stored(path)[0] == ids
    assert cli.invoke(app, ["forget", "3f9c7", "7", "--db", str(path)], input="y\n").exit_code == 0
    assert stored(path)[0] == ids[:1]


def test_a_read_only_database_is_refused_before_anything_is_asked(database, monkeypatch):
    path, (first, _, _), _ = database
    before = stored(path)
    path.chmod(0o444)
    real_connect = sqlite3.connect

    def read_only(target, *arguments, **options):  # as root the mode bits do not stop SQLite: open it read-only
        if str(target) == str(path):
            return real_connect(f"file:{path}?mode=ro", *arguments, uri=True, **options)
        return real_connect(target, *arguments, **options)

    monkeypatch.setattr(sqlite3, "connect", read_only)
    outcome = cli.invoke(app, ["forget", first, "--db", str(path), "--yes"])
    monkeypatch.undo()
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert str(path) in flat(outcome.output) and "cannot be written" in flat(outcome.output)
    assert stored(path) == before


def test_a_running_run_is_not_forgotten(tmp_path, make_result, make_run):
    path = tmp_path / "results.sqlite"
    running = make_run(status="running")
    with Store(path) as store:
        result = make_result("laptop", [running])
        store.add_session(result)
        store.start_run(result.result_id, running)
    outcome = cli.invoke(app, ["forget", running.run_id, "--db", str(path), "--yes"])
    assert outcome.exit_code == EXIT_USAGE and "is still running" in flat(outcome.output), outcome.output
    assert stored(path)[0] == [running.run_id]


def test_the_store_forgets_in_one_go_and_drops_a_machine_left_with_no_session(database):
    path, (first, second, third), _ = database
    with Store(path) as store:
        assert store.forget_runs([third, third]) == (1, 1)
        assert store.stored_names()[0] == ["laptop"]  # the server had only that session
        assert store.forget_runs([first, second]) == (2, 1)
        assert store.results() == [] and store.stored_names() == ([], [])
