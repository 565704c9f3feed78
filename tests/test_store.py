"""The results store: round trips, filters, migrations, refusals of files not ours, concurrent writers, Ctrl-C.

python -m pytest tests/test_store.py -q
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import random
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from devicebench import planning, runner
from devicebench.config import RunConfig
from devicebench.recording import StoreReporter
from devicebench.results import migrations
from devicebench.results import store as store_module
from devicebench.results.migrations import APPLICATION_ID
from devicebench.results.schema import Result
from devicebench.results.store import Store, default_db_path
from devicebench.results.store_errors import StoreError
from devicebench.results.transfer import read_results_file, write_json_export

TINY = dict(devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1)


def replay(reporter: StoreReporter, result: Result) -> None:
    """Send `reporter` the events runner.run would send while producing `result`."""
    reporter.session_started(result)
    for finished in result.runs:
        live = dataclasses.replace(finished, status="running", error=None, epochs=[])
        reporter.run_started(live)
        for epoch in finished.epochs:
            live.epochs.append(epoch)
            reporter.epoch_finished(live, epoch)
        reporter.run_finished(finished)


def as_strict_json(result: Result, folder: Path) -> dict:
    """The result as `run --json` writes it: NaN and infinity become null."""
    path = folder / f"{result.result_id}.json"
    result.write_json(path)
    return json.loads(path.read_text())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_ids(results: list[Result]) -> list[list[str]]:
    return [[run.run_id for run in result.runs] for result in results]


# --- round trips ------------------------------------------------------------------------------------------------


def test_a_real_run_is_stored_as_it_happens_and_read_back_equal(tmp_path):
    with Store(tmp_path / "results.sqlite") as store:
        result = runner.run(
            planning.plan(RunConfig(workloads=("mnist-cnn2",), repeats=2, **TINY)), StoreReporter(store)
        )
        stored = store.results()
    assert [run.status for run in result.runs] == ["ok", "ok"]
    assert [stored_result.to_dict() for stored_result in stored] == [as_strict_json(result, tmp_path)]
    assert stored[0].runs[0].summary().steady_samples_per_s == result.runs[0].summary().steady_samples_per_s > 0


def test_every_field_survives_including_a_nan_loss_stored_as_null(tmp_path, make_result, make_run):
    diverged = make_run(status="diverged", error="loss became nan at step 41 (epoch 3)", diverged_at_step=41)
    diverged.epochs[2].train_loss = float("nan")
    diverged.epochs[2].test_loss = float("inf")
    diverged.epochs[1].rank_device_utilization_percent = [91.5, None]  # a list, kept as JSON text
    compiled = make_run(compile_recompiles=2, compile_graph_breaks=1)
    result = make_result("laptop", [compiled, diverged])
    with Store(tmp_path / "results.sqlite") as store:
        replay(StoreReporter(store), result)
        stored = store.results()
    assert [stored_result.to_dict() for stored_result in stored] == [as_strict_json(result, tmp_path)]
    assert stored[0].runs[1].epochs[2].train_loss is None and stored[0].runs[1].epochs[1].train_loss == 1.0
    assert stored[0].runs[1].epochs[1].rank_device_utilization_percent == [91.5, None]
    assert (stored[0].runs[0].compile_recompiles, stored[0].runs[0].compile_graph_breaks) == (2, 1)
    database = sqlite3.connect(tmp_path / "results.sqlite")
    assert database.execute("SELECT COUNT(*) FROM epochs WHERE train_loss IS NULL").fetchone() == (1,)


def test_each_epoch_is_visible_to_other_processes_the_moment_it_is_added(tmp_path, make_result, make_run):
    finished = make_run()
    result = make_result("laptop", [])
    live = dataclasses.replace(finished, status="running", epochs=[])
    with Store(tmp_path / "results.sqlite") as writer, Store(tmp_path / "results.sqlite") as reader:
        reporter = StoreReporter(writer)
        reporter.session_started(result)
        result.runs.append(live)
        reporter.run_started(live)
        for epoch in finished.epochs[:2]:
            live.epochs.append(epoch)
            reporter.epoch_finished(live, epoch)
        [seen] = reader.results()
        assert [(run.status, len(run.epochs)) for run in seen.runs] == [("running", 2)]
        assert seen.runs[0].summary().steady_epoch_time_s == 1.0


def test_an_interrupted_run_marks_its_session_interrupted(tmp_path, make_result, make_run):
    result = make_result("laptop", [make_run(status="interrupted", error="interrupted by the user")])
    with Store(tmp_path / "results.sqlite") as store:
        replay(StoreReporter(store), result)
        [stored] = store.results()
    assert stored.interrupted and stored.runs[0].status == "interrupted"


def test_a_failing_store_is_remembered_and_never_stops_the_run(tmp_path, make_result, make_run):
    store = Store(tmp_path / "results.sqlite")
    store.close()  # every write now fails
    reporter = StoreReporter(store)
    result = make_result("laptop", [make_run()])
    replay(reporter, result)
    assert isinstance(reporter.failure, StoreError)  # the first write's, kept; the later ones were not tried
    assert str(reporter.failure).startswith(f"could not store session {result.result_id} in {store.path}: ")


# --- import and export ------------------------------------------------------------------------------------------


def test_importing_twice_adds_nothing_the_second_time(tmp_path, make_result, make_run):
    result = make_result("server", [make_run(), make_run(device="cuda:0", repeat=1)])
    with Store(tmp_path / "results.sqlite") as store:
        assert store.import_result(result) == 2
        assert store.import_result(result) == 0
        assert [stored.to_dict() for stored in store.results()] == [as_strict_json(result, tmp_path)]


def test_an_export_imported_elsewhere_keeps_every_id_and_fingerprint(tmp_path, make_result, make_run):
    laptop = make_result("laptop", [make_run(started_utc="2026-03-01T10:00:00Z")], created_utc="2026-03-01T10:00:00Z")
    server = make_result(
        "server", [make_run(device="cuda:0", started_utc="2026-03-02T10:00:00Z")], created_utc="2026-03-02T10:00:00Z"
    )
    with Store(tmp_path / "a.sqlite") as first:
        replay(StoreReporter(first), laptop)
        replay(StoreReporter(first), server)
        exported = first.results()
    write_json_export(tmp_path / "export.json", exported)
    with Store(tmp_path / "b.sqlite") as second:
        assert second.import_results(read_results_file(tmp_path / "export.json")) == 2
        imported = second.results()
    assert [result.to_dict() for result in imported] == [result.to_dict() for result in exported]
    assert [result.result_id for result in imported] == [laptop.result_id, server.result_id]
    assert run_ids(imported) == run_ids([laptop, server])
    assert imported[1].machine == server.machine


def test_an_import_that_fails_midway_adds_nothing(tmp_path, make_result, make_run):
    good = make_result("laptop", [make_run()])
    orphan = make_result("server", [make_run()])
    orphan.machine = {}  # no machine id: its insert fails after the laptop's rows are written
    with Store(tmp_path / "results.sqlite") as store:
        with pytest.raises(KeyError):
            store.import_results([good, orphan])
        assert store.results() == []


# --- filters -----------------------------------------------------------------------------------------------------


@pytest.fixture
def two_machines(tmp_path, make_result, make_run) -> Store:
    laptop = make_result(
        "laptop",
        [
            make_run("mnist-cnn2", run_id="laptop-mnist", started_utc="2026-03-01T10:00:00Z"),
            make_run(
                "cifar10-mlp",
                run_id="laptop-cifar",
                started_utc="2026-03-01T10:05:00Z",
                status="failed",
                error="RuntimeError: boom",
            ),
        ],
        created_utc="2026-03-01T10:00:00Z",
    )
    server = make_result(
        "server",
        [
            make_run("mnist-cnn2", run_id="server-mnist-cpu", started_utc="2026-03-02T11:00:00Z"),
            make_run("mnist-cnn2", "cuda:0", run_id="server-mnist-gpu", started_utc="2026-03-02T11:10:00Z"),
            make_run(
                "mnist-cnn4",
                "cuda:0",
                run_id="server-cnn4-gpu",
                started_utc="2026-03-02T11:20:00Z",
                status="interrupted",
            ),
        ],
        created_utc="2026-03-02T11:00:00Z",
        hostname="ip-10-0-0-7",
    )
    store = Store(tmp_path / "results.sqlite")
    store.import_results([server, laptop])  # imported newest first: results() still lists the oldest first
    yield store
    store.close()


def test_results_come_oldest_session_first_with_runs_in_the_order_they_ran(two_machines):
    assert run_ids(two_machines.results()) == [
        ["laptop-mnist", "laptop-cifar"],
        ["server-mnist-cpu", "server-mnist-gpu", "server-cnn4-gpu"],
    ]


@pytest.mark.parametrize(
    "filters, expected",
    [
        ({"workload": "mnist-*"}, [["laptop-mnist"], ["server-mnist-cpu", "server-mnist-gpu", "server-cnn4-gpu"]]),
        ({"workload": "cifar10-mlp"}, [["laptop-cifar"]]),
        ({"workload": "resnet*"}, []),
        ({"machine": "server"}, [["server-mnist-cpu", "server-mnist-gpu", "server-cnn4-gpu"]]),
        ({"machine": "laptop.local"}, [["laptop-mnist", "laptop-cifar"]]),  # the hostname
        ({"machine": "ip-10-0-0"}, []),  # part of a hostname is not a hostname
        ({"status": "failed"}, [["laptop-cifar"]]),
        ({"last": 2}, [["server-mnist-gpu", "server-cnn4-gpu"]]),
        ({"last": 1, "machine": "laptop"}, [["laptop-cifar"]]),
        ({"last": 2, "workload": "mnist-cnn2", "status": "ok"}, [["server-mnist-cpu", "server-mnist-gpu"]]),
        ({"workload": "mnist-cnn2", "machine": "laptop", "status": "ok"}, [["laptop-mnist"]]),
    ],
)
def test_filters_keep_only_matching_runs_and_the_sessions_holding_them(two_machines, filters, expected):
    assert run_ids(two_machines.results(**filters)) == expected


def test_a_machine_is_found_by_a_prefix_of_its_id(two_machines, make_result):
    server_id = make_result("server").machine["machine_id"]
    [found] = two_machines.results(machine=server_id[:4])
    assert found.machine["machine_name"] == "server" and len(found.runs) == 3


# --- the file: schema, migrations, and files that are not ours ---------------------------------------------------


def test_a_new_database_is_versioned_marked_as_ours_and_in_wal_mode(tmp_path):
    path = tmp_path / "deep" / "folder" / "results.sqlite"  # missing folders are made
    Store(path).close()
    database = sqlite3.connect(path)
    assert database.execute("PRAGMA user_version").fetchone() == (len(migrations.MIGRATIONS),)
    assert database.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    assert database.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_an_empty_file_is_initialised(tmp_path, make_result, make_run):
    path = tmp_path / "results.sqlite"
    path.touch()
    with Store(path) as store:
        assert store.import_result(make_result("laptop", [make_run()])) == 1


def _add_note_column(connection: sqlite3.Connection) -> None:
    connection.execute("ALTER TABLE runs ADD COLUMN note TEXT NOT NULL DEFAULT 'from schema 1'")


def _broken_migration(connection: sqlite3.Connection) -> None:
    raise sqlite3.OperationalError("disk I/O error")


def test_a_new_migration_upgrades_the_file_and_keeps_the_data(tmp_path, make_result, make_run, monkeypatch):
    path = tmp_path / "results.sqlite"
    current = len(migrations.MIGRATIONS)
    with Store(path) as store:
        store.import_result(make_result("laptop", [make_run(), make_run(device="cuda:0")]))
        before = [result.to_dict() for result in store.results()]
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, _add_note_column])
    with Store(path) as store:
        assert [result.to_dict() for result in store.results()] == before
    database = sqlite3.connect(path)
    assert database.execute("PRAGMA user_version").fetchone() == (current + 1,)
    assert database.execute("SELECT note FROM runs").fetchall() == [("from schema 1",)] * 2


def test_a_failed_migration_rolls_back_every_step_of_it(tmp_path, make_result, make_run, monkeypatch):
    path = tmp_path / "results.sqlite"
    current = len(migrations.MIGRATIONS)
    with Store(path) as store:
        store.import_result(make_result("laptop", [make_run()]))
    monkeypatch.setattr(migrations, "MIGRATIONS", [*migrations.MIGRATIONS, _add_note_column, _broken_migration])
    with pytest.raises(StoreError, match=f"could not upgrade .* to schema {current + 2} .*disk I/O error.* unchanged"):
        Store(path)
    database = sqlite3.connect(path)
    assert database.execute("PRAGMA user_version").fetchone() == (current,)
    assert "note" not in [row[1] for row in database.execute("PRAGMA table_info(runs)")]
    assert database.execute("SELECT COUNT(*) FROM runs").fetchone() == (1,)


def test_a_database_from_a_newer_devicebench_is_refused_untouched(tmp_path, make_result, make_run):
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        store.import_result(make_result("laptop", [make_run()]))
    newer = len(migrations.MIGRATIONS) + 1
    database = sqlite3.connect(path)
    database.execute(f"PRAGMA user_version = {newer}")
    database.close()  # the last connection out moves everything from the WAL into the file itself
    before = digest(path)
    with pytest.raises(StoreError, match=rf"made by a newer devicebench \(schema {newer}\); upgrade devicebench"):
        Store(path)
    assert digest(path) == before


def _random_bytes(path: Path) -> None:
    path.write_bytes(random.Random(7).randbytes(8192))


def _sqlite_header_then_garbage(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + random.Random(7).randbytes(8192))


def _another_applications_tables(path: Path) -> None:
    with sqlite3.connect(path) as database:
        database.execute("CREATE TABLE customers (name TEXT)")
        database.execute("INSERT INTO customers VALUES ('Ada')")
    database.close()


def _another_application_id(path: Path) -> None:
    with sqlite3.connect(path) as database:
        database.execute("PRAGMA application_id = 1234")
        database.execute("CREATE TABLE runs (run_id TEXT)")  # a table of the same name does not make it ours
    database.close()


@pytest.mark.parametrize(
    "make_file, problem",
    [
        (_random_bytes, "not an SQLite file"),
        (_sqlite_header_then_garbage, "cannot be read as SQLite"),
        (_another_applications_tables, "another application .*tables: customers"),
        (_another_application_id, "another application .*application id 1234"),
    ],
)
def test_a_file_that_is_not_ours_is_refused_and_left_byte_for_byte(tmp_path, make_file, problem):
    path = tmp_path / "precious.sqlite"
    make_file(path)
    before = digest(path)
    with pytest.raises(StoreError, match=problem) as refusal:
        Store(path)
    assert str(path) in str(refusal.value) and "pass another --db" in str(refusal.value)
    assert digest(path) == before
    assert sorted(file.name for file in tmp_path.iterdir()) == ["precious.sqlite"]


def test_the_database_path_comes_from_the_argument_then_the_environment_then_the_user_data_folder(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("DEVICEBENCH_DB", str(tmp_path / "from-environment.sqlite"))
    assert default_db_path(tmp_path / "chosen.sqlite") == tmp_path / "chosen.sqlite"
    assert default_db_path() == tmp_path / "from-environment.sqlite"
    monkeypatch.delenv("DEVICEBENCH_DB")
    monkeypatch.setattr("platformdirs.user_data_dir", lambda name: f"/home/someone/.local/share/{name}")
    assert default_db_path() == Path("/home/someone/.local/share/devicebench/results.sqlite")


# --- several processes at once -----------------------------------------------------------------------------------


def _write_session(path: str, result: Result, start_together: multiprocessing.synchronize.Barrier) -> None:
    start_together.wait(timeout=60)  # seconds; both processes create the file and write in the same moments
    with Store(path) as store:
        replay(StoreReporter(store), result)


def test_two_processes_writing_at_once_both_keep_every_row(tmp_path, make_result, make_run):
    runs_each, epochs_each = 6, 5
    sessions = [
        make_result(
            name, [make_run(device=f"cuda:{index}", epoch_times_s=(1.0,) * epochs_each) for index in range(runs_each)]
        )
        for name in ("laptop", "server")
    ]
    path = tmp_path / "shared.sqlite"
    spawn = multiprocessing.get_context("spawn")  # fresh interpreters, as two `devicebench run`s would be
    start_together = spawn.Barrier(len(sessions))
    writers = [spawn.Process(target=_write_session, args=(str(path), session, start_together)) for session in sessions]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(timeout=120)
    assert [writer.exitcode for writer in writers] == [0, 0]
    with Store(path) as store:
        stored = store.results()
    assert sorted(result.machine["machine_name"] for result in stored) == ["laptop", "server"]
    assert sum(len(result.runs) for result in stored) == 2 * runs_each
    assert sum(len(run.epochs) for result in stored for run in result.runs) == 2 * runs_each * epochs_each
    by_id = {result.result_id: result.to_dict() for result in stored}
    assert all(by_id[session.result_id] == session.to_dict() for session in sessions)


# --- Ctrl-C ------------------------------------------------------------------------------------------------------


def _stored_epochs(path: Path) -> int:
    if not path.exists():
        return 0
    with Store(path) as store:
        return sum(len(run.epochs) for result in store.results() for run in result.runs)


def _run_until_an_epoch_is_stored(path: Path, *flags: str, **popen: object) -> subprocess.Popen:
    """A real `devicebench run` of 50 epochs, returned once the database holds its first finished epoch."""
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
        "20",
        "--max-eval-steps",
        "1",
        "--db",
        str(path),
        *flags,
    ]
    process = subprocess.Popen(command, **popen)
    for _ in range(600):  # polls of 0.05 s: at most 30 s for Python, torch and one epoch
        if _stored_epochs(path) >= 1 or process.poll() is not None:
            break
        time.sleep(0.05)
    if process.poll() is not None:
        pytest.fail("the run ended before it could be stopped")
    return process


@pytest.mark.slow
def test_ctrl_c_during_a_real_run_keeps_every_finished_epoch_and_marks_the_run_interrupted(tmp_path):
    path = tmp_path / "results.sqlite"
    process = _run_until_an_epoch_is_stored(path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 130, stderr
    printed = [int(number) for number in re.findall(r"^Epoch (\d+)/50 ", stderr, flags=re.MULTILINE)]
    with Store(path) as store:
        [result] = store.results()
    [run] = result.runs
    assert run.status == "interrupted" and result.interrupted
    stored = [epoch.epoch for epoch in run.epochs]
    assert 1 <= len(stored) < 50 and stored == list(range(1, len(stored) + 1))
    assert set(printed) <= set(stored) and len(printed) >= 1


def _schema_1_file(path: Path) -> None:
    """A results file as devicebench's first schema wrote it: its tables, one session, one run, two epochs."""
    database = sqlite3.connect(path)
    migrations._create_tables(database)
    database.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    database.execute("PRAGMA user_version = 1")
    machine = {"machine_id": "aaaa1111", "machine_name": "laptop", "hostname": "laptop-host"}
    database.execute("INSERT INTO machines VALUES ('aaaa1111', 'laptop')")
    database.execute(
        "INSERT INTO sessions VALUES ('s1', 'aaaa1111', 'laptop-host', '2026-01-01T00:00:00Z', '0.1.0', 0, ?, '{}')",
        (json.dumps(machine),),
    )
    settings = {
        "batch_size": 50,
        "epochs": 2,
        "max_steps": 5,
        "max_eval_steps": 1,
        "seed": 0,
        "threads": 2,
        "data_source": "synthetic",
    }
    database.execute(
        "INSERT INTO runs (run_id, result_id, position, workload, seed_experiment, device, device_name, "
        "repeat, started_utc, status, settings_json) VALUES ('r1', 's1', 0, 'mnist-cnn2', 'S1', 'cpu', "
        "'Some CPU', 0, '2026-01-01T00:00:00Z', 'ok', ?)",
        (json.dumps(settings),),
    )
    for epoch, seconds in ((1, 2.0), (2, 1.0)):
        database.execute(
            "INSERT INTO epochs (run_id, epoch, phase, steps, samples, train_time_s, samples_per_s, "
            "step_time_ms, train_loss, train_accuracy, eval_samples) VALUES "
            "('r1', ?, ?, 5, 250, ?, ?, ?, 1.0, 0.5, 50)",
            (epoch, "warmup" if epoch == 1 else "steady", seconds, 250 / seconds, seconds * 200),
        )
    database.commit()
    database.close()


