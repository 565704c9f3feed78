"""Stopping devicebench from outside, for real: `devicebench run` in its own process gets SIGTERM (what kill, a job
scheduler or a container stop sends) or SIGINT (Ctrl-C) once an epoch is in the database, and must keep every finished
epoch in the database and the JSON, print the table, and exit with 143 or 130. Then the same rule in every phase and
command (devicebench.stopping): a signal to the whole process group while loader workers run, while data loads, in a
tuned trial, in the batch-size search, in calibrate, sweep, report and import; a second signal while the main thread is
stuck (tests/test_signals_phases.py); and, in one process, an error raised after a stop signal and the --json file
written while the session runs.

    python -m pytest tests/test_signals.py -q
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from devicebench import planning, runner, stopping
from devicebench.cli import EXIT_INTERRUPTED, EXIT_TERMINATED, app
from devicebench.cli.session import SessionJson
from devicebench.config import RunConfig
from devicebench.data.pipeline import LoaderBatches
from devicebench.events import RunReporter
from devicebench.results.schema import Result

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")

STARTUP_LIMIT_S = 180  # generous: importing torch and the first epoch on a loaded 2-core machine
EXIT_LIMIT_S = 60  # from the signal to the process's end: the current step, the table and the JSON
POLL_INTERVAL_S = 0.2


def finished_epochs(database: Path) -> int:
    """Epochs committed to the results database so far (0 while it does not exist yet or is being created)."""
    if not database.exists():
        return 0
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=1) as connection:
            return connection.execute("SELECT COUNT(*) FROM epochs").fetchone()[0]
    except sqlite3.OperationalError:  # the schema is not written yet
        return 0


def stop_a_run_midway(tmp_path: Path, signal_number: int) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """Start a 50-epoch run, send `signal_number` once its first epoch is stored, and wait for it to end."""
    database, output = tmp_path / "results.sqlite", tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "devicebench",
        "run",
        "mnist-cnn2",
        "--devices",
        "cpu",
        "--data",
        "synthetic",
        "--epochs",
        "50",
        "--max-steps",
        "5",
        "--max-eval-steps",
        "1",
        "--quiet",
        "--db",
        str(database),
        "--json",
        str(output),
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        started = time.monotonic()  # a deadline for the test, not a measurement
        while finished_epochs(database) < 1:
            if process.poll() is not None:
                pytest.fail(f"the run ended before its first epoch was stored:\n{process.communicate()}")
            if time.monotonic() - started > STARTUP_LIMIT_S:
                pytest.fail(f"no epoch stored within {STARTUP_LIMIT_S} s")
            time.sleep(POLL_INTERVAL_S)
        process.send_signal(signal_number)
        stdout, stderr = process.communicate(timeout=EXIT_LIMIT_S)
    finally:
        if process.poll() is None:  # the test failed: leave no training process behind
            process.kill()
            process.communicate()
    return subprocess.CompletedProcess(command, process.returncode, stdout, stderr), database, output


def stored_runs(database: Path) -> list[tuple[str, int]]:
    """(status, finished epochs) of each stored run."""
    with sqlite3.connect(database) as connection:
        return connection.execute(
            "SELECT runs.status, COUNT(epochs.epoch) FROM runs LEFT JOIN epochs "
            "ON epochs.run_id = runs.run_id GROUP BY runs.run_id"
        ).fetchall()


@pytest.mark.parametrize(
    ("signal_number", "exit_status", "said"),
    [
        (signal.SIGTERM, EXIT_TERMINATED, "stopped by SIGTERM"),
        (signal.SIGINT, EXIT_INTERRUPTED, "interrupted"),
    ],
)
@pytest.mark.slow
def test_a_signal_keeps_the_finished_epochs_in_the_database_and_the_json(tmp_path, signal_number, exit_status, said):
    finished, database, output = stop_a_run_midway(tmp_path, signal_number)
    assert finished.returncode == exit_status, finished.stderr
    [(status, epochs)] = stored_runs(database)
    assert status == "interrupted" and 1 <= epochs < 50
    run = json.loads(output.read_text())["runs"][0]
    assert run["status"] == "interrupted" and len(run["epochs"]) == epochs  # the same epochs in both places
    assert [epoch["epoch"] for epoch in run["epochs"]] == list(range(1, epochs + 1))
    kept = f"{said}; {epochs} finished epoch{'' if epochs == 1 else 's'} kept above, in {database}, in {output}"
    assert kept in " ".join(finished.stderr.split()), finished.stderr
    short_id = run["run_id"][:8]  # what was kept as interrupted, and how to remove it
    assert f"Stored as interrupted: run {short_id} (mnist-cnn2 on cpu)" in " ".join(finished.stderr.split())
    assert f"`devicebench forget {short_id}` removes it" in " ".join(finished.stderr.split())
    assert "mnist-cnn2" in finished.stdout  # the table was printed
    assert "Traceback" not in finished.stderr


# --- the stop rule in one process: the first signal interrupts, an error after it is part of the stopping -------------

TINY = dict(devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1)


class LoaderKilledAt(RunReporter):
    """As a SIGTERM to the process group did to DataLoader workers: at `workload`'s epoch 2 the signal arrives
    (recorded as the stop handling records it) and the loader raises the error its killed worker gives."""

    def __init__(self, workload: str, received: list[int]) -> None:
        self.workload, self.received, self.current = workload, received, None

    def run_started(self, record):
        self.current = record.workload

    def epoch_started(self, epoch, steps):
        if self.current == self.workload and epoch == 2:
            self.received.append(signal.SIGTERM)
            raise RuntimeError("DataLoader worker (pid 4242) is killed by signal: Terminated. ")


def test_an_error_raised_after_a_stop_signal_interrupts_the_run_instead_of_failing_it():
    config = RunConfig(workloads=("mnist-cnn2", "cifar10-mlp"), **TINY)
    with stopping.handling() as received:
        result = runner.run(planning.plan(config), LoaderKilledAt("mnist-cnn2", received))
    assert result.interrupted
    assert [(run.workload, run.status, run.error, len(run.epochs)) for run in result.runs] == [
        ("mnist-cnn2", "interrupted", "stopped by SIGTERM", 1)
    ]  # cifar10-mlp never started


def test_the_same_error_without_a_stop_signal_is_a_failure_and_the_suite_goes_on():
    config = RunConfig(workloads=("mnist-cnn2", "cifar10-mlp"), **TINY)
    with stopping.handling():
        result = runner.run(planning.plan(config), LoaderKilledAt("mnist-cnn2", []))
    assert not result.interrupted
    assert [(run.workload, run.status) for run in result.runs] == [("mnist-cnn2", "failed"), ("cifar10-mlp", "ok")]


def test_a_signal_ignored_when_devicebench_started_stays_ignored_and_the_others_are_handled():
    """`nohup devicebench run` must outlive its terminal: SIGHUP, ignored by nohup, is not taken over."""
    before = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with stopping.handling():
            assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
            assert callable(signal.getsignal(signal.SIGTERM)) and callable(signal.getsignal(signal.SIGINT))
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, before)


class SignalsAsWorkerSees:
    """Items whose label says whether the loader worker that made them ignores SIGINT and SIGHUP and outlives a
    SIGTERM for a while."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, key):
        ignored = all(signal.getsignal(number) == signal.SIG_IGN for number in (signal.SIGINT, signal.SIGHUP))
        outlived = signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN)
        return torch.zeros(2), torch.tensor(int(ignored and outlived))


