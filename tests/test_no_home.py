"""Without HOME, devicebench writes into no home folder it would have to guess: it uses the folders the environment
names (DEVICEBENCH_*, XDG_*) or refuses with the variables to set. The subprocesses run in an empty environment
and a password database whose home for this user is a folder the test watches (Python's guess without HOME).

    python -m pytest tests/test_no_home.py -q
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import devicebench
from devicebench.cli import EXIT_USAGE
from devicebench.data.sources import data_root
from devicebench.engine.calibration_files import calibration_path
from devicebench.files import UnusableFile
from devicebench.results.store import Store, default_db_path

pytestmark = pytest.mark.skipif(os.name != "posix", reason="a home guessed from the password database is POSIX's")

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
]
VARIABLES = ("DEVICEBENCH_DB", "DEVICEBENCH_DATA", "DEVICEBENCH_CALIBRATION_DIR")


def every_file(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.fixture
def homeless(tmp_path):
    """Runs `devicebench ARGUMENTS` with only PATH and the given variables; returns (result, guessed home)."""
    guessed, site, working = tmp_path / "guessed-home", tmp_path / "site", tmp_path / "working"
    for folder in (guessed, site, working):
        folder.mkdir()
    (site / "sitecustomize.py").write_text(
        textwrap.dedent(f"""
        import pwd
        _entry = pwd.getpwuid
        def _guessed(uid):  # what Python reads for `~` without HOME: this user's home in the password database
            entry = _entry(uid)
            return pwd.struct_passwd((*entry[:5], {str(guessed)!r}, entry[6]))
        pwd.getpwuid = _guessed
    """)
    )
    package_folder = str(Path(devicebench.__file__).resolve().parents[1])

    def run(arguments: list[str], **variables: str) -> subprocess.CompletedProcess:
        environment = {
            "PATH": os.environ["PATH"],
            "PYTHONPATH": os.pathsep.join([str(site), package_folder]),
            "COLUMNS": "200",
            **variables,
        }
        result = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sitecustomize, runpy; runpy.run_module('devicebench', run_name='__main__')",
                *arguments,
            ],
            capture_output=True,
            text=True,
            env=environment,
            cwd=working,
            timeout=600,
        )
        assert "Traceback" not in result.stderr, result.stderr
        assert every_file(guessed) == [] and every_file(working) == [], "wrote into a guessed home or the cwd"
        return result

    return run


@pytest.mark.slow
def test_without_home_or_any_folder_variable_a_run_is_refused_naming_the_variables(homeless):
    result = homeless(TINY_RUN)
    assert result.returncode == EXIT_USAGE, result.stderr
    message = " ".join(result.stderr.split())
    assert "HOME is not set, so devicebench will not guess where to keep" in message
    assert all(variable in message for variable in ("XDG_DATA_HOME", *VARIABLES)), message


@pytest.mark.slow
def test_without_home_a_run_and_a_report_write_only_into_the_named_folders(homeless, tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    variables = {
        "DEVICEBENCH_DB": str(given / "results.sqlite"),
        "DEVICEBENCH_DATA": str(given / "data"),
        "DEVICEBENCH_CALIBRATION_DIR": str(given / "calibration"),
    }
    run = homeless(TINY_RUN, **variables)
    assert run.returncode == 0, run.stderr
    report = homeless(["report", "--out", str(given / "report.html")], **variables)  # matplotlib's cache too
    assert report.returncode == 0, report.stderr
    assert {"results.sqlite", "report.html"} <= set(every_file(given))
    with Store(given / "results.sqlite", reading_only=True) as store:
        assert [run.status for result in store.results() for run in result.runs] == ["ok"]


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "darwin", reason="platformdirs reads XDG_* on Linux and the BSDs only")
def test_without_home_the_xdg_folders_are_used(homeless, tmp_path):
    data, cache = tmp_path / "xdg-data", tmp_path / "xdg-cache"
    result = homeless(TINY_RUN, XDG_DATA_HOME=str(data), XDG_CACHE_HOME=str(cache))
    assert result.returncode == 0, result.stderr
    assert "devicebench/results.sqlite" in every_file(data)


@pytest.mark.parametrize("home", [None, "", "  "])
def test_every_default_folder_refuses_a_missing_or_empty_home(monkeypatch, home):
    for variable in (*VARIABLES, "XDG_DATA_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(variable, raising=False)
    if home is None:
        monkeypatch.delenv("HOME")
    else:
        monkeypatch.setenv("HOME", home)  # "" would put the folders under the working folder
    for folder in (default_db_path, data_root, lambda: calibration_path("machine")):
        with pytest.raises(UnusableFile, match="HOME is not set"):
            folder()
    monkeypatch.setenv("XDG_DATA_HOME", "relative/folder")  # not a folder platformdirs would take
    with pytest.raises(UnusableFile, match="HOME is not set"):
        default_db_path()
