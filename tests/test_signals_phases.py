"""Stopping devicebench from outside in every phase and command (devicebench.stopping), for real: a signal to the
whole process group while loader workers run, while data loads, in a tuned trial, in the batch-size search, in
calibrate, sweep, report and import; and a second signal while the main thread is stuck. Each phase is held open by a
driver script that wraps the phase's function (no hook in devicebench itself). The stop within one run, and the rule
in one process, are tests/test_signals.py's.

    python -m pytest tests/test_signals_phases.py -q -m slow
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

import pytest
from test_signals import EXIT_LIMIT_S, POLL_INTERVAL_S, STARTUP_LIMIT_S, finished_epochs, stored_runs

from devicebench import stopping
from devicebench.cli import EXIT_HUNG_UP, EXIT_INTERRUPTED, EXIT_TERMINATED

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


# --- each phase, stopped for real: a driver holds the phase open, the test signals the whole process group --------

DRIVER = '''
import importlib, signal, sys, time
from pathlib import Path

where, name = sys.argv[1].rsplit(":", 1)
owner = importlib.import_module(where.split("/")[0])
for part in where.split("/")[1:]:
    owner = getattr(owner, part)
real, calls = getattr(owner, name), []

def held(*args, **kwargs):
    """The phase, held open for the test's signal: READY is written once it is under way."""
    calls.append(1)
    if len(calls) == int(sys.argv[2]):
        if sys.argv[3] == "stuck":  # as a main thread inside a long torch operation: no Python handler runs
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
        Path(sys.argv[4]).write_text("PHASE-READY")
        time.sleep(60)
    return real(*args, **kwargs)