def test_loader_workers_ignore_the_stop_signals_sent_to_the_whole_process_group():
    batches = LoaderBatches(SignalsAsWorkerSees(), 2, torch.device("cpu"), workers=1)
    try:
        labels = torch.cat([labels for _, labels in batches.epoch(1)])
    finally:
        batches.close()
    assert labels.tolist() == [1, 1, 1, 1]


WORKER = """
import sys, time
from devicebench.data.pipeline import _deaf_to_stop_signals
_deaf_to_stop_signals(0)
print("READY", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_loader_worker_outlives_a_group_sigterm_for_seconds_but_never_hangs_its_exit():
    """The training process gets the group's SIGTERM too and closes its workers itself; but one that nobody closes
    (multiprocessing terminates leftover workers at the interpreter's exit, and waits for them) must still end."""
    worker = subprocess.Popen([sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "READY\n"
        worker.send_signal(signal.SIGINT)
        worker.send_signal(signal.SIGHUP)
        worker.send_signal(signal.SIGTERM)
        with pytest.raises(subprocess.TimeoutExpired):
            worker.wait(timeout=1)  # still there a second later: the training process has time to close it
        assert worker.wait(timeout=EXIT_LIMIT_S) == 0
    finally:
        worker.kill()
        worker.wait()


def test_the_json_holds_this_session_while_it_runs_with_the_unfinished_run_interrupted(tmp_path, make_result, make_run):
    output = tmp_path / "run.json"
    output.write_text('{"an earlier run": true}\n')
    result = make_result("laptop", [])
    keeper = SessionJson(output)
    keeper.session_started(result)
    assert json.loads(output.read_text())["result_id"] == result.result_id  # the earlier file is gone at once
    done, going = make_run(status="ok"), make_run(status="running")
    result.runs += [done, going]
    keeper.run_started(going)
    written = Result.read_json(output)
    assert written.interrupted and [(run.status, run.error) for run in written.runs] == [
        ("ok", None),
        ("interrupted", "the process was stopped before this run finished"),
    ]
    assert going.status == "running"  # the session itself is untouched
    database = tmp_path / "results.sqlite"
    imported = CliRunner().invoke(app, ["import", str(output), "--db", str(database)])
    assert imported.exit_code == 0, imported.output  # import takes it as any interrupted session
    assert sorted(stored_runs(database)) == sorted([("ok", len(done.epochs)), ("interrupted", len(going.epochs))])


@pytest.mark.parametrize(
    ("signal_number", "exit_status"),
    [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)],  # POSIX only, as this whole module
)
def test_a_stopped_command_exits_with_128_plus_the_signal_s_number(signal_number, exit_status):
    """The shell's statuses, in one process: the slow tests above check them only by sending real signals."""
    from devicebench.cli.exits import stopped

    with stopping.handling() as received:
        received.append(signal_number)
        assert stopped("kept").exit_code == exit_status
    assert stopped("kept").exit_code == EXIT_INTERRUPTED == 130  # a KeyboardInterrupt no signal brought: Ctrl-C's
