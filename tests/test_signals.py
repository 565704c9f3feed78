"""Stopping a run from outside, for real: `devicebench run` in its own process gets SIGTERM (what kill, a job
scheduler or a container stop sends) or SIGINT (Ctrl-C) once an epoch is in the database, and must keep every finished
epoch in the database and the JSON, print the table, and exit with 143 or 130.

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

from devicebench.cli import EXIT_INTERRUPTED, EXIT_TERMINATED

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
    command = [sys.executable, "-m", "devicebench", "run", "mnist-cnn2", "--devices", "cpu", "--data", "synthetic",
               "--epochs", "50", "--max-steps", "5", "--max-eval-steps", "1", "--quiet", "--db", str(database),
               "--json", str(output)]
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
        return connection.execute("SELECT runs.status, COUNT(epochs.epoch) FROM runs LEFT JOIN epochs "
                                  "ON epochs.run_id = runs.run_id GROUP BY runs.run_id").fetchall()


@pytest.mark.parametrize(("signal_number", "exit_status", "said"), [
    (signal.SIGTERM, EXIT_TERMINATED, "stopped by SIGTERM"),
    (signal.SIGINT, EXIT_INTERRUPTED, "interrupted"),
])
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
    assert "mnist-cnn2" in finished.stdout  # the table was printed
    assert "Traceback" not in finished.stderr
