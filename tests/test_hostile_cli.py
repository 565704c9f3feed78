"""Every failure of the command line is a message and an exit status, never a traceback: what the store, the
importer, a user's own code, the disk or the terminal can throw at it.

    python -m pytest tests/test_hostile_cli.py -q
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest
from result_fixtures import machine, run, session
from typer.testing import CliRunner

import devicebench.cli.machine
from devicebench.checkpoint import CheckpointError
from devicebench.cli import (
    COMMANDS,
    EXIT_FAILED_RUN,
    EXIT_OUTPUT_CUT,
    EXIT_OUTPUT_LOST,
    EXIT_USAGE,
    app,
)
from devicebench.config import ConfigError
from devicebench.data.sources import DataFolderIsALink
from devicebench.devices import DeviceError
from devicebench.errors import DevicebenchError
from devicebench.estimate.points import EstimateError
from devicebench.files import UnusableFile
from devicebench.report.html import ReportDependencyError
from devicebench.report.tensorboard import TensorBoardUnavailable
from devicebench.reproduce import ReproduceError
from devicebench.results.datasheets import TargetError
from devicebench.results.prices import PriceError
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError
from devicebench.results.transfer import ResultsFileError

cli = CliRunner()


def flat(text: str) -> str:
    return " ".join(text.split())


class RefusedOtherwise(DevicebenchError):
    """A refused request whose exit status is its own."""

    exit_status = 3


@pytest.mark.parametrize(
    ("raised", "code", "message"),
    [
        (ConfigError("--epochs 0: give 1 or more"), EXIT_USAGE, "error: --epochs 0: give 1 or more"),
        (RefusedOtherwise("refused with its own status"), 3, "error: refused with its own status"),
        (StoreError("database x.sqlite is locked"), EXIT_USAGE, "error: database x.sqlite is locked"),
        (ResultsFileError("in.json is not JSON"), EXIT_USAGE, "error: in.json is not JSON"),
        (UnusableFile("the price file p is a FIFO"), EXIT_USAGE, "error: the price file p is a FIFO"),
        (
            OSError(errno.ENOSPC, "No space left on device", "/full/out.json"),
            EXIT_FAILED_RUN,
            "cannot write /full/out.json: no space left on device; free some space",
        ),
        (
            OSError(errno.EROFS, "Read-only file system", "/ro/out.json"),
            EXIT_FAILED_RUN,
            "cannot write /ro/out.json: read-only file system",
        ),
        (
            PermissionError(errno.EACCES, "Permission denied", "/locked/out.json"),
            EXIT_FAILED_RUN,
            "cannot use /locked/out.json: permission denied",
        ),
        (RecursionError("maximum recursion depth exceeded"), EXIT_USAGE, "nested too deeply"),
        (RuntimeError("boom"), EXIT_FAILED_RUN, "devicebench hit an unexpected error: RuntimeError: boom"),
    ],
)
def test_whatever_a_command_raises_is_one_clear_line_and_an_exit_status(monkeypatch, raised, code, message):
    def explode(*args, **kwargs):
        raise raised

    monkeypatch.delenv("DEVICEBENCH_DEBUG", raising=False)
    monkeypatch.setattr(devicebench.cli.machine, "machine_fingerprint", explode)
    result = cli.invoke(app, ["devices"])
    assert result.exit_code == code, result.output
    assert message in flat(result.output), result.output
    assert "Traceback" not in result.output
    assert isinstance(result.exception, SystemExit)  # handled: nothing propagated
    if code == EXIT_FAILED_RUN and isinstance(raised, RuntimeError):
        assert "please report it" in flat(result.output) and "DEVICEBENCH_DEBUG=1" in result.output


def test_debug_lets_the_unexpected_error_through_with_its_traceback(monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setenv("DEVICEBENCH_DEBUG", "1")
    monkeypatch.setattr(devicebench.cli.machine, "machine_fingerprint", explode)
    result = cli.invoke(app, ["devices"])
    assert isinstance(result.exception, RuntimeError)


def test_debug_still_shows_a_refused_request_as_its_message(monkeypatch):
    """A refused request is no bug: its message says what to do, with or without DEVICEBENCH_DEBUG."""

    def refuse(*args, **kwargs):
        raise PriceError("--price 'x': write cpu=0.10,cuda=2.50")

    monkeypatch.setenv("DEVICEBENCH_DEBUG", "1")
    monkeypatch.setattr(devicebench.cli.machine, "machine_fingerprint", refuse)
    result = cli.invoke(app, ["devices"])
    assert result.exit_code == EXIT_USAGE and isinstance(result.exception, SystemExit)
    assert "error: --price 'x': write cpu=0.10,cuda=2.50" in flat(result.output)


@pytest.mark.parametrize(
    ("refusal", "kind"),
    [
        (ConfigError, ValueError),
        (DeviceError, ValueError),
        (StoreError, RuntimeError),
        (ResultsFileError, ValueError),
        (UnusableFile, ValueError),
        (PriceError, ValueError),
        (TargetError, ValueError),
        (EstimateError, ValueError),
        (ReproduceError, ValueError),
        (CheckpointError, ValueError),
        (DataFolderIsALink, RuntimeError),
        (TensorBoardUnavailable, RuntimeError),
        (ReportDependencyError, RuntimeError),
    ],
)
def test_each_refusal_the_commands_raise_is_a_devicebench_error_and_still_its_old_kind(refusal, kind):
    """The boundary shows these, so no command wraps its calls; code that catches their old kind still does."""
    assert issubclass(refusal, DevicebenchError) and issubclass(refusal, kind)
    assert refusal.exit_status == EXIT_USAGE


def test_an_unexpected_error_through_python_m_is_one_line_not_a_traceback(tmp_path):
    """The console script and `python -m devicebench` run the same boundary as the tests' CliRunner."""
    script = tmp_path / "sitecustomize.py"
    script.write_text(
        textwrap.dedent("""
        import devicebench.environment
        def explode(*args, **kwargs):
            raise RuntimeError("boom")
        devicebench.environment.machine_fingerprint = explode
    """)
    )
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    env.pop("DEVICEBENCH_DEBUG", None)
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sitecustomize, runpy; runpy.run_module('devicebench', run_name='__main__')",
            "devices",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == EXIT_FAILED_RUN, result.stderr
    assert "devicebench hit an unexpected error: RuntimeError: boom" in result.stderr
    assert "Traceback" not in result.stderr