def test_a_schema_1_file_upgrades_and_keeps_its_data(tmp_path):
    path = tmp_path / "results.sqlite"
    _schema_1_file(path)
    with Store(path) as store:
        [result] = store.results()
    [run] = result.runs
    assert (run.workload, run.status, [epoch.train_time_s for epoch in run.epochs]) == ("mnist-cnn2", "ok", [2.0, 1.0])
    assert run.epochs[1].process_cpu_percent is None and run.monitor_note is None  # unknown before schema 3
    assert run.summary().steady_samples_per_s == 250.0
    database = sqlite3.connect(path)
    assert database.execute("PRAGMA user_version").fetchone() == (len(migrations.MIGRATIONS),)
    assert database.execute("SELECT COUNT(*) FROM live_runs").fetchone() == (0,)


def test_a_schema_14_file_upgrades_with_no_thread_cpu_time_and_a_new_run_keeps_its_own(tmp_path, make_result, make_run):
    """Schema 15 adds the training thread's CPU seconds of each epoch: unknown (NULL, None) for the epochs stored
    before, and stored and read back for a run stored after."""
    path = tmp_path / "results.sqlite"
    _schema_1_file(path)
    database = sqlite3.connect(path)
    for migration in migrations.MIGRATIONS[1:14]:  # as devicebench with schema 14, the newest before, left it
        migration(database)
    database.execute("PRAGMA user_version = 14")
    database.commit()
    assert "train_thread_cpu_s" not in [row[1] for row in database.execute("PRAGMA table_info(epochs)")]
    database.close()
    run = make_run(workload="cifar10-mlp")
    run.epochs[1].train_thread_cpu_s = 0.625
    with Store(path) as store:
        store.import_result(make_result("laptop", [run]))
        stored = {result.runs[0].workload: result for result in store.results()}
    old, new = stored["mnist-cnn2"], stored["cifar10-mlp"]
    assert [epoch.train_thread_cpu_s for epoch in old.runs[0].epochs] == [None, None]
    assert [epoch.train_thread_cpu_s for epoch in new.runs[0].epochs] == [None, 0.625, None]
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone() == (15,)


@pytest.mark.slow
def test_a_killed_run_is_closed_as_interrupted_with_its_finished_epochs(tmp_path):
    """SIGKILL gives the process no chance to say anything: the next opening of the store notices."""
    path = tmp_path / "results.sqlite"
    process = _run_until_an_epoch_is_stored(path, "--quiet", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    process.kill()
    process.wait(timeout=60)
    with Store(path) as store:
        [result] = store.results()
    [run] = result.runs
    assert run.status == "interrupted" and run.error == store_module.ABANDONED
    assert len(run.epochs) >= 1
    database = sqlite3.connect(path)
    assert database.execute("SELECT COUNT(*) FROM live_runs").fetchone() == (0,)


def test_a_run_still_being_written_is_left_alone(tmp_path, make_result, make_run):
    """A live process's run stays `running`: only runs whose process has died are closed."""
    path = tmp_path / "results.sqlite"
    result = make_result("laptop", [])
    with Store(path) as store:
        store.add_session(result)
        store.start_run(result.result_id, make_run(status="running", epoch_times_s=()))
    with Store(path) as store:  # reopening runs the check: this test's own process, alive, wrote the run
        [stored] = store.results()
    assert stored.runs[0].status == "running"
