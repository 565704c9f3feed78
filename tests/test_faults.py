"""I/O faults on the way to the disk: downloads cut off midway, a wrong checksum, a full disk, read-only folders,
and a results database that is full, read-only or locked by another process.

Every fault is made for real where a test can (a server that drops the connection, SQLite's own "disk is full" from a
page limit, a second connection holding the write lock) and simulated by monkeypatching only where it cannot (no
test can fill the machine's disk, and root writes into read-only folders).

    python -m pytest tests/test_faults.py -q
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import numpy as np
import pytest
from http_fixtures import StatefulHTTPServer, serving
from typer.testing import CliRunner

from devicebench.cli import EXIT_FAILED_RUN, app
from devicebench.data import DataUnavailable, download
from devicebench.data.download import RemoteFile, fetch
from devicebench.recording import StoreReporter
from devicebench.results import store_errors
from devicebench.results.store import Store
from devicebench.results.store_errors import StoreError

BODY = np.random.default_rng(9).integers(0, 256, size=3 * 2**20 + 77, dtype=np.uint8).tobytes()  # 3 MiB: 4 reads
NAME = "payload.bin"


@pytest.fixture(autouse=True)
def no_pause_between_attempts(monkeypatch):
    monkeypatch.setattr(download, "RETRY_PAUSE_S", 0.0)


def remote_at(*urls: str, content: bytes = BODY) -> RemoteFile:
    return RemoteFile(
        NAME, urls=urls, checksum=f"sha256:{hashlib.sha256(content).hexdigest()}", size_bytes=len(content)
    )


def files_in(folder: Path) -> list[str]:
    """Every name in `folder`, hidden temporary files included."""
    return sorted(path.name for path in folder.iterdir()) if folder.exists() else []


def unwrapped(text: str) -> str:
    """`text` with rich's line wrapping undone: every run of whitespace becomes one space."""
    return " ".join(text.split())


# --- a server that cuts transfers off, and honours Range requests ----------------------------------------------------


@dataclass
class CuttingServer:
    """Serves BODY at /payload.bin; the first `cuts_left` responses stop after half of what they announce.

    A request `Range: bytes=N-` gets 206 and the bytes from N on, unless `honours_ranges` is off (then 200 and all).
    """

    cuts_left: int
    honours_ranges: bool = True
    ranges_asked: list[str | None] = field(default_factory=list)  # each request's Range header, None without one
    url: str = ""


class _CuttingHandler(BaseHTTPRequestHandler):
    server: StatefulHTTPServer

    def do_GET(self) -> None:  # the name http.server dispatches GET requests to
        state = self.server.state
        asked = self.headers.get("Range")
        state.ranges_asked.append(asked)
        start = int(asked.removeprefix("bytes=").removesuffix("-")) if asked and state.honours_ranges else 0
        body = BODY[start:]
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(BODY) - 1}/{len(BODY)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if state.cuts_left > 0:
            state.cuts_left -= 1
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
        else:
            self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # the base class's signature
        pass


@pytest.fixture
def cutting_server() -> Iterator[CuttingServer]:
    state = CuttingServer(cuts_left=1)
    with serving(_CuttingHandler, state) as base_url:
        state.url = base_url + NAME
        yield state


# --- downloads cut off midway ---------------------------------------------------------------------------------------


def test_a_download_cut_off_once_resumes_from_the_bytes_it_has(cutting_server, tmp_path):
    cache = tmp_path / "cache"
    path = fetch(remote_at(cutting_server.url), cache, progress=False)
    assert path.read_bytes() == BODY and files_in(cache) == [NAME]
    first, second = cutting_server.ranges_asked
    assert first is None
    resumed_at = int(re.fullmatch(r"bytes=(\d+)-", second).group(1))
    assert 0 < resumed_at <= len(BODY) // 2  # what the cut attempt delivered, not asked for again


def test_a_server_that_ignores_ranges_is_read_again_from_the_start(cutting_server, tmp_path):
    cutting_server.honours_ranges = False
    cache = tmp_path / "cache"
    path = fetch(remote_at(cutting_server.url), cache, progress=False)
    assert path.read_bytes() == BODY and files_in(cache) == [NAME]  # the half kept from the cut was not doubled
    assert len(cutting_server.ranges_asked) == 2 and cutting_server.ranges_asked[1] is not None


def test_a_download_cut_off_every_time_gives_up_and_says_where_to_put_the_file(cutting_server, tmp_path):
    cutting_server.cuts_left = 1000
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_at(cutting_server.url), cache, progress=False)
    message = str(caught.value)
    attempts = download.DOWNLOAD_ATTEMPTS
    assert re.search(
        rf"{re.escape(cutting_server.url)}: truncated: received \d+ of {len(BODY)} bytes "
        rf"\(gave up after {attempts} attempts\)",
        message,
    )
    assert f"put it in folder {cache} as file {NAME}" in message
    assert len(cutting_server.ranges_asked) == attempts  # bounded
    offsets = [int(asked.removeprefix("bytes=").removesuffix("-")) for asked in cutting_server.ranges_asked[1:]]
    assert offsets == sorted(offsets) and offsets[0] > 0  # each attempt took up where the one before stopped
    assert files_in(cache) == []  # neither a file that passes as complete nor a partial one