ASCII = {**os.environ, "PYTHONIOENCODING": "ascii", "COLUMNS": "200"}


@pytest.mark.slow
@pytest.mark.parametrize("command", [["list"], ["devices"]])
def test_a_terminal_that_cannot_show_dashes_or_box_lines_still_gets_the_table(command):
    result = subprocess.run(
        [sys.executable, "-m", "devicebench", *command], capture_output=True, env=ASCII, timeout=300
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    assert b"Traceback" not in result.stderr
    result.stdout.decode("ascii")  # nothing it could not encode
    assert len(result.stdout.splitlines()) > 3


@pytest.mark.slow
def test_a_run_on_an_ascii_terminal_prints_its_table_and_writes_its_json(tmp_path):
    out = tmp_path / "out.json"
    result = subprocess.run(
        [
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
            "1",
            "--max-steps",
            "2",
            "--max-eval-steps",
            "1",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--json",
            str(out),
        ],
        capture_output=True,
        env=ASCII,
        timeout=600,
    )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    assert "Traceback" not in stderr
    result.stdout.decode("ascii")
    assert "mnist-cnn2" in result.stdout.decode()
    assert json.loads(out.read_text())["runs"][0]["status"] == "ok"


@pytest.fixture
def hostile_module(tmp_path, monkeypatch):
    (tmp_path / "hostile.py").write_text(
        textwrap.dedent("""
        import sys
        import torch
        from torch import nn

        def build():
            return nn.Linear(4, 2)

        def load():
            return torch.zeros(8, 4), torch.zeros(8, dtype=torch.long)

        def quits():
            sys.exit(3)

        def interrupts_nothing():
            raise GeneratorExit("odd")

        def bad_optimizer(parameters):
            raise ValueError("lr must be given")
    """)
    )
    (tmp_path / "quits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (
            ["--model", "quits_on_import:build", "--data", "hostile:load"],
            "--model quits_on_import:build: your module quits_on_import raised SystemExit(3) while being imported; "
            "devicebench stopped",
        ),
        (
            ["--model", "hostile:build", "--data", "quits_on_import:load"],
            "--data quits_on_import:load: your module quits_on_import raised SystemExit(3) while being imported",
        ),
        (
            ["--model", "hostile:quits", "--data", "hostile:load"],
            "--model hostile:quits raised SystemExit(3) while building the model; devicebench stopped",
        ),
        (
            ["--model", "hostile:build", "--data", "hostile:quits"],
            "--data hostile:quits raised SystemExit(3) while loading the data; devicebench stopped",
        ),
        (
            ["--model", "hostile:build", "--data", "hostile:interrupts_nothing"],
            "--data hostile:interrupts_nothing raised GeneratorExit: odd",
        ),
        (
            ["--model", "hostile:build", "--data", "hostile:load", "--optimizer", "hostile:bad_optimizer"],
            "--optimizer hostile:bad_optimizer raised ValueError: lr must be given",
        ),
    ],
)
def test_user_code_that_exits_or_raises_is_a_bad_request_not_a_silent_exit(hostile_module, flags, message):
    result = cli.invoke(app, ["run", *flags, "--devices", "cpu", "--epochs", "1", "--quiet"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert message in flat(result.output), result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e308", "--set learning_rate='1e308': a learning rate must be more than 0 and at most 10"),
        ("0", "--set learning_rate='0': a learning rate must be more than 0 and at most 10"),
        ("inf", "--set learning_rate='inf': must be a finite number"),
        ("nan", "--set learning_rate='nan': must be a finite number"),
    ],
)
def test_an_absurd_learning_rate_is_refused_before_training(tmp_path, value, message):
    result = cli.invoke(
        app,
        [
            "run",
            "mnist-cnn2",
            "--devices",
            "cpu",
            "--data",
            "synthetic",
            "--epochs",
            "1",
            "--max-steps",
            "1",
            "--max-eval-steps",
            "1",
            "--quiet",
            "--db",
            str(tmp_path / "r.sqlite"),
            "--set",
            f"learning_rate={value}",
        ],
    )
    assert result.exit_code == EXIT_USAGE, result.output
    assert message in flat(result.output), result.output
    assert "Traceback" not in result.output