setattr(owner, name, held)
from devicebench.cli import app
app(sys.argv[5:], prog_name="devicebench")
'''


def start_held(tmp_path: Path, phase: str, arguments: list[str], *, call: int = 1, stuck: bool = False):
    """Start `devicebench ARGUMENTS` in a new process group, holding `phase` ("module/Class:function") open at its
    `call`-th call; return the process once the phase is under way. stdout and stderr go to files in tmp_path."""
    driver, ready = tmp_path / "driver.py", tmp_path / "ready"
    driver.write_text(DRIVER)
    command = [sys.executable, str(driver), phase, str(call), "stuck" if stuck else "asleep", str(ready), *arguments]
    environment = {
        **os.environ,
        "DEVICEBENCH_CALIBRATION_DIR": str(tmp_path / "calibration"),
        "DEVICEBENCH_DATA": str(tmp_path / "data"),
    }
    with open(tmp_path / "stdout", "w") as stdout, open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen(
            command, stdout=stdout, stderr=stderr, text=True, start_new_session=True, cwd=tmp_path, env=environment
        )
    started = time.monotonic()  # a deadline for the test, not a measurement
    while not ready.exists():
        if process.poll() is not None or time.monotonic() - started > STARTUP_LIMIT_S:
            stop(process)
            pytest.fail(f"the phase {phase} was never reached:\n{(tmp_path / 'stderr').read_text()}")
        time.sleep(POLL_INTERVAL_S)
    return process


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:  # the test failed: leave no process behind
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def ended(process: subprocess.Popen, tmp_path: Path, limit_s: float = EXIT_LIMIT_S) -> tuple[int, str]:
    """The exit status and stderr (whitespace unwrapped) of `process`, which must end within `limit_s`."""
    try:
        status = process.wait(timeout=limit_s)
    finally:
        stop(process)
    return status, " ".join((tmp_path / "stderr").read_text().split())


def left_behind(folder: Path) -> list[str]:
    """Half-written files anywhere under `folder`."""
    return sorted(path.name for path in folder.rglob("*") if path.name.endswith((".partial", "-journal", ".tmp")))


RUN = [
    "run",
    "mnist-cnn2",
    "--devices",
    "cpu",
    "--data",
    "synthetic",
    "--epochs",
    "2",
    "--max-steps",
    "2",
    "--max-eval-steps",
    "1",
    "--quiet",
    "--db",
    "results.sqlite",
    "--json",
    "run.json",
]
STOPS = {
    signal.SIGINT: (EXIT_INTERRUPTED, "interrupted"),
    signal.SIGTERM: (EXIT_TERMINATED, "stopped by SIGTERM"),
    signal.SIGHUP: (EXIT_HUNG_UP, "stopped by SIGHUP (the terminal closed)"),
}


STARTED = [("interrupted", 0)]  # the run had started (its tuning trial, its batch-size search): kept as interrupted


@pytest.mark.parametrize(
    ("signal_number", "phase", "arguments", "said", "runs"),
    [
        pytest.param(
            signal.SIGINT, "devicebench.planning:plan", RUN, "what finished before is kept", None, id="SIGINT-plan"
        ),
        pytest.param(
            signal.SIGTERM, "devicebench.runner:load_data", RUN, "0 finished epochs kept", [], id="SIGTERM-load"
        ),
        pytest.param(
            signal.SIGHUP, "devicebench.runner:load_dataset", RUN, "0 finished epochs kept", [], id="SIGHUP-generate"
        ),
        pytest.param(
            signal.SIGTERM,
            "devicebench.session_choices:choose_tuning",
            [*RUN, "--mode", "tuned"],
            "0 finished epochs kept",
            STARTED,
            id="SIGTERM-tuned-trial",
        ),
        pytest.param(
            signal.SIGINT,
            "devicebench.session_choices:choose_batch_size",
            [*RUN, "--batch-size", "auto"],
            "0 finished epochs kept",
            STARTED,
            id="SIGINT-batch-size-auto",
        ),
        pytest.param(
            signal.SIGTERM,
            "devicebench.runner:load_data",
            ["sweep", *RUN[1:], "--batch-size", "16,32"],
            "0 finished epochs kept",
            [],
            id="SIGTERM-sweep",
        ),
        pytest.param(
            signal.SIGTERM,
            "devicebench.cli.calibrate:measure_ceilings",
            ["calibrate", "--devices", "cpu"],
            "nothing stored",
            None,
            id="SIGTERM-calibrate",
        ),
        pytest.param(
            signal.SIGHUP,
            "devicebench.cli.report:write_report",
            ["report", "--db", "results.sqlite"],
            "nothing was left half-done",
            [],
            id="SIGHUP-report",
        ),
        pytest.param(
            signal.SIGTERM,
            "devicebench.results.store/Store:import_results",
            ["import", "earlier.json", "--db", "results.sqlite"],
            "nothing was left half-done",
            [],
            id="SIGTERM-import",
        ),
        pytest.param(
            signal.SIGTERM,
            "devicebench.cli.check:run_checks",
            ["check", "--devices", "cpu"],
            "nothing to show",
            None,
            id="SIGTERM-check",
        ),
    ],
)
@pytest.mark.slow
def test_a_signal_in_any_phase_ends_the_command_with_its_status_and_one_line(
    tmp_path, make_result, make_run, signal_number, phase, arguments, said, runs
):
    make_result("laptop", [make_run()]).write_json(tmp_path / "earlier.json")  # what `import` reads
    process = start_held(tmp_path, phase, arguments)
    os.killpg(process.pid, signal_number)
    status, stderr = ended(process, tmp_path)
    exit_status, how = STOPS[signal_number]
    assert status == exit_status, stderr
    assert f"error: {how}; " in stderr and said in stderr, stderr
    assert "Traceback" not in stderr
    assert left_behind(tmp_path) == []
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "calibration").exists()
    database = tmp_path / "results.sqlite"
    assert (stored_runs(database) if database.exists() else None) == runs  # nothing trained, nothing imported
    if "--json" in arguments and runs is not None:  # this session's file, as far as it got
        written = json.loads((tmp_path / "run.json").read_text())
        assert written["interrupted"] and [(run["status"], len(run["epochs"])) for run in written["runs"]] == runs
    elif "--json" in arguments:
        assert not (tmp_path / "run.json").exists()


@pytest.mark.slow
def test_sigterm_to_the_group_while_loader_workers_run_interrupts_the_run_and_starts_no_other(tmp_path):
    database, output = tmp_path / "results.sqlite", tmp_path / "run.json"
    command = [
        sys.executable,
        "-m",
        "devicebench",
        "run",
        "mnist-cnn2",
        "cifar10-mlp",
        "--devices",
        "cpu",
        "--data",
        "synthetic",
        "--workers",
        "2",
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
    with open(tmp_path / "stderr", "w") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    started = time.monotonic()  # a deadline for the test, not a measurement
    while finished_epochs(database) < 1:
        if process.poll() is not None or time.monotonic() - started > STARTUP_LIMIT_S:
            stop(process)
            pytest.fail(f"no epoch stored:\n{(tmp_path / 'stderr').read_text()}")
        time.sleep(POLL_INTERVAL_S)
    os.killpg(process.pid, signal.SIGTERM)  # as Slurm, Kubernetes, `docker stop` and `timeout` do
    status, stderr = ended(process, tmp_path)
    assert status == EXIT_TERMINATED, stderr
    [(run_status, epochs)] = stored_runs(database)  # cifar10-mlp never started
    assert run_status == "interrupted" and 1 <= epochs < 50
    [run] = json.loads(output.read_text())["runs"]
    assert (run["workload"], run["status"], run["error"], len(run["epochs"])) == (
        "mnist-cnn2",
        "interrupted",
        "stopped by SIGTERM",
        epochs,
    )
    assert "Traceback" not in stderr and "killed by signal" not in stderr, stderr


@pytest.mark.parametrize(
    ("signal_number", "pause_s"),
    [
        pytest.param(signal.SIGINT, 0.05, id="two-Ctrl-C-50-ms-apart"),
        pytest.param(signal.SIGTERM, 3.0, id="SIGTERM-again-after-the-notice"),
    ],
)
@pytest.mark.slow
def test_a_second_signal_ends_a_stuck_step_at_once_and_leaves_this_session_s_json(tmp_path, signal_number, pause_s):
    (tmp_path / "run.json").write_text('{"an earlier run": true}\n')
    arguments = ["run", "mnist-cnn2", "cifar10-mlp", *RUN[2:]]  # mnist-cnn2 trains; cifar10-mlp's data is stuck
    process = start_held(tmp_path, "devicebench.runner:load_data", arguments, call=2, stuck=True)
    os.killpg(process.pid, signal_number)
    time.sleep(pause_s)
    assert process.poll() is None  # the first signal waits for the step to end
    os.killpg(process.pid, signal_number)
    status, stderr = ended(process, tmp_path, limit_s=10)
    exit_status, _ = STOPS[signal_number]
    assert status == exit_status, stderr
    name = "Ctrl-C (SIGINT)" if signal_number == signal.SIGINT else "SIGTERM"
    assert (
        f"error: a second {name} stopped devicebench at once; results.sqlite holds every finished epoch, "
        "run.json every run finished before the current one; the current epoch is lost" in stderr
    ), stderr
    assert ("Send it again to stop at once" in stderr) == (pause_s > stopping.NOTICE_AFTER_S)
    assert "Traceback" not in stderr
    assert stored_runs(tmp_path / "results.sqlite") == [("ok", 2)]  # cifar10-mlp's data never came
    written = json.loads((tmp_path / "run.json").read_text())
    assert [(run["workload"], run["status"], len(run["epochs"])) for run in written["runs"]] == [
        ("mnist-cnn2", "ok", 2)
    ]
    with sqlite3.connect(tmp_path / "results.sqlite") as connection:
        assert connection.execute("SELECT result_id FROM sessions").fetchall() == [(written["result_id"],)]
    assert left_behind(tmp_path) == []


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="watches the libraries a process loaded in /proc")
def test_ctrl_c_while_the_command_line_is_still_importing_is_one_line_and_130(tmp_path):
    """`import devicebench` is light (its names are imported on first use), so __main__.main is running by the time
    torch is being imported, and a Ctrl-C then is its one line, not a traceback from the middle of torch."""
    script = "import sys, devicebench; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True).stdout.strip() == "False"
    process = subprocess.Popen(
        [sys.executable, "-m", "devicebench", "list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    maps, deadline = Path(f"/proc/{process.pid}/maps"), time.monotonic() + STARTUP_LIMIT_S
    while "libtorch" not in (maps.read_text() if maps.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.01)  # until torch's library is loaded: main() is inside `from devicebench.cli import app`
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=EXIT_LIMIT_S)
    assert process.returncode == EXIT_INTERRUPTED, stderr
    assert stderr == "error: interrupted while starting; nothing was done\n" and stdout == ""