def test_a_cut_that_brings_no_bytes_is_not_retried(loopback_server, tmp_path):
    empty_half = tmp_path / "one-byte.bin"
    empty_half.write_bytes(b"x")  # half of one byte is nothing: the server sends the headers and hangs up
    url = loopback_server.publish(empty_half)
    loopback_server.truncate(empty_half.name)
    remote = RemoteFile(empty_half.name, urls=(url,), checksum=f"sha256:{hashlib.sha256(b'x').hexdigest()}")
    with pytest.raises(DataUnavailable, match=r"truncated: received 0 of 1 bytes$|truncated: received 0 of 1 bytes\n"):
        fetch(remote, tmp_path / "cache", progress=False)
    assert loopback_server.requested == [empty_half.name]  # a server that sends nothing would only do it again
    assert files_in(tmp_path / "cache") == []


# --- checksums --------------------------------------------------------------------------------------------------------


def test_a_checksum_mismatch_deletes_the_download_and_says_so(loopback_server, tmp_path):
    served = tmp_path / NAME
    served.write_bytes(BODY)
    url = loopback_server.publish(served)
    wrong = bytes(len(BODY))  # the right size, so only the checksum can tell
    loopback_server.serve_wrong_bytes(NAME, wrong)
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_at(url), cache, progress=False)
    message = str(caught.value)
    assert message.startswith(f"could not download {NAME} ")
    assert (
        f"checksum mismatch: expected sha256:{hashlib.sha256(BODY).hexdigest()}, got "
        f"sha256:{hashlib.sha256(wrong).hexdigest()}; the downloaded file was deleted"
    ) in message
    assert files_in(cache) == []


def test_a_corrupt_cached_file_is_deleted_even_when_no_mirror_can_replace_it(dead_base_url, tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / NAME).write_bytes(BODY[:-1] + b"!")  # one byte wrong
    with (
        pytest.warns(UserWarning, match=rf"{re.escape(str(cache / NAME))} is corrupt .*; deleted it"),
        pytest.raises(DataUnavailable, match="connection refused"),
    ):
        fetch(remote_at(dead_base_url + NAME), cache, progress=False)
    assert files_in(cache) == []  # it can never be taken for the real file later


# --- full and read-only data folders ---------------------------------------------------------------------------------


class FillingDisk:
    """A file on a disk with `free_bytes` left: the write that needs more fails as a full disk's write does."""

    def __init__(self, file, free_bytes: int) -> None:
        self.file = file
        self.free_bytes = free_bytes

    def write(self, data: bytes) -> int:
        if len(data) > self.free_bytes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.free_bytes -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> FillingDisk:
        return self

    def __exit__(self, *exception: object) -> None:
        self.file.close()