def test_a_deeply_nested_price_file_is_a_price_error(tmp_path):
    path = tmp_path / "prices.toml"
    path.write_text("[default]\ncpu = " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = cli.invoke(app, ["compare", "--db", str(tmp_path / "r.sqlite"), "--price", str(path)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"price file {path} is nested too deeply" in flat(result.output), result.output
    assert "Traceback" not in result.output


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_price_file_that_is_a_fifo_is_refused_not_read_forever(tmp_path):
    fifo = tmp_path / "prices.toml"
    os.mkfifo(fifo)
    result = cli.invoke(app, ["compare", "--db", str(tmp_path / "r.sqlite"), "--price", str(fifo)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is a FIFO (named pipe), not a regular file" in flat(result.output), result.output
    result = cli.invoke(app, ["compare", "--db", str(tmp_path / "r.sqlite"), "--price", "/dev/null"])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "is a character device, not a regular file" in flat(result.output), result.output


# What each command does in the tests of a standard output that cannot be written: its real work where that takes
# seconds ({db}: a database holding one session of two runs, so that history and compare print tables), its help
# (printed by typer's own console, not ours) where the work takes minutes or needs a model file.
TINY_RUN = [
    "run",
    "mnist-cnn2",
    "--devices",
    "cpu",
    "--data",
    "synthetic",
    "--epochs",
    "1",
    "--max-steps",
    "2",
    "--max-eval-steps",
    "1",
    "--db",
    "{db}",
]
OUTPUT_COMMANDS = {
    "devices": ["devices"],
    "list": ["list"],
    "data": ["data", "list"],
    "run": TINY_RUN,
    "history": ["history", "--db", "{db}"],
    "compare": ["compare", "--db", "{db}"],
}


def command_line(name: str, db) -> list[str]:
    return [
        sys.executable,
        "-m",
        "devicebench",
        *[part.format(db=db) for part in OUTPUT_COMMANDS.get(name, [name, "--help"])],
    ]


def stored_runs(db) -> int:
    store = Store(db, reading_only=True)
    try:
        return sum(len(result.runs) for result in store.results())
    finally:
        store.close()


@pytest.fixture
def two_runs_db(tmp_path):
    db = tmp_path / "results.sqlite"
    store = Store(db)
    store.import_result(session(machine("vm", "machine-1"), [run("cpu", [1.0, 1.0]), run("cpu", [1.0, 2.0], repeat=1)]))
    store.close()
    return db


def no_traceback(stderr: bytes) -> str:
    text = stderr.decode(errors="replace")
    assert "Traceback" not in text and "AttributeError" not in text and "BrokenPipeError" not in text, text
    return text


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_a_closed_standard_output_ends_in_120_and_one_line_after_the_work_is_done(name, two_runs_db):
    result = subprocess.run(
        command_line(name, two_runs_db), stderr=subprocess.PIPE, timeout=600, preexec_fn=lambda: os.close(1)
    )  # as `devicebench ... >&-`
    stderr = no_traceback(result.stderr)
    assert result.returncode == EXIT_OUTPUT_LOST, stderr
    assert "error: standard output is closed: the command ran to its end" in flat(stderr)
    assert stored_runs(two_runs_db) == 2 + (name == "run")  # the run was stored all the same


@pytest.mark.slow
@pytest.mark.parametrize("name", COMMANDS)
def test_a_pipe_whose_reader_left_ends_quietly_in_141_after_the_work_is_done(name, two_runs_db):
    """`devicebench history | head -1`: the reader is gone before the first line (its end is closed at once)."""
    process = subprocess.Popen(command_line(name, two_runs_db), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()
    stderr = no_traceback(process.communicate(timeout=600)[1])
    assert process.returncode == EXIT_OUTPUT_CUT, stderr
    assert "error:" not in stderr
    assert stored_runs(two_runs_db) == 2 + (name == "run")


def test_an_output_that_fails_to_be_written_says_why(two_runs_db):
    with open("/dev/full", "w") as full:
        result = subprocess.run(command_line("history", two_runs_db), stdout=full, stderr=subprocess.PIPE, timeout=600)
    stderr = no_traceback(result.stderr)
    assert result.returncode == EXIT_OUTPUT_LOST
    assert "error: standard output could not be written (no space left on device)" in flat(stderr)


def test_a_failed_command_keeps_its_own_status_when_its_output_is_closed(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "devicebench", "history", "--db", str(tmp_path / "no" / "x.db")],
        stderr=subprocess.PIPE,
        timeout=600,
        preexec_fn=lambda: os.close(1),
    )
    assert result.returncode == EXIT_USAGE, no_traceback(result.stderr)


# --- a home folder that is not there -----------------------------------------------------------------------------------

NO_SUCH_HOME = "~nonexistentuser-of-devicebench/results"
HOMELESS = {
    "DEVICEBENCH_DB": ({"DEVICEBENCH_DB": NO_SUCH_HOME}, ["history"], f"$DEVICEBENCH_DB {NO_SUCH_HOME}"),
    "--db": ({}, ["history", "--db", NO_SUCH_HOME], f"--db {NO_SUCH_HOME}"),
    "DEVICEBENCH_DATA": ({"DEVICEBENCH_DATA": NO_SUCH_HOME}, ["data", "list"], f"$DEVICEBENCH_DATA {NO_SUCH_HOME}"),
    "--data-dir": ({}, ["data", "list", "--data-dir", NO_SUCH_HOME], f"--data-dir {NO_SUCH_HOME}"),
    "DEVICEBENCH_CALIBRATION_DIR": (
        {"DEVICEBENCH_CALIBRATION_DIR": NO_SUCH_HOME},
        ["run", "mnist-cnn2", "--devices", "cpu", "--data", "synthetic", "--dry-run"],
        f"$DEVICEBENCH_CALIBRATION_DIR {NO_SUCH_HOME}",
    ),
}


@pytest.mark.parametrize("variables, line, named", HOMELESS.values(), ids=HOMELESS.keys())
def test_a_home_folder_of_a_user_who_does_not_exist_is_refused_in_words(monkeypatch, variables, line, named):
    """`~user/...` for a user this machine does not have: Python's expanduser raises RuntimeError, once an
    "unexpected error ... This is a bug"."""
    for variable, value in variables.items():
        monkeypatch.setenv(variable, value)
    outcome = cli.invoke(app, line)
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    text = flat(outcome.output)
    assert f"{named}: ~nonexistentuser-of-devicebench names no home folder on this machine" in text
    assert "unexpected error" not in text and "bug" not in text


@pytest.mark.parametrize("cores", ["99999999999999999999", "4097", "0"])
def test_a_host_core_count_no_host_has_is_refused(cores):
    outcome = cli.invoke(app, ["estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--host-cores", cores])
    assert outcome.exit_code == EXIT_USAGE, outcome.output
    assert "--host-cores takes a whole number of cores from 1 up to 4096" in flat(outcome.output)
