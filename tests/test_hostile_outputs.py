"""No output ever destroys an input: every file a command writes is checked, before any work, against the results
database, the calibration files, the command's own inputs and its other outputs; a device, a terminal, a pipe or a
read-only file is never replaced by a plain file; a failed write leaves no `.partial` file; and `run` writes its
JSON before it shows its tables.

    python -m pytest tests/test_hostile_outputs.py -q

1. Outputs that name an input (or each other): refused with exit 2, the input untouched.
2. Outputs that are not writable regular files, and writes that fail midway.
3. The JSON is written before the display, which may fail.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from devicebench import files
from devicebench.cli import EXIT_FAILED_RUN, EXIT_USAGE, app
from devicebench.cli import run as run_command
from devicebench.engine.calibration_files import calibration_path
from devicebench.results.store import Store

cli = CliRunner()
RUN = [
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
    "--quiet",
]
STORED_RUNS = 10


def unwrapped(text: str) -> str:
    return " ".join(text.split())


def run_count(path: Path) -> int:
    with Store(path) as store:
        return sum(len(result.runs) for result in store.results())


def partials(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.partial"))


@pytest.fixture
def database(tmp_path, make_result, make_run) -> Path:
    """A results database holding ten runs."""
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        store.import_result(
            make_result(runs=[make_run(started_utc=f"2026-03-01T10:{minute:02d}:00Z") for minute in range(STORED_RUNS)])
        )
    assert run_count(path) == STORED_RUNS
    return path


def assert_refused(result, *words: str) -> None:
    assert result.exit_code == EXIT_USAGE, result.output
    text = unwrapped(result.output)
    for word in words:
        assert word in text, text


# --- 1. an output that names an input, or another output ---------------------------------------------------------


def test_run_json_naming_the_database_is_refused_before_any_training(database):
    result = cli.invoke(app, [*RUN, "--json", str(database), "--db", str(database)])
    assert_refused(result, f"--json {database} is the results database")
    assert "Training" not in result.output and run_count(database) == STORED_RUNS


def test_run_json_naming_the_default_database_is_refused(default_results_db, make_result, make_run):
    with Store(default_results_db) as store:  # $DEVICEBENCH_DB, set by conftest
        store.import_result(make_result(runs=[make_run()]))
    result = cli.invoke(app, [*RUN, "--json", str(default_results_db)])
    assert_refused(result, "is the results database")
    assert run_count(default_results_db) == 1


def test_run_json_through_a_link_to_the_database_is_refused(database, tmp_path):
    link = tmp_path / "innocent.json"
    link.symlink_to(database)
    result = cli.invoke(app, [*RUN, "--json", str(link), "--db", str(database)])
    assert_refused(result, "is the results database")
    assert link.is_symlink() and run_count(database) == STORED_RUNS


def test_run_json_naming_the_databases_journal_is_refused(database):
    journal = database.with_name(database.name + "-wal")
    result = cli.invoke(app, [*RUN, "--json", str(journal), "--db", str(database)])
    assert_refused(result, "results database's wal file")


def test_run_save_naming_the_database_is_refused(database):
    result = cli.invoke(app, [*RUN, "--save", str(database), "--db", str(database)])
    assert_refused(result, f"--save {database} is the results database")
    assert run_count(database) == STORED_RUNS


def test_dry_run_json_naming_the_database_is_refused(database):
    result = cli.invoke(app, [*RUN, "--dry-run", "--json", str(database), "--db", str(database)])
    assert_refused(result, "is the results database")
    assert run_count(database) == STORED_RUNS


def test_run_json_and_save_naming_one_file_are_refused(database, tmp_path):
    out = tmp_path / "out.pt"
    result = cli.invoke(app, [*RUN, "--json", str(out), "--save", str(out), "--db", str(database)])
    assert_refused(result, "--json and --save name the same file")
    assert not out.exists()


def test_run_json_naming_a_calibration_file_is_refused(database, no_stored_calibration):
    calibration = calibration_path("0123456789ab")
    calibration.parent.mkdir(parents=True, exist_ok=True)
    calibration.write_text("{}")
    result = cli.invoke(app, [*RUN, "--json", str(calibration), "--db", str(database)])
    assert_refused(result, "inside the calibration folder")
    assert calibration.read_text() == "{}"


def test_run_json_naming_an_image_of_the_data_dir_is_refused(database, tmp_path):
    image = tmp_path / "pets" / "train" / "cat" / "1.jpg"
    image.parent.mkdir(parents=True)
    image.write_bytes(b"\xff\xd8 an image")
    result = cli.invoke(app, [*RUN, "--json", str(image), "--data-dir", str(tmp_path / "pets"), "--db", str(database)])
    assert_refused(result, "inside --data-dir")
    assert image.read_bytes() == b"\xff\xd8 an image"


def test_report_out_naming_the_database_is_refused(database):
    result = cli.invoke(app, ["report", "--out", str(database), "--db", str(database)])
    assert_refused(result, f"--out {database} is the results database")
    assert run_count(database) == STORED_RUNS


def test_report_out_naming_the_price_file_is_refused(database, tmp_path):
    prices = tmp_path / "prices.toml"
    prices.write_text("[default]\ncpu = 0.10\n")
    result = cli.invoke(app, ["report", "--out", str(prices), "--price", str(prices), "--db", str(database)])
    assert_refused(result, "is the --price file")
    assert prices.read_text() == "[default]\ncpu = 0.10\n"


def test_export_naming_the_database_is_refused(tmp_path, make_result, make_run):
    database = tmp_path / "runs.json"  # a database may be named anything
    with Store(database) as store:
        store.import_result(make_result(runs=[make_run()]))
    result = cli.invoke(app, ["export", str(database), "--db", str(database)])
    assert_refused(result, "is the results database")
    assert run_count(database) == 1


# --- 2. outputs that are not writable regular files; writes that fail midway --------------------------------------


@pytest.fixture
def null_device(tmp_path) -> Path:
    """A character device like /dev/null (made with mknod, so that a failing test cannot replace the real one)."""
    path = tmp_path / "null"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, AttributeError):
        pytest.skip("making a device node needs root")
    return path


def test_run_json_to_a_device_is_refused_and_the_device_stays(database, null_device):
    result = cli.invoke(app, [*RUN, "--json", str(null_device), "--db", str(database)])
    assert_refused(result, "is a character device, not a regular file")
    assert stat.S_ISCHR(os.stat(null_device).st_mode)


def test_the_real_dev_null_stays_a_device():
    result = cli.invoke(app, ["report", "--out", "/dev/null"])
    assert_refused(result, "/dev/null: it is a character device")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_link_to_a_device_is_refused_and_stays_a_link(database, null_device, tmp_path):
    link = tmp_path / "stdout"  # as /dev/stdout is a link to the terminal
    link.symlink_to(null_device)
    result = cli.invoke(app, ["report", "--out", str(link), "--db", str(database)])
    assert_refused(result, "character device")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(link).st_mode)


def test_a_fifo_is_refused_and_stays_a_fifo(database, tmp_path):
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    result = cli.invoke(app, ["export", str(fifo), "--db", str(database)])
    assert_refused(result, "FIFO")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_link_to_a_regular_file_is_written_through_and_stays_a_link(database, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = cli.invoke(app, ["export", str(link), "--db", str(database)])
    assert result.exit_code == 0, result.output
    assert link.is_symlink() and json.loads(target.read_text())["kind"]
    assert not partials(tmp_path)


def test_a_read_only_file_is_refused_and_kept(database, tmp_path):
    kept = tmp_path / "kept.html"
    kept.write_text("keep me")
    kept.chmod(0o444)
    result = cli.invoke(app, ["report", "--out", str(kept), "--db", str(database)])
    assert_refused(result, "read-only")
    assert kept.read_text() == "keep me" and stat.S_IMODE(kept.stat().st_mode) == 0o444


class FullDisk:
    """What open() gives in files.write_atomically: a file whose write fails as a full disk's does."""

    def __init__(self, path, mode="r", *args, **kwargs):
        self.handle = open(path, mode, *args, **kwargs)  # noqa: SIM115 (closed by __exit__); the partial exists

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()

    def write(self, data):
        self.handle.write(data[:10])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_leaves_no_partial_and_the_previous_export(database, tmp_path, monkeypatch):
    out = tmp_path / "export.json"
    out.write_text("previous")
    monkeypatch.setattr(files, "open", FullDisk, raising=False)
    result = cli.invoke(app, ["export", str(out), "--db", str(database)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "No space left on device" in unwrapped(result.output)
    assert out.read_text() == "previous" and not partials(tmp_path)


def test_a_full_disk_during_the_report_leaves_no_partial(database, tmp_path, monkeypatch):
    monkeypatch.setattr(files, "open", FullDisk, raising=False)
    result = cli.invoke(app, ["report", "--out", str(tmp_path / "report.html"), "--db", str(database)])
    assert result.exit_code == EXIT_USAGE and "No space left" in unwrapped(result.output), result.output
    assert not partials(tmp_path) and not (tmp_path / "report.html").exists()


def test_a_failed_rename_leaves_no_partial_after_a_run(database, tmp_path, monkeypatch):
    def cannot_rename(source, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", cannot_rename)
    out = tmp_path / "run.json"
    result = cli.invoke(app, [*RUN, "--json", str(out), "--db", str(database)])
    assert result.exit_code == EXIT_FAILED_RUN, result.output
    assert f"could not write {out}" in unwrapped(result.output)
    assert not out.exists() and not partials(tmp_path)


def test_write_atomically_refuses_a_device_and_a_read_only_file(null_device, tmp_path):
    with pytest.raises(files.UnwritableFile, match="character device"):
        files.write_atomically(null_device, "x")
    kept = tmp_path / "kept"
    kept.write_text("keep")
    kept.chmod(0o444)
    with pytest.raises(OSError, match="read-only"):  # an OSError too: callers that report failed writes say so
        files.write_atomically(kept, "x")
    assert kept.read_text() == "keep" and not partials(tmp_path)


# --- 3. run writes its JSON before it shows its tables ------------------------------------------------------------


def test_a_display_that_fails_does_not_lose_the_json(database, tmp_path, monkeypatch):
    def cannot_encode(*args, **kwargs):
        raise UnicodeEncodeError("ascii", "–", 0, 1, "ordinal not in range(128)")

    monkeypatch.setattr(run_command.console, "print", cannot_encode)
    out = tmp_path / "run.json"
    cli.invoke(app, [*RUN, "--json", str(out), "--db", str(database)])
    assert json.loads(out.read_text())["runs"][0]["workload"] == "mnist-cnn2"


def test_a_display_that_fails_does_not_lose_the_dry_run_plan(tmp_path, monkeypatch):
    def cannot_encode(*args, **kwargs):
        raise UnicodeEncodeError("ascii", "–", 0, 1, "ordinal not in range(128)")

    monkeypatch.setattr(run_command.console, "print", cannot_encode)
    out = tmp_path / "plan.json"
    cli.invoke(app, [*RUN, "--dry-run", "--json", str(out)])
    assert json.loads(out.read_text())


# --- 4. every output of every command, against every kind of input ------------------------------------------------

MODEL_SOURCE = """
import torch
from torch import nn
from devicebench import TensorData

def build():
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

def load():
    inputs = torch.randn(40, 4, generator=torch.Generator().manual_seed(0))
    labels = (inputs[:, 0] > 0).long()
    return TensorData(inputs[:32], labels[:32], inputs[32:], labels[32:])
"""
SHORT = ["--devices", "cpu", "--data", "synthetic", "--epochs", "1", "--max-steps", "1", "--quiet"]
# Every output option of every command: the command line before it, then the flag (None: the output is an argument)
OUTPUTS = {
    "run --json": (["run", "mnist-cnn2", *SHORT], "--json"),
    "run --save": (["run", "mnist-cnn2", *SHORT], "--save"),
    "run --dry-run --json": (["run", "mnist-cnn2", *SHORT, "--dry-run"], "--json"),
    "sweep --json": (["sweep", "mnist-cnn2", *SHORT], "--json"),
    "reproduce --json": (
        ["reproduce", "S1", "--quick", "--devices", "cpu", "--data", "synthetic", "--quiet"],
        "--json",
    ),
    "estimate --json": (["estimate", "cifar10-mlp", "--on", "t4", "--data", "synthetic", "--quiet"], "--json"),
    "estimate --validate --json": (["estimate", "--validate"], "--json"),
    "report --out": (["report"], "--out"),
    "export": (["export"], None),
}
# The commands that import a --model module, with the same output options
MODEL_OUTPUTS = {
    "run --json": (
        ["run", "--model", "{module}:build", "--data", "{module}:load", "--devices", "cpu", "--epochs", "1", "--quiet"],
        "--json",
    ),
    "run --save": (
        ["run", "--model", "{module}:build", "--data", "{module}:load", "--devices", "cpu", "--epochs", "1", "--quiet"],
        "--save",
    ),
    "run --dry-run --json": (["run", "--model", "{module}:build", "--data", "{module}:load", "--dry-run"], "--json"),
    "estimate --json": (
        ["estimate", "--model", "{module}:build", "--data", "{module}:load", "--on", "t4", "--quiet"],
        "--json",
    ),
    "estimate --validate --json": (
        ["estimate", "--validate", "--model", "{module}:build", "--data", "{module}:load"],
        "--json",
    ),
}


def sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def invoke_output(case: tuple[list[str], str | None], target: Path, db: Path, module: str = ""):
    before, flag = case
    line = [part.format(module=module) for part in before]
    return cli.invoke(app, [*line, *([flag] if flag else []), str(target), "--db", str(db)])


@pytest.mark.parametrize("in_use", [True, False], ids=["in-use", "another"])
@pytest.mark.parametrize("case", OUTPUTS.values(), ids=OUTPUTS.keys())
def test_no_output_of_any_command_replaces_a_results_database(tmp_path, make_result, make_run, case, in_use):
    """The database in use, or another: one devicebench reads all the same (`--db` names it another time)."""
    db = tmp_path / "runs.json"  # named as export wants its file: the refusal must be the database's, not the name's
    with Store(db) as store:
        store.import_result(make_result(runs=[make_run()]))
    kept = sha256(db)
    result = invoke_output(case, db, db if in_use else tmp_path / "in-use.sqlite")
    assert_refused(
        result,
        f"{db} is the results database"
        if in_use
        else f"{db} is an SQLite database (a devicebench results database, which --db can name)",
    )
    assert sha256(db) == kept


@pytest.mark.parametrize("existing", [True, False], ids=["existing", "new"])
@pytest.mark.parametrize("case", OUTPUTS.values(), ids=OUTPUTS.keys())
def test_no_output_of_any_command_writes_into_the_calibration_folder(tmp_path, case, existing):
    """A calibration file is kept; a new file named as one would be read as one by every later run."""
    calibration = calibration_path("0123456789ab")
    calibration.parent.mkdir(parents=True, exist_ok=True)
    if existing:
        calibration.write_text('{"schema": 2}')
    result = invoke_output(case, calibration, tmp_path / "db.sqlite")
    assert_refused(result, "inside the calibration folder", "which devicebench keeps for itself")
    assert calibration.read_text() == '{"schema": 2}' if existing else not calibration.exists()


@pytest.mark.parametrize("case", MODEL_OUTPUTS.values(), ids=MODEL_OUTPUTS.keys())
def test_no_output_of_any_command_replaces_the_source_of_its_model(tmp_path, monkeypatch, case):
    module = f"own_{uuid.uuid4().hex[:12]}"  # a fresh name: an imported module stays in sys.modules
    source = tmp_path / f"{module}.py"
    source.write_text(MODEL_SOURCE)
    monkeypatch.chdir(tmp_path)  # --model modules are imported from the folder devicebench runs in
    kept = sha256(source)
    result = invoke_output(case, source, tmp_path / "db.sqlite", module)
    assert_refused(result, f"is the source of --model {module}:build")
    assert sha256(source) == kept


def test_the_data_module_and_a_packages_files_are_inputs_too(tmp_path, monkeypatch):
    package = tmp_path / "mypkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(MODEL_SOURCE)
    monkeypatch.chdir(tmp_path)
    for target, said in (
        (package / "data.py", "is the source of --data mypkg.data:load"),
        (package / "__init__.py", "is the source of --data mypkg.data:load"),
    ):
        kept = sha256(target)
        result = cli.invoke(
            app,
            [
                "estimate",
                "--validate",
                "--data",
                "mypkg.data:load",
                "--json",
                str(target),
                "--db",
                str(tmp_path / "db.sqlite"),
            ],
        )
        assert_refused(result, said)
        assert sha256(target) == kept
    assert files.module_sources("mypkg.data:load") == [package / "__init__.py", package / "data.py"]
    assert files.module_sources("synthetic") == files.module_sources("nosuchmodule:load") == []