def test_a_disk_that_fills_up_mid_download_stops_it_and_says_the_disk_is_full(loopback_server, monkeypatch, tmp_path):
    served = tmp_path / NAME
    served.write_bytes(BODY)
    first, second = loopback_server.publish(served), loopback_server.url("mirror-copy.bin")
    real_fdopen = os.fdopen
    monkeypatch.setattr(os, "fdopen", lambda handle, mode: FillingDisk(real_fdopen(handle, mode), 2**20 + 10))
    cache = tmp_path / "cache"
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_at(first, second), cache, progress=False)
    message = str(caught.value)
    assert (
        f"the disk holding the data folder {cache} is full (No space left on device); free some space there, "
        "or choose another folder with --data-dir or $DEVICEBENCH_DATA"
    ) in message
    assert loopback_server.requested == [NAME]  # the second mirror would fill the same disk: not tried
    assert files_in(cache) == []  # the partial file was deleted, and nothing is at the final path


def read_only(folder: Path) -> bool:
    """Make `folder` read-only; whether that stops this process writing in it (root writes anyway)."""
    folder.chmod(0o555)
    probe = folder / ".write-probe"
    try:
        probe.write_bytes(b"")
    except PermissionError:
        return True
    probe.unlink()
    return False


@pytest.fixture
def read_only_cache(tmp_path, monkeypatch) -> Iterator[Path]:
    """An existing, read-only cache folder; as root, creating or deleting files in it fails as it would for a user."""
    cache = tmp_path / "cache"
    cache.mkdir()
    if not read_only(cache):
        denied = OSError(errno.EACCES, os.strerror(errno.EACCES))
        real_mkstemp, real_unlink = tempfile.mkstemp, Path.unlink

        def mkstemp(*arguments, dir=None, **options):  # noqa: A002 - tempfile's own parameter name
            if Path(dir) == cache:
                raise PermissionError(*denied.args)
            return real_mkstemp(*arguments, dir=dir, **options)

        def unlink(path: Path, missing_ok: bool = False) -> None:
            if path.parent == cache:
                raise PermissionError(*denied.args)
            real_unlink(path, missing_ok=missing_ok)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        monkeypatch.setattr(Path, "unlink", unlink)
    yield cache
    cache.chmod(0o755)


def test_a_read_only_cache_folder_is_named_with_what_to_do(loopback_server, read_only_cache, tmp_path):
    served = tmp_path / NAME
    served.write_bytes(BODY)
    url = loopback_server.publish(served)
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_at(url), read_only_cache, progress=False)
    assert (
        f"{url}: not downloaded: the data folder {read_only_cache} cannot be written (Permission denied); "
        "choose another with --data-dir or $DEVICEBENCH_DATA"
    ) in str(caught.value)
    assert loopback_server.requested == []  # nothing downloaded that could not be kept
    assert files_in(read_only_cache) == []


def test_a_corrupt_file_in_a_read_only_cache_is_refused_clearly(dead_base_url, read_only_cache):
    corrupt = read_only_cache / NAME
    read_only_cache.chmod(0o755)
    corrupt.write_bytes(b"half a download")
    read_only_cache.chmod(0o555)
    with pytest.raises(DataUnavailable) as caught:
        fetch(remote_at(dead_base_url + NAME), read_only_cache, progress=False)
    message = str(caught.value)
    assert f"{corrupt} is corrupt (expected sha256:{hashlib.sha256(BODY).hexdigest()}, found sha256:" in message
    assert (
        f"and cannot be deleted: the data folder {read_only_cache} cannot be written (Permission denied); "
        "choose another with --data-dir"
    ) in message


# --- the results database: full, read-only, locked ----------------------------------------------------------------


@pytest.fixture
def stored(tmp_path, make_result, make_run):
    """A database holding one earlier session; its path and what it reads back as."""
    path = tmp_path / "db" / "results.sqlite"
    with Store(path) as store:
        store.import_result(make_result("laptop", [make_run()]))
        before = [result.to_dict() for result in store.results()]
    return path, before


