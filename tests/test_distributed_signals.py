"""`run --nproc` stopped from outside: a signal to the launcher alone reaches every rank once, each merged epoch is
in the database as it ends, the launcher's death stops the ranks, and the CLI and the database tell the same story.

    python -m pytest tests/test_distributed_signals.py -q
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from result_fixtures import machine, run, session
from typer.testing import CliRunner

from devicebench import RunConfig, planning
from devicebench import launch as launcher
from devicebench.cli import app
from devicebench.launch import Launch, run_distributed
from devicebench.results.schema import Result

EPOCHS = 200  # far more than any test waits for: a run that ends "ok" trained on after the signal


def start_cli(tmp_path: Path, *extra: str) -> subprocess.Popen:
    """`devicebench run --nproc 2` in a session of its own, as a terminal or a scheduler would start it: with
    SIGINT at its default even where the tests run with it ignored (a shell's background job), since an ignored
    signal stays ignored across exec and devicebench leaves it so."""
    command = [
        sys.executable,
        "-m",
        "devicebench",
        "run",
        "mnist-cnn2",
        "--devices",
        "cpu",
        "--nproc",
        "2",
        "--epochs",
        str(EPOCHS),
        "--max-steps",
        "5",
        "--max-eval-steps",
        "1",
        "--data",
        "synthetic",
        "--quiet",
        "--db",
        str(tmp_path / "db.sqlite"),
        *extra,
    ]
    # SIGINT arrives at its default whatever started pytest (conftest.py)
    return subprocess.Popen(command, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def stored_runs(database: Path) -> list[tuple[str, int]]:
    """(status, epochs stored) of every run in `database`, read as another program would, while it is written."""
    if not database.exists():
        return []
    with sqlite3.connect(database, timeout=10) as connection:
        try:
            return connection.execute(
                "SELECT status, (SELECT COUNT(*) FROM epochs WHERE epochs.run_id = runs.run_id) FROM runs"
            ).fetchall()
        except sqlite3.OperationalError:  # no tables yet
            return []


def wait_for_stored_epochs(process: subprocess.Popen, database: Path, epochs: int, timeout_s: float = 120) -> int:
    """Wait until the running run has `epochs` epochs in the database; returns how many it has."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        runs = stored_runs(database)
        if runs and runs[0][1] >= epochs:
            assert runs[0][0] == "running"
            return runs[0][1]
        time.sleep(0.2)
    raise AssertionError(f"no {epochs} epochs in the database while the ranks trained: {stored_runs(database)}")


def wait_until_all_is_kept(process: subprocess.Popen, folder: Path, database: Path, output: Path) -> int:
    """With the ranks paused, wait until the launcher has stored and written every epoch rank 0 merged (it commits
    an epoch to the database, then writes the --json file: a kill between the two would leave them one apart);
    returns how many that is."""
    merged_file = launcher.partial_path(folder / "result.json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert process.poll() is None, process.communicate()
        runs = stored_runs(database)
        try:
            merged, written = (Result.read_json(path).runs for path in (merged_file, output))
        except (OSError, ValueError):  # not written yet, or still the earlier command's file
            merged, written = [], []
        counts = {len(record.epochs) for record in (*merged, *written)} | {epochs for _, epochs in runs}
        if len(merged) == len(written) == len(runs) == 1 and len(counts) == 1:
            return counts.pop()
        time.sleep(0.2)
    raise AssertionError(f"the launcher never kept what rank 0 merged: {stored_runs(database)}")


def ranks_of(process: subprocess.Popen) -> list[psutil.Process]:
    """torchrun and the ranks under `process`, once both ranks have started."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        children = psutil.Process(process.pid).children(recursive=True)
        if sum("devicebench.launch" in " ".join(child.cmdline()) for child in children) >= 2:
            return children
        time.sleep(0.2)
    raise AssertionError("the ranks never started")


def none_left(processes: list[psutil.Process], timeout_s: float) -> bool:
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    return not alive


@pytest.mark.slow
@pytest.mark.parametrize("number, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_the_launcher_alone_stops_every_rank_and_keeps_each_epoch_as_it_ended(tmp_path, number, status):
    database, output = tmp_path / "db.sqlite", tmp_path / "out.json"
    process = start_cli(tmp_path, "--json", str(output))
    children = ranks_of(process)
    before = wait_for_stored_epochs(process, database, 2)  # committed one by one, while the ranks still train
    if number == signal.SIGINT:
        os.killpg(process.pid, number)  # Ctrl-C in a terminal: its process group, where torchrun is not
    else:
        os.kill(process.pid, number)  # kill PID: the launcher alone; the ranks learn it from the launcher
    started = time.monotonic()
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == status, stderr
    assert time.monotonic() - started < 60  # stopped, not trained to the end
    how = "stopped by SIGTERM" if number == signal.SIGTERM else "interrupted"
    assert f"{how};" in stderr and "finished epochs kept above, in" in stderr and str(output) in stderr
    assert none_left(children, 5)  # torchrun and the ranks ended with it
    ((stored_status, stored_epochs),) = stored_runs(database)
    assert stored_status == "interrupted" and before <= stored_epochs < EPOCHS
    (record,) = Result.read_json(output).runs
    assert record.status == "interrupted" and len(record.epochs) == stored_epochs
    assert f"{stored_epochs} finished epochs kept" in stderr


@pytest.mark.slow
def test_the_ranks_stop_when_the_launcher_is_killed_and_its_epochs_stay_stored(tmp_path):
    database, output = tmp_path / "db.sqlite", tmp_path / "out.json"
    output.write_text("an earlier command's results")
    process = start_cli(tmp_path, "--json", str(output))
    children = ranks_of(process)
    ranks = [child for child in children if "devicebench.launch" in child.cmdline()]
    folder = Path(ranks[0].cmdline()[-1]).parent
    wait_for_stored_epochs(process, database, 1)
    for rank in ranks:
        rank.suspend()  # no epoch ends meanwhile: the kill lands after everything merged so far is kept
    try:
        before = wait_until_all_is_kept(process, folder, database, output)
        process.kill()  # kill -9: no handler runs, nothing is forwarded
        process.wait()
    finally:
        for rank in ranks:
            rank.resume()
    assert none_left(children, 30)  # not re-parented to PID 1 to train to the end
    assert not folder.exists()  # the ranks' temporary folder, which the launcher can no longer remove
    ((status, epochs),) = stored_runs(database)
    assert status == "running" and epochs == before  # what was committed stays; nobody closed the run
    history = CliRunner().invoke(app, ["history", "--db", str(database), "--json"])
    assert history.exit_code == 0, history.output
    (stored,) = json.loads(history.output)["results"]
    (record,) = stored["runs"]
    assert record["status"] == "interrupted" and len(record["epochs"]) == epochs  # the liveness check closed it
    written = Result.read_json(output)  # this session's file, as far as it got, never the earlier one
    assert written.result_id == stored["result_id"] and written.interrupted
    assert [(run.status, len(run.epochs)) for run in written.runs] == [("interrupted", epochs)]


def only_torchrun(fake) -> SimpleNamespace:
    """The launcher's `subprocess` with `fake` for torchrun, leaving every other program the tests start alone."""
    return SimpleNamespace(Popen=fake, TimeoutExpired=subprocess.TimeoutExpired)


def test_a_signal_after_every_epoch_finished_stores_and_reports_the_run_as_finished(monkeypatch, tmp_path):
    """The ranks had handed in every run when Ctrl-C came: the run is ok in the database and the JSON, and the CLI
    says so and exits 0, rather than 'interrupted' beside a run stored `ok`."""
    finished = session(machine("box", "m1"), [run("cpu", [1.0, 1.0])])
    forwarded: list[int] = []

    class Torchrun:  # rank 0 has written the result when the launcher is interrupted
        pid = 12345

        def __init__(self, command, **options):
            finished.write_json(Path(command[-1]))
            self.returncode = None

        def wait(self, timeout=None):
            if not forwarded:
                raise KeyboardInterrupt
            self.returncode = 0
            return 0

    monkeypatch.setattr(launcher, "subprocess", only_torchrun(Torchrun))
    monkeypatch.setattr(launcher.os, "killpg", lambda pid, number: forwarded.append(number))
    completed = CliRunner().invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--nproc",
            "2",
            "--data",
            "synthetic",
            "--db",
            str(tmp_path / "db.sqlite"),
            "--json",
            str(tmp_path / "out.json"),
        ],
    )
    assert forwarded == [signal.SIGINT]  # once, to torchrun's process group
    assert completed.exit_code == 0 and "interrupted" not in completed.output, completed.output
    assert stored_runs(tmp_path / "db.sqlite") == [("ok", 2)]
    assert [record.status for record in Result.read_json(tmp_path / "out.json").runs] == ["ok"]


def test_a_run_cut_short_is_interrupted_in_the_result_whatever_rank_0_wrote(monkeypatch, tmp_path):
    """The signal came between two runs of the plan: every run handed in is ok, but one planned run never ran."""
    config = RunConfig(workloads=("mnist-cnn2",), devices="cpu", data="synthetic", nproc=2, repeats=2)
    partial = session(machine("box", "m1"), [run("cpu", [1.0])])

    class Torchrun:
        pid = 12345
        returncode = -9

        def __init__(self, command, **options):
            partial.write_json(launcher.partial_path(Path(command[-1])))

        def wait(self, timeout=None):
            if timeout == launcher.POLL_S:
                raise KeyboardInterrupt
            return self.returncode

    monkeypatch.setattr(launcher, "subprocess", only_torchrun(Torchrun))
    monkeypatch.setattr(launcher.os, "killpg", lambda pid, number: None)
    result = run_distributed(planning.plan(config), Launch(nproc=2), signals=[signal.SIGTERM])
    assert result.interrupted and [record.status for record in result.runs] == ["ok"]
