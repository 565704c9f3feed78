"""The commands that train nothing start at once: each runs in a fresh process without importing torch, which takes
seconds. `devicebench --help` lists every command without importing its module (devicebench.cli.app.COMMANDS), and the
line it lists each with is the first paragraph of the command's own help. (benchmarks/start_time.py times them.)

    python -m pytest tests/test_start_fast.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from result_fixtures import machine, run, session

from devicebench import __version__
from devicebench.cli import COMMANDS, app
from devicebench.results.store import Store

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the benchmarks are scripts, not a package
from start_time import WATCHED  # noqa: E402  the console script's main, saying on stderr whether torch was imported


def devicebench(*arguments: str) -> tuple[int, str, str, bool]:
    """Run `devicebench ARGUMENTS` in a fresh process (with conftest.py's sandboxed environment): its exit status,
    stdout, stderr, and whether it imported torch."""
    completed = subprocess.run([sys.executable, "-c", WATCHED, *arguments], capture_output=True, text=True, timeout=120)
    stderr, _, last_line = completed.stderr.rstrip("\n").rpartition("\n")
    assert last_line.startswith("torch imported: "), completed.stderr
    return completed.returncode, completed.stdout, stderr, last_line == "torch imported: True"


@pytest.fixture
def database(tmp_path: Path) -> Path:
    """Two machines' sessions of mnist-cnn2, each on cpu and cuda:0, with known epoch times."""
    path = tmp_path / "results.sqlite"
    laptop = session(machine("laptop", "1aptop"), [run("cpu", [2.0, 1.0, 1.0]), run("cuda:0", [1.0, 0.25, 0.25])])
    server = session(machine("server", "5erver"), [run("cpu", [1.0, 0.5, 0.5]), run("cuda:0", [0.5, 0.1, 0.1])])
    with Store(path) as store:
        store.import_results([laptop, server])
    return path


def test_version_imports_no_torch():
    status, stdout, stderr, torch_imported = devicebench("--version")
    assert (status, stdout.strip(), torch_imported) == (0, f"devicebench {__version__}", False), stderr


@pytest.mark.parametrize(("arguments", "expected_status"), [(["--help"], 0), ([], 2)], ids=["--help", "no arguments"])
def test_help_lists_every_command_with_its_line_and_imports_no_torch(arguments, expected_status):
    status, stdout, stderr, torch_imported = devicebench(*arguments)
    assert status == expected_status and not torch_imported, stderr
    shown = stdout + stderr  # without arguments click shows the help as a usage error: status 2, on stderr
    listed = {line.split()[1] for line in shown.splitlines() if line.startswith("│ ") and len(line.split()) > 2}
    assert set(COMMANDS) <= listed
    assert "data" in listed and "List, download, verify and remove the datasets" in shown


def test_history_shows_the_stored_runs_and_imports_no_torch(database):
    status, stdout, stderr, torch_imported = devicebench("history", "--db", str(database), "--json")
    assert status == 0 and not torch_imported, stderr
    stored = json.loads(stdout)
    assert sorted(
        (result["machine"]["machine_name"], run_["device"]) for result in stored["results"] for run_ in result["runs"]
    ) == [("laptop", "cpu"), ("laptop", "cuda:0"), ("server", "cpu"), ("server", "cuda:0")]
    status, stdout, stderr, torch_imported = devicebench("history", "--db", str(database))
    assert status == 0 and not torch_imported, stderr
    assert "laptop" in stdout and "server" in stdout and stdout.count("mnist-cnn2") == 4


def test_export_writes_the_stored_runs_and_imports_no_torch(database, tmp_path):
    exported = tmp_path / "export.json"
    status, stdout, stderr, torch_imported = devicebench("export", str(exported), "--db", str(database))
    assert status == 0 and not torch_imported, stderr
    assert len([run_ for result in json.loads(exported.read_text())["results"] for run_ in result["runs"]]) == 4


def test_compare_shows_the_speedups_and_imports_no_torch(database):
    status, stdout, stderr, torch_imported = devicebench("compare", "--db", str(database))
    assert status == 0, stderr
    assert "mnist-cnn2" in stdout and "laptop" in stdout and "server" in stdout
    assert "4.00" in stdout and "5.00" in stdout  # steady epochs: 1.0 s vs 0.25 s, 0.5 s vs 0.1 s
    assert not torch_imported


@pytest.mark.parametrize("command", ["history", "compare", "export", "data", "run"])  # run: the main job's help
def test_a_commands_own_help_imports_no_torch(command):
    status, stdout, stderr, torch_imported = devicebench(command, "--help")
    assert status == 0 and not torch_imported, stderr
    assert f"Usage: devicebench {command}" in stdout


def test_a_command_that_trains_still_runs_with_its_error_boundary(tmp_path):
    """`run` is made from its module when asked for, inside the group's error boundary: its refusals are one line."""
    status, stdout, stderr, torch_imported = devicebench("run", "no-such-workload", "--db", str(tmp_path / "r.db"))
    assert status == 2 and torch_imported
    assert stderr.startswith("error: ") and "no-such-workload" in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_line_listed_for_each_command_is_the_first_paragraph_of_its_help(name):
    command = typer.main.get_command(app).commands[name]  # made from its module, as when the command runs
    first_paragraph = " ".join((command.help or "").split("\n\n")[0].split())
    assert COMMANDS[name][1] == (command.short_help or first_paragraph)