def assert_intact(path: Path, before: list[dict]) -> None:
    """The file passes SQLite's own check and still holds exactly the sessions it held `before`."""
    with sqlite3.connect(path) as database:
        assert database.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    database.close()
    with Store(path) as store:
        assert [result.to_dict() for result in store.results()] == before


def bulky_result(make_result, make_run):
    """A session whose rows need new pages in the file, so that a full disk cannot hide in a page's free space."""
    result = make_result("server", [make_run(device="cuda:0")])
    result.config["notes"] = "x" * 100_000
    return result


def connect_on_a_full_disk(monkeypatch) -> None:
    """Every SQLite connection opened from now on finds the disk full: the file may not grow by one page, which is
    what SQLite's own max_page_count enforces, with the same error (SQLITE_FULL) as a disk with no space left."""
    real_connect = sqlite3.connect

    def connect(*arguments, **options):
        connection = real_connect(*arguments, **options)
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
        connection.execute(f"PRAGMA max_page_count = {pages}")
        return connection

    monkeypatch.setattr(sqlite3, "connect", connect)


def test_a_full_disk_keeps_the_database_intact_and_says_so(stored, make_result, make_run, monkeypatch):
    path, before = stored
    result = bulky_result(make_result, make_run)
    connect_on_a_full_disk(monkeypatch)
    with Store(path) as store, pytest.raises(StoreError) as caught:
        store.add_session(result)
    assert str(caught.value) == (
        f"could not store session {result.result_id} in {path}: the disk holding it is full (database or disk is "
        "full); the file is unchanged, with everything stored in it before. To go on, free some space on that disk, "
        "or pass another --db (or set DEVICEBENCH_DB) to keep results elsewhere"
    )
    monkeypatch.undo()
    assert_intact(path, before)


def test_a_full_disk_during_a_run_stops_the_storing_not_the_run(stored, make_result, make_run, monkeypatch):
    path, before = stored
    result = bulky_result(make_result, make_run)
    connect_on_a_full_disk(monkeypatch)
    with Store(path) as store:
        reporter = StoreReporter(store)
        reporter.session_started(result)  # fails: kept in `failure`, not raised into the training loop
        record = result.runs[0]
        reporter.run_started(record)
        reporter.epoch_finished(record, record.epochs[0])
        reporter.run_finished(record)
    assert isinstance(reporter.failure, StoreError) and "the disk holding it is full" in str(reporter.failure)
    monkeypatch.undo()
    assert_intact(path, before)  # nothing half-written by the writes that followed the failure


class CommitFailsOnce(sqlite3.Connection):
    """A connection whose first COMMIT fails, leaving the transaction open, as SQLite's COMMIT can on a full disk."""

    failed = False

    def execute(self, sql, *parameters):
        if sql == "COMMIT" and not CommitFailsOnce.failed:
            CommitFailsOnce.failed = True
            raise sqlite3.OperationalError("database or disk is full")
        return super().execute(sql, *parameters)


def test_a_failed_commit_is_rolled_back_and_the_next_write_works(stored, make_result, make_run, monkeypatch):
    path, before = stored
    real_connect = sqlite3.connect
    monkeypatch.setattr(
        sqlite3, "connect", lambda *arguments, **options: real_connect(*arguments, factory=CommitFailsOnce, **options)
    )
    monkeypatch.setattr(CommitFailsOnce, "failed", False)
    lost, kept = make_result("server", [make_run()]), make_result("desktop", [make_run()])
    with Store(path) as store:
        with pytest.raises(StoreError, match=r"the disk holding it is full .*; the file is unchanged"):
            store.add_session(lost)
        store.add_session(kept)  # the failed transaction is not still open on the connection
    monkeypatch.undo()
    with sqlite3.connect(path) as database:
        stored_ids = [row[0] for row in database.execute("SELECT result_id FROM sessions ORDER BY rowid")]
    database.close()
    assert stored_ids == [before[0]["result_id"], kept.result_id]  # the one whose COMMIT failed is not there


