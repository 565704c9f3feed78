"""Issue 19, section 3: the smaller promises, each kept and tested.

1. A --db in a missing folder is refused, as --json is, by every command; the default database makes its folder.
2. An export that matches nothing is refused, naming the filters and what is stored; the file there is untouched.
3. Commands that only read work on a database they may not write; one that must be upgraded first says so; a run
   whose database stays locked is refused before it trains.
4. A live run recorded from another PID namespace (a container sharing the host's name) stays `running`.
5. Bidirectional and zero-width characters in imported names never reach the terminal.
6. A download redirected from HTTPS to HTTP is refused.

    python -m pytest tests/test_promises.py -q
"""

from __future__ import annotations

import io
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import platformdirs
import pytest
from http_fixtures import serving
from typer.testing import CliRunner

from devicebench.cli import EXIT_USAGE, app
from devicebench.data import connection, download
from devicebench.data.connection import HttpsOnlyRedirects, InsecureRedirect
from devicebench.data.download import DataUnavailable, RemoteFile
from devicebench.results import migrations, schema, store_errors
from devicebench.results import store as store_module
from devicebench.results.store import Store
from devicebench.results.transfer import printable

cli = CliRunner()
TINY_RUN = ["--devices", "cpu", "--data", "synthetic", "--epochs", "2", "--max-steps", "3", "--max-eval-steps", "1"]


def unwrapped(text: str) -> str:
    """`text` with rich's line wrapping undone: every run of whitespace becomes one space."""
    return " ".join(text.split())


@pytest.fixture
def two_machines(tmp_path, make_result, make_run) -> Path:
    """A database holding a laptop's mnist run and a server's cifar run."""
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        store.import_results(
            [
                make_result("laptop", [make_run("mnist-cnn2", run_id="r-laptop")]),
                make_result("server", [make_run("cifar10-mlp", run_id="r-server")]),
            ]
        )
    return path