@pytest.fixture
def read_only_database_folder(stored, monkeypatch) -> Iterator[Path]:
    """The stored database's folder, read-only; as root, SQLite opens files there read-only as it would for a user."""
    path, _ = stored
    folder = path.parent
    if not read_only(folder):
        real_connect = sqlite3.connect

        def connect(database, *arguments, **options):
            if Path(database).parent == folder:
                return real_connect(f"file:{database}?mode=ro", *arguments, uri=True, **options)
            return real_connect(database, *arguments, **options)

        monkeypatch.setattr(sqlite3, "connect", connect)
    yield folder
    folder.chmod(0o755)


@pytest.mark.parametrize("filename", ["results.sqlite", "new.sqlite"])
def test_a_read_only_database_folder_is_named_with_what_to_do(
    stored, read_only_database_folder, make_result, make_run, monkeypatch, filename
):
    path = read_only_database_folder / filename
    # a user may find out on opening it or on the first write: either says why
    with pytest.raises(StoreError) as caught, Store(path) as store:
        store.add_session(make_result("server", [make_run()]))
    message = str(caught.value)
    assert str(path) in message
    assert f"it or its folder {read_only_database_folder} cannot be written" in message
    assert "make them writable, or pass another --db (or set DEVICEBENCH_DB)" in message
    monkeypatch.undo()
    read_only_database_folder.chmod(0o755)
    assert_intact(*stored)


def test_a_folder_given_as_the_database_is_named_as_a_folder(tmp_path):
    with pytest.raises(StoreError) as caught:
        Store(tmp_path)
    assert str(caught.value) == (
        f"cannot open the results database {tmp_path}: it is a folder, not a database file "
        "(unable to open database file). To go on, pass another --db (or set DEVICEBENCH_DB) "
        "to keep results elsewhere"
    )


@pytest.fixture
def locked(stored, monkeypatch) -> Iterator[sqlite3.Connection]:
    """The stored database with another process's write lock on it, and a busy timeout short enough for a test."""
    monkeypatch.setattr(store_errors, "BUSY_TIMEOUT_S", 0.2)
    path, _ = stored
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    yield holder
    holder.close()


def test_a_database_locked_past_the_busy_timeout_fails_clearly_then_works_once_released(
    stored, locked, make_result, make_run
):
    path, before = stored
    result = make_result("server", [make_run()])
    with Store(path) as store:
        with pytest.raises(StoreError) as caught:
            store.add_session(result)
        assert str(caught.value) == (
            f"could not store session {result.result_id} in {path}: it is locked by another process, which has held "
            "it for more than 0.2 s (database is locked); the file is unchanged, with everything stored in it "
            "before. To go on, close the program that has it open (another devicebench writing to it, or a database "
            "browser) or wait for it to finish, then try again; or pass another --db (or set DEVICEBENCH_DB) to keep "
            "results elsewhere"
        )
        locked.execute("ROLLBACK")  # the other process is done
        store.import_result(result)
    assert_intact(path, before + [result.to_dict()])


def test_a_run_whose_database_is_locked_while_it_trains_trains_on_and_says_it_could_not_store(
    stored, make_result, make_run, monkeypatch
):
    """A lock held before the run refuses it before training (tests/test_promises.py); one taken by another
    process once training has begun stops the storing, never the training."""
    path, before = stored
    finished = make_result("laptop", [make_run(workload="cifar100-mlp")])
    monkeypatch.setattr(store_errors, "BUSY_TIMEOUT_S", 0.2)
    locked = sqlite3.connect(path, isolation_level=None)

    def run(
        plan, reporter, *, save_to=None, spent_before_s=0.0, fresh_repeat=None, fresh_from=1
    ):  # runner.run's events, without real training
        locked.execute("BEGIN EXCLUSIVE")  # after the check at start-up, as another process might
        reporter.session_started(finished)
        for record in finished.runs:
            reporter.run_started(record)
            for epoch in record.epochs:
                reporter.epoch_finished(record, epoch)
            reporter.run_finished(record)
        return finished

    monkeypatch.setattr("devicebench.runner.run", run)
    outcome = CliRunner().invoke(
        app, ["run", "cifar100-mlp", "--devices", "cpu", "--data", "synthetic", "--db", str(path)]
    )
    assert outcome.exit_code == EXIT_FAILED_RUN, outcome.output
    output = unwrapped(outcome.output)
    assert (
        f"could not store the runs in {path} (could not store session {finished.result_id} in {path}: it is "
        "locked by another process" in output
    )
    assert "then try again" in output and "the tables above hold every number" in output
    assert "cifar100-mlp" in outcome.stdout  # every event after the failure still reached the screen
    locked.execute("ROLLBACK")
    locked.close()
    assert_intact(path, before)


def replaying(result, *, after_epoch=lambda epoch: None, at_the_end=lambda: None):
    """A stand-in for runner.run that reports `result`'s events without training, calling `after_epoch(epoch)` as
    each epoch is stored and `at_the_end()` once every run has finished."""

    def run(plan, reporter, *, save_to=None, spent_before_s=0.0, fresh_repeat=None, fresh_from=1):
        reporter.session_started(result)
        for record in result.runs:
            reporter.run_started(record)
            for epoch in record.epochs:
                reporter.epoch_finished(record, epoch)
                after_epoch(epoch)
            reporter.run_finished(record)
        at_the_end()
        return result

    return run


def remove_folder(path: Path) -> None:
    for file in path.parent.iterdir():
        file.unlink()
    path.parent.rmdir()


def replace_file(path: Path) -> None:
    """Another database takes the path (a restore from a backup, a sync tool): the old file's inode is not it."""
    with Store(path.parent / "other.sqlite"):
        pass
    os.replace(path.parent / "other.sqlite", path)


@pytest.mark.parametrize("when", ["after_first_epoch", "after_the_run"])
@pytest.mark.parametrize("change", [remove_folder, replace_file], ids=["folder_deleted", "file_replaced"])
def test_a_database_deleted_or_replaced_mid_run_is_not_called_stored(
    stored, make_result, make_run, monkeypatch, tmp_path, when, change
):
    """SQLite writes on into the file it opened, whatever became of its path: every commit "succeeds". The run
    must not end with "Runs stored in" a file without them, and exit 0; the --json file is what was kept."""
    path, _ = stored
    out = tmp_path / "out.json"

    def after_epoch(epoch):
        if when == "after_first_epoch" and epoch.epoch == 1:
            change(path)

    run = replaying(
        make_result("laptop", [make_run(workload="cifar100-mlp")]),
        after_epoch=after_epoch,
        at_the_end=lambda: change(path) if when == "after_the_run" else None,
    )
    monkeypatch.setattr("devicebench.runner.run", run)
    outcome = CliRunner().invoke(
        app, ["run", "cifar100-mlp", "--devices", "cpu", "--data", "synthetic", "--db", str(path), "--json", str(out)]
    )
    assert outcome.exit_code == EXIT_FAILED_RUN, outcome.output
    output = unwrapped(outcome.output)
    assert "Runs stored in" not in output
    happened = "was deleted (or its folder was)" if change is remove_folder else "was replaced by another file"
    assert (
        f"could not store the runs in {path} (could not " in output
        and f"in {path}: the file {happened} while devicebench was writing to it" in output
    ), output
    assert "the tables above hold every number" in output and f"Results written to {out}" in output
    assert [run["workload"] for run in json.loads(out.read_text())["runs"]] == ["cifar100-mlp"]


def test_a_database_that_stays_put_is_still_stored_in(stored, make_result, make_run, monkeypatch):
    path, before = stored
    monkeypatch.setattr("devicebench.runner.run", replaying(make_result("laptop", [make_run(workload="cifar100-mlp")])))
    outcome = CliRunner().invoke(
        app, ["run", "cifar100-mlp", "--devices", "cpu", "--data", "synthetic", "--db", str(path)]
    )
    assert outcome.exit_code == 0, outcome.output
    assert f"Runs stored in {path}" in unwrapped(outcome.output)
    with Store(path) as store:
        assert len(store.results()) == len(before) + 1