# --- 1. one rule for every path the user names ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["history"],
        ["compare"],
        ["export", "OUT/runs.json"],
        ["report", "--out", "OUT/report.html"],
        ["import", "OUT/none.json"],
        ["run", "mnist-cnn2", *TINY_RUN],
    ],
)
def test_1_a_db_in_a_missing_folder_is_refused_by_every_command(tmp_path, monkeypatch, command):
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    (tmp_path / "out").mkdir()
    database = tmp_path / "missing" / "folder" / "x.sqlite"
    arguments = [argument.replace("OUT", str(tmp_path / "out")) for argument in command]
    result = cli.invoke(app, [*arguments, "--db", str(database)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert f"cannot open --db {database}: folder {database.parent} does not exist; create it first" in unwrapped(
        result.output
    )
    assert not (tmp_path / "missing").exists()  # nothing made behind the user's back


def test_1_the_default_database_still_makes_its_folder(tmp_path, monkeypatch):
    monkeypatch.delenv(store_module.DB_ENVIRONMENT_VARIABLE)
    data = tmp_path / "user-data" / "devicebench"
    monkeypatch.setattr(platformdirs, "user_data_dir", lambda name: str(data))
    result = cli.invoke(app, ["history"])
    assert result.exit_code == 0, result.output
    assert (data / "results.sqlite").is_file()


# --- 2. an export that matches nothing -----------------------------------------------------------------------------


def test_2_an_export_that_matches_nothing_is_refused_and_leaves_the_file(two_machines, tmp_path):
    out = tmp_path / "runs.json"
    out.write_text("38 runs exported last week\n")
    result = cli.invoke(
        app, ["export", str(out), "--machine", "desktop", "--workload", "mnist-*", "--db", str(two_machines)]
    )
    assert result.exit_code == EXIT_USAGE, result.output
    assert unwrapped(result.output) == (
        f"error: nothing to export: no run stored in {two_machines} matches --workload 'mnist-*' --machine 'desktop'; "
        f"{out} was left as it is. Stored are machines: laptop, server; workloads: cifar10-mlp, mnist-cnn2"
    )
    assert out.read_text() == "38 runs exported last week\n"


def test_2_an_export_of_an_empty_database_writes_nothing(tmp_path):
    out = tmp_path / "runs.csv"
    result = cli.invoke(app, ["export", str(out), "--db", str(tmp_path / "empty.sqlite")])
    assert result.exit_code == EXIT_USAGE, result.output
    assert "nothing to export: no runs are stored in" in unwrapped(result.output)
    assert not out.exists()


def test_2_an_export_that_matches_writes_only_those_runs(two_machines, tmp_path):
    out = tmp_path / "runs.json"
    result = cli.invoke(app, ["export", str(out), "--machine", "server", "--db", str(two_machines)])
    assert result.exit_code == 0, result.output
    assert [run["run_id"] for result in json.loads(out.read_text())["results"] for run in result["runs"]] == [
        "r-server"
    ]


# --- 3. read-only and locked databases ------------------------------------------------------------------------------

NOBODY = 65534

# Runs the commands in one process as a user who may not write the database's folder, printing what each did. Root
# becomes nobody only once Python and devicebench are loaded: the interpreter may live in root's own folder.
_READ_AS_NOBODY = textwrap.dedent("""
    import json, os, sys
    from typer.testing import CliRunner
    from devicebench.cli import app
    import shutil
    database, out, user = sys.argv[1], sys.argv[2], int(sys.argv[3])
    commands = {"history": ["history"], "history --json": ["history", "--json"], "compare": ["compare"],
                "export": ["export", out]}
    if user >= 0:  # every command once, on a copy, loads the modules each imports when it runs
        warm = os.path.join(os.path.dirname(out), "warm.sqlite")
        shutil.copyfile(database, warm)
        for command in commands.values():
            CliRunner().invoke(app, [*command, "--db", warm])
        for path in (warm, out):
            os.remove(path)
        os.setgroups([])
        os.setgid(user)
        os.setuid(user)
    outcomes = {}
    for name, command in commands.items():
        result = CliRunner().invoke(app, [*command, "--db", database])
        failure = "" if result.exception is None or isinstance(result.exception, SystemExit) else \
            repr(result.exception)
        outcomes[name] = [result.exit_code, result.output + failure]
    print(json.dumps(outcomes))
""")


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder another user can reach (pytest's own are root's alone)."""
    with tempfile.TemporaryDirectory(prefix="devicebench-promises-") as name:
        folder = Path(name)
        folder.chmod(0o755)
        yield folder
        for path in folder.rglob("*"):
            if path.is_dir():
                path.chmod(0o755)


def read_as_a_user_who_cannot_write(folder: Path, database: Path, out: Path) -> dict[str, list]:
    """history, compare and export of `database` in `folder` made read-only, by a user who really cannot write it:
    this one, or, for root (who writes anywhere), the user nobody."""
    as_root = os.geteuid() == 0
    if as_root:
        for path in (folder, *folder.iterdir()):
            path.chmod(0o755 if path.is_dir() else 0o644)
        os.chown(out.parent, NOBODY, NOBODY)
    folder.chmod(0o555)
    environment = {
        **os.environ,
        "HOME": str(out.parent),
        "DEVICEBENCH_DB": str(database),
        "DEVICEBENCH_CALIBRATION_DIR": str(out.parent / "calibration"),
    }
    environment.update(
        {name: str(out.parent) for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    )
    completed = subprocess.run(
        [sys.executable, "-c", _READ_AS_NOBODY, str(database), str(out), str(NOBODY if as_root else -1)],
        capture_output=True,
        text=True,
        env=environment,
        timeout=300,
        cwd=out.parent,
    )
    assert completed.returncode == 0, completed.stderr
    return json.loads(completed.stdout.splitlines()[-1])


def test_3_commands_that_only_read_work_on_a_database_in_a_read_only_folder(shared_folder, make_result, make_run):
    folder, out = shared_folder / "db", shared_folder / "out" / "runs.json"
    folder.mkdir()
    out.parent.mkdir()
    database = folder / "results.sqlite"
    with Store(database) as store:
        store.import_results([make_result("laptop", [make_run("mnist-cnn2", run_id="r-laptop")])])
    before = sorted((path.name, path.read_bytes()) for path in folder.iterdir())
    outcomes = read_as_a_user_who_cannot_write(folder, database, out)
    for name, (code, output) in outcomes.items():
        assert code == 0, (name, output)
        assert "cannot be written" not in output
    assert "mnist-cnn2" in outcomes["history"][1] and "mnist-cnn2" in outcomes["compare"][1]
    assert [run["run_id"] for run in json.loads(outcomes["history --json"][1])["results"][0]["runs"]] == ["r-laptop"]
    assert json.loads(out.read_text())["results"][0]["runs"][0]["run_id"] == "r-laptop"
    folder.chmod(0o755)
    assert sorted((path.name, path.read_bytes()) for path in folder.iterdir()) == before  # not a byte changed


def test_3_a_read_only_database_that_needs_an_upgrade_says_so(tmp_path, monkeypatch):
    path = tmp_path / "old.sqlite"
    database = sqlite3.connect(path)
    migrations._create_tables(database)
    database.execute(f"PRAGMA application_id = {migrations.APPLICATION_ID}")
    database.execute("PRAGMA user_version = 1")
    database.commit()
    database.close()
    before = path.read_bytes()
    real_connect = sqlite3.connect  # as root writes anywhere, every connection to the file is made read-only
    monkeypatch.setattr(
        sqlite3,
        "connect",
        lambda database, *arguments, uri=False, **options: real_connect(
            database if uri else f"file:{database}?mode=ro", *arguments, uri=True, **options
        ),
    )
    result = cli.invoke(app, ["history", "--db", str(path)])
    assert result.exit_code == EXIT_USAGE, result.output
    assert (
        f"{path} holds schema 1 and must be upgraded to schema {len(migrations.MIGRATIONS)} before this "
        "devicebench can read it, but it cannot be written (it or its folder is read-only). To go on, make them "
        "writable and run the command again"
    ) in unwrapped(result.output)
    assert path.read_bytes() == before


def test_3_a_run_whose_database_stays_locked_is_refused_before_training(two_machines, monkeypatch):
    monkeypatch.setattr(store_errors, "BUSY_TIMEOUT_S", 0.2)
    monkeypatch.setattr("devicebench.runner.run", lambda *a, **k: pytest.fail("training started"))
    holder = sqlite3.connect(two_machines, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = cli.invoke(app, ["run", "mnist-cnn2", *TINY_RUN, "--db", str(two_machines)])
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert result.exit_code == EXIT_USAGE, result.output
    assert (
        f"could not check, before any work, that runs can be stored in {two_machines}: it is locked by another "
        "process, which has held it for more than 0.2 s"
    ) in unwrapped(result.output)
    assert "pass another --db" in unwrapped(result.output)


# --- 4. live runs seen from another PID namespace ------------------------------------------------------------------


def _a_dead_process_id() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize(
    ("namespace", "status"), [("pid:[1]", "running"), ("ours", "interrupted"), (None, "interrupted")]
)  # None: started before schema 10
def test_4_a_live_run_is_judged_only_from_its_own_pid_namespace(tmp_path, make_result, make_run, namespace, status):
    path = tmp_path / "results.sqlite"
    session = make_result("laptop", [])
    record = make_run(run_id="live", status="running", epoch_times_s=())
    with Store(path) as store:
        store.add_session(session)
        store.start_run(session.result_id, record)
    with sqlite3.connect(path) as database:  # the same host, a process id that means nothing here
        database.execute(
            "UPDATE live_runs SET process_id = ?, process_namespace = ?",
            (_a_dead_process_id(), store_module.pid_namespace() if namespace == "ours" else namespace),
        )
    database.close()
    with Store(path) as store:
        [result] = store.results()
    assert [run.status for run in result.runs] == [status]
    with sqlite3.connect(path) as database:
        left = database.execute("SELECT COUNT(*) FROM live_runs").fetchone()[0]
    database.close()
    assert left == (1 if status == "running" else 0)


def test_4_the_namespace_is_recorded_by_schema_10(tmp_path, make_result, make_run):
    assert migrations.MIGRATIONS[9] is migrations._add_process_namespace
    path = tmp_path / "results.sqlite"
    session = make_result("laptop", [])
    with Store(path) as store:
        store.add_session(session)
        store.start_run(session.result_id, make_run(run_id="live", status="running", epoch_times_s=()))
    with sqlite3.connect(path) as database:
        row = database.execute("SELECT process_id, process_namespace FROM live_runs").fetchone()
    database.close()
    expected = os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self/ns/pid") else None
    assert row == (os.getpid(), expected)


# --- 5. invisible characters in imported names ---------------------------------------------------------------------

HIDDEN = "\u202e\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069\u200b\u200c\u200d\ufeff\u2060"


def test_5_bidi_and_zero_width_characters_are_taken_out():
    assert printable(f"gpu{HIDDEN}-box") == "gpu-box"
    assert printable({"machine": ["a\u202eb\x1b[2Jc\td"]}) == {"machine": ["ab[2Jc\td"]}
    assert printable("Zürich 東京 ✓") == "Zürich 東京 ✓"  # visible text stays as it is


def test_5_an_imported_machine_name_reaches_the_terminal_without_them(tmp_path, make_result, make_run):
    result = make_result(
        f"lap\u202etop{HIDDEN}", [make_run("mnist-cnn2", run_id="r1")], hostname="host\u2066\u200b.local"
    )
    result.runs[0].workload = "mnist-cnn2\u202e"
    exported = tmp_path / "laptop.json"
    exported.write_text(
        json.dumps(
            {"schema_version": schema.SCHEMA_VERSION, "kind": "devicebench-export", "results": [result.to_dict()]}
        )
    )
    database = tmp_path / "results.sqlite"
    assert cli.invoke(app, ["import", str(exported), "--db", str(database)]).exit_code == 0
    shown = cli.invoke(app, ["history", "--db", str(database)])
    assert shown.exit_code == 0, shown.output
    assert "laptop" in shown.output and "mnist-cnn2" in shown.output
    assert not set(HIDDEN) & set(shown.output)
    with Store(database) as store:
        [stored] = store.results()
    assert (stored.machine["machine_name"], stored.machine["hostname"], stored.runs[0].workload) == (
        "laptop",
        "host.local",
        "mnist-cnn2",
    )


# --- 6. HTTPS only, redirects included -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("original", "target", "followed"),
    [
        ("https://example.org/mnist.gz", "http://example.org/mnist.gz", False),
        ("https://example.org/mnist.gz", "ftp://example.org/mnist.gz", False),
        ("https://example.org/mnist.gz", "https://mirror.example.net/mnist.gz", True),
        ("http://127.0.0.1:8000/mnist.gz", "http://127.0.0.1:8000/other.gz", True),  # never HTTPS to begin with
    ],
)
def test_6_a_redirect_is_followed_only_from_https_to_https(original, target, followed):
    handler = HttpsOnlyRedirects()
    request = urllib.request.Request(original, headers={"User-Agent": "devicebench"})
    if followed:
        assert handler.redirect_request(request, io.BytesIO(), 302, "Found", {}, target).full_url == target
        return
    with pytest.raises(InsecureRedirect) as caught:
        handler.redirect_request(request, io.BytesIO(), 302, "Found", {}, target)
    assert str(caught.value.reason) == (
        f"redirected (HTTP 302) to {target}, which is not HTTPS: refused, since devicebench downloads over HTTPS only"
    )


class _PlainHttps(urllib.request.HTTPSHandler):
    """Answers https:// URLs over plain HTTP, so that a loopback server can play an HTTPS mirror in a test."""

    def https_open(self, req):
        import http.client

        return self.do_open(http.client.HTTPConnection, req)


class _Redirecting(BaseHTTPRequestHandler):
    """/start redirects to the plain HTTP /file, which serves the file's bytes."""

    requested: list[str] = []
    body = b"the real bytes"

    def do_GET(self) -> None:  # the name http.server dispatches GET requests to
        _Redirecting.requested.append(self.path)
        if self.path == "/start":
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_address[1]}/file")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, format: str, *args: object) -> None:  # the base class's signature
        pass


def test_6_a_download_redirected_from_https_to_http_is_refused(tmp_path, monkeypatch):
    import hashlib

    _Redirecting.requested = []
    monkeypatch.setattr(connection, "OPENER", urllib.request.build_opener(HttpsOnlyRedirects, _PlainHttps))
    with serving(_Redirecting) as base_url:
        url = base_url.replace("http://", "https://", 1) + "start"
        remote = RemoteFile("data.bin", urls=(url,), checksum=f"sha256:{hashlib.sha256(_Redirecting.body).hexdigest()}")
        with pytest.raises(DataUnavailable) as caught:
            download.fetch(remote, tmp_path / "data", progress=False)
    assert caught.value.failures == (
        (
            url,
            f"redirected (HTTP 302) to {base_url}file, which is not "
            "HTTPS: refused, since devicebench downloads over HTTPS only",
        ),
    )
    assert _Redirecting.requested == ["/start"]  # the plain HTTP URL was never asked for
    assert list((tmp_path / "data").iterdir()) == []
