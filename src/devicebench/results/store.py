"""The results store: every run in one SQLite file, written as it happens and read back as `Result`s.

A session (`Result`) is inserted when it starts, each run when it starts (status `running`), each epoch the moment it
finishes and the run again when it ends. Every write is its own committed transaction, so Ctrl-C or a crash keeps every
finished epoch. WAL mode and a busy timeout let several devicebench processes write to one file at once. A file that is
not ours (damaged, another application's, or made by a newer devicebench) is refused and never modified.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 5 && devicebench history
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import socket
import sqlite3
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from devicebench.errors import DevicebenchError
from devicebench.files import (
    DB_VARIABLE,
    UnusableFile,
    require_regular_file,
    user_folder,
)
from devicebench.results.schema import (
    SCHEMA_VERSION,
    EpochRecord,
    Result,
    RunRecord,
    finite_or_none,
)

DB_ENVIRONMENT_VARIABLE = DB_VARIABLE
APPLICATION_ID = 0x4476426E  # "DvBn" in ASCII: PRAGMA application_id, how our files tell themselves from others'
BUSY_TIMEOUT_S = 30.0  # how long a write waits for another process's write to finish before giving up
WAL_SWITCH_ATTEMPTS = 100  # about 5 s of retries at a random 0.01-0.1 s apart
SQLITE_HEADER = b"SQLite format 3\x00"  # the first 16 bytes of every SQLite database file
_WHAT_TO_DO = f"pass another --db (or set {DB_ENVIRONMENT_VARIABLE}) to keep results elsewhere"
_DAMAGED = (
    "restore it from a backup, or save what can still be read with `sqlite3 FILE .recover` into a new "
    f"file; or {_WHAT_TO_DO}"
)


class StoreError(DevicebenchError, RuntimeError):
    """The database file cannot be used: it says which file, what is wrong with it, and what to do."""


class UnreadableRun(StoreError):
    """A run that reading it back would refuse; it was not stored."""


def _file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def default_db_path(db: str | Path | None = None) -> Path:
    """`db` when given, else $DEVICEBENCH_DB, else results.sqlite in the user's data folder."""
    chosen = db or os.environ.get(DB_ENVIRONMENT_VARIABLE, "").strip()
    if chosen:
        return Path(chosen).expanduser()
    return user_folder("data", "the results database") / "results.sqlite"


# --- the schema and its migrations -----------------------------------------------------------------------------

# Stored as real columns named as the dataclass fields (units included); settings and fingerprints are JSON text
RUN_COLUMNS = tuple(field.name for field in dataclasses.fields(RunRecord) if field.name not in ("settings", "epochs"))
EPOCH_COLUMNS = tuple(field.name for field in dataclasses.fields(EpochRecord))
SESSION_COLUMNS = (
    "result_id",
    "machine_id",
    "hostname",
    "created_utc",
    "devicebench_version",
    "interrupted",
    "machine_json",
    "config_json",
)


def _create_tables(connection: sqlite3.Connection) -> None:
    """Schema 1. A migration is a snapshot: it lists its columns rather than deriving them from today's dataclasses."""
    statements = (
        """CREATE TABLE machines (
            machine_id TEXT PRIMARY KEY,  -- environment.machine_id(): stays the same for one machine
            machine_name TEXT NOT NULL
        )""",
        """CREATE TABLE sessions (
            result_id TEXT PRIMARY KEY,
            machine_id TEXT NOT NULL REFERENCES machines (machine_id),
            hostname TEXT NOT NULL,
            created_utc TEXT NOT NULL,
            devicebench_version TEXT NOT NULL,
            interrupted INTEGER NOT NULL,
            machine_json TEXT NOT NULL,  -- the whole fingerprint as it was for this session (threads, versions)
            config_json TEXT NOT NULL
        )""",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            result_id TEXT NOT NULL REFERENCES sessions (result_id),
            position INTEGER NOT NULL,  -- order within its session
            workload TEXT NOT NULL,
            seed_experiment TEXT NOT NULL,
            device TEXT NOT NULL,
            device_name TEXT NOT NULL,
            repeat INTEGER NOT NULL,
            started_utc TEXT NOT NULL,
            status TEXT NOT NULL,
            error TEXT,
            parameter_count INTEGER,
            model_build_s REAL,
            end_to_end_s REAL,
            diverged_at_step INTEGER,
            target_accuracy REAL,
            time_to_target_train_s REAL,
            time_to_target_wall_s REAL,
            peak_device_memory_mib REAL,
            peak_rss_mib REAL,
            energy_j REAL,
            settings_json TEXT NOT NULL
        )""",
        """CREATE TABLE epochs (
            run_id TEXT NOT NULL REFERENCES runs (run_id),
            epoch INTEGER NOT NULL,
            phase TEXT NOT NULL,
            steps INTEGER NOT NULL,
            samples INTEGER NOT NULL,
            train_time_s REAL,
            samples_per_s REAL,
            step_time_ms REAL,
            train_loss REAL,  -- NULL where the loss was NaN or infinite, as in the JSON files
            train_accuracy REAL,
            eval_time_s REAL,
            eval_samples INTEGER NOT NULL,
            test_loss REAL,
            test_accuracy REAL,
            PRIMARY KEY (run_id, epoch)
        )""",
        "CREATE INDEX sessions_by_machine ON sessions (machine_id)",
        "CREATE INDEX sessions_by_creation ON sessions (created_utc)",
        "CREATE INDEX runs_by_session ON runs (result_id, position)",
        "CREATE INDEX runs_by_workload ON runs (workload)",
        "CREATE INDEX runs_by_device ON runs (device)",
        "CREATE INDEX runs_by_status ON runs (status)",
        "CREATE INDEX runs_by_start ON runs (started_utc)",
    )
    for statement in statements:  # one by one: executescript() would commit the migration's transaction midway
        connection.execute(statement)


def _add_live_runs(connection: sqlite3.Connection) -> None:
    """Schema 2: which process on which host is writing each unfinished run, so that a run whose process died
    without a word (killed, crashed, power lost) can be closed as interrupted instead of `running` forever."""
    connection.execute("""CREATE TABLE live_runs (
        run_id TEXT PRIMARY KEY REFERENCES runs (run_id),
        hostname TEXT NOT NULL,
        process_id INTEGER NOT NULL
    )""")


def _add_usage(connection: sqlite3.Connection) -> None:
    """Schema 3: what the background monitor saw in each epoch's training, and why the device went unwatched."""
    for column in ("process_cpu_percent", "device_utilization_percent", "device_power_mean_w", "device_energy_j"):
        connection.execute(f"ALTER TABLE epochs ADD COLUMN {column} REAL")
    connection.execute("ALTER TABLE runs ADD COLUMN monitor_note TEXT")


def _add_input_diagnosis(connection: sqlite3.Connection) -> None:
    """Schema 4: how long each epoch waited for its batches, and the run's input-bound or compute-bound verdict."""
    connection.execute("ALTER TABLE epochs ADD COLUMN input_wait_s REAL")
    connection.execute("ALTER TABLE runs ADD COLUMN input_verdict TEXT")
    connection.execute("ALTER TABLE runs ADD COLUMN input_diagnosis TEXT")


def _add_flops(connection: sqlite3.Connection) -> None:
    """Schema 5: FLOPs per training sample, from which achieved TFLOP/s follow."""
    connection.execute("ALTER TABLE runs ADD COLUMN flops_per_sample REAL")


def _add_tuning(connection: sqlite3.Connection) -> None:
    """Schema 6: tuned mode's trial and the calibrated peak that MFU is measured against."""
    connection.execute("ALTER TABLE runs ADD COLUMN tuning_note TEXT")
    connection.execute("ALTER TABLE runs ADD COLUMN peak_tflops REAL")


def _add_ranks(connection: sqlite3.Connection) -> None:
    """Schema 7: data-parallel runs: the fastest rank's time beside the slowest's (the epoch's own time)."""
    connection.execute("ALTER TABLE epochs ADD COLUMN fastest_rank_train_time_s REAL")


def _add_compile_and_rank_figures(connection: sqlite3.Connection) -> None:
    """Schema 8: what torch.compile really did (recompiles, graph breaks), and each rank's GPU utilisation."""
    connection.execute("ALTER TABLE runs ADD COLUMN compile_recompiles INTEGER")
    connection.execute("ALTER TABLE runs ADD COLUMN compile_graph_breaks INTEGER")
    connection.execute("ALTER TABLE epochs ADD COLUMN rank_device_utilization_percent TEXT")  # a JSON list


def _add_plausibility(connection: sqlite3.Connection) -> None:
    """Schema 9: what in a run's figures breaks physics or needs explaining (results/plausibility.py)."""
    connection.execute("ALTER TABLE runs ADD COLUMN plausibility_flags TEXT")
    connection.execute("ALTER TABLE runs ADD COLUMN plausibility_note TEXT")


def _add_process_namespace(connection: sqlite3.Connection) -> None:
    """Schema 10: the PID namespace of each live run's process: a container sharing the host's name (or the file)
    has process ids of its own, so a run is judged abandoned only from its own namespace."""
    connection.execute("ALTER TABLE live_runs ADD COLUMN process_namespace TEXT")


def _add_tuning_time(connection: sqlite3.Connection) -> None:
    """Schema 11: the seconds a run spent choosing before training (tuned trial, --batch-size auto search)."""
    connection.execute("ALTER TABLE runs ADD COLUMN tuning_s REAL")


# MIGRATIONS[n] takes a database from schema n to n + 1; the newest schema is len(MIGRATIONS). Append, never edit.
MIGRATIONS: list[Callable[[sqlite3.Connection], None]] = [
    _create_tables,
    _add_live_runs,
    _add_usage,
    _add_input_diagnosis,
    _add_flops,
    _add_tuning,
    _add_ranks,
    _add_compile_and_rank_figures,
    _add_plausibility,
    _add_process_namespace,
    _add_tuning_time,
]
TABLES = ("machines", "sessions", "runs", "epochs", "live_runs")  # schema 1's four, then schema 2's
ABANDONED = "the process running it ended without finishing it (killed or crashed); its finished epochs are kept"


def _insert_sql(table: str, columns: Iterable[str], values: dict[str, str] | None = None) -> str:
    """INSERT OR IGNORE of named parameters, one per column; `values` gives SQL for the columns that need it."""
    columns = list(columns)
    expressions = [(values or {}).get(column, f":{column}") for column in columns]
    return f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({', '.join(expressions)})"


# A run's position is the number of runs its session already has: runs are inserted in the order they start
_INSERT_RUN = _insert_sql(
    "runs",
    ("result_id", "position", *RUN_COLUMNS, "settings_json"),
    {"position": "(SELECT COUNT(*) FROM runs WHERE result_id = :result_id)"},
)
_UPDATE_RUN = (
    f"UPDATE runs SET {', '.join(f'{column} = :{column}' for column in (*RUN_COLUMNS, 'settings_json'))} "
    "WHERE run_id = :run_id"
)
_INSERT_EPOCH = _insert_sql("epochs", ("run_id", *EPOCH_COLUMNS))
_INSERT_SESSION = _insert_sql("sessions", SESSION_COLUMNS)


# --- the store -------------------------------------------------------------------------------------------------


class Store:
    """One results database, open for reading and writing. Use it as a context manager to close it."""

    def __init__(self, path: str | Path, *, reading_only: bool = False) -> None:
        """Open (or create) the database at `path`. `reading_only`, for a command that only reads: a database that
        cannot be written (a read-only file, folder or disk) is then opened read-only, and nothing in it changes."""
        self.path = Path(path)
        self.read_only = False  # whether it was opened read-only: nothing is written, abandoned runs are left be
        self._file: tuple[int, int] | None = None  # (device, inode) of the file written to, once it was opened
        _refuse_if_not_a_file(self.path)
        _refuse_if_not_sqlite(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # the folder cannot be made: a file in the way, a read-only parent
            raise StoreError(f"cannot open the results database {self.path} ({error}); {_WHAT_TO_DO}") from None
        try:
            self._connect()
        except sqlite3.Error as error:  # e.g. a read-only folder, or a lock held past the busy timeout
            if not (reading_only and _cannot_be_written(error) and self.path.is_file()):
                raise StoreError(
                    f"cannot open the results database {self.path}: {_explain(error, self.path)}"
                ) from None
            self._connect_read_only()
        if not self.read_only:
            self._file = _file_identity(self.path)

    def _connect(self, query: str | None = None) -> None:
        """Connect and open; `query`, a URI query such as "mode=ro", opens it that way."""
        # isolation_level=None: every transaction is begun and ended here, explicitly
        if query is None:
            self._connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        else:
            self._connection = sqlite3.connect(
                f"{self.path.absolute().as_uri()}?{query}", timeout=BUSY_TIMEOUT_S, isolation_level=None, uri=True
            )
        self._connection.row_factory = sqlite3.Row
        try:
            self._open()
        except BaseException:
            self._connection.close()
            raise

    def _connect_read_only(self) -> None:
        """Open the file read-only. A WAL file's readers share an index file beside it (-shm) that a read-only folder
        cannot hold; with no -wal file beside it either, no writer is at work and every row is in the file itself,
        so it is read as immutable."""
        self.read_only = True
        try:
            self._connect("mode=ro")
        except sqlite3.Error as error:
            if not _cannot_be_written(error) or Path(f"{self.path}-wal").exists():
                raise StoreError(
                    f"cannot read the results database {self.path}: {_explain(error, self.path)}"
                ) from None
            try:
                self._connect("mode=ro&immutable=1")
            except sqlite3.Error as error:
                raise StoreError(
                    f"cannot read the results database {self.path}: {_explain(error, self.path)}"
                ) from None

    def _open(self) -> None:
        version = self._schema_version()  # reads only: a file that is not ours is refused before anything is written
        if self.read_only:
            if version < len(MIGRATIONS):
                raise StoreError(
                    f"{self.path} holds schema {version} and must be upgraded to schema "
                    f"{len(MIGRATIONS)} before this devicebench can read it, but it cannot be written (it "
                    "or its folder is read-only). To go on, make them writable and run the command "
                    f"again, or {_WHAT_TO_DO}"
                )
            return
        self._switch_to_wal()
        self._connection.execute("PRAGMA foreign_keys = ON")
        if version < len(MIGRATIONS):
            self._migrate()
        self._close_abandoned_runs()

    def check_writable(self) -> None:
        """Take the write lock and give it back, waiting up to BUSY_TIMEOUT_S as every write does: a database that
        stays locked (or cannot be written) refuses a run before it trains, not after hours of training."""
        with self._transaction("check, before any work, that runs can be stored"):
            pass

    def _close_abandoned_runs(self) -> None:
        """Mark `interrupted` every run that a process on this host started and can no longer finish."""
        # a process id means something only on its own host, in its own PID namespace (a container may share the
        # host's name, or the database, and not its processes): elsewhere the run stays `running`, its fate unknown.
        # A run started before schema 10 has no namespace recorded and is judged by its host, as it was then.
        live = self._connection.execute(
            "SELECT run_id, process_id FROM live_runs WHERE hostname = ? "
            "AND (process_namespace IS ? OR process_namespace IS NULL)",
            (socket.gethostname(), pid_namespace()),
        )
        abandoned = [(run_id,) for run_id, process_id in live.fetchall() if not psutil.pid_exists(process_id)]
        if not abandoned:
            return
        with self._transaction("mark the runs of processes that died as interrupted"):
            self._connection.executemany(
                "UPDATE runs SET status = 'interrupted', error = ? WHERE run_id = ? AND status = 'running'",
                [(ABANDONED, run_id) for (run_id,) in abandoned],
            )
            self._connection.executemany("DELETE FROM live_runs WHERE run_id = ?", abandoned)

    def _switch_to_wal(self) -> None:
        """WAL mode: readers never wait, and writers from several processes take turns.

        When several processes open a new file at once, each can hold the lock another needs to switch; SQLite
        then answers "locked" at once instead of waiting out the busy timeout, so try again after a random pause.
        """
        for attempt in range(1, WAL_SWITCH_ATTEMPTS + 1):
            try:
                self._connection.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or attempt == WAL_SWITCH_ATTEMPTS:
                    raise
            time.sleep(random.uniform(0.01, 0.1))  # seconds; random, so that two processes do not retry in step

    def _schema_version(self) -> int:
        """The file's schema version, 0 for a new empty database; raises StoreError for a file that is not ours."""
        try:  # one statement, so one snapshot: the tables and the version a migration commits are seen together
            application_id, version, tables = self._connection.execute(
                "SELECT (SELECT application_id FROM pragma_application_id), "
                "(SELECT user_version FROM pragma_user_version), "
                "(SELECT group_concat(name, ', ') FROM sqlite_master WHERE type = 'table')"
            ).fetchone()
        except sqlite3.OperationalError:
            raise  # locked, unreadable folder, disk error: a problem of the file's place, not of its content
        except sqlite3.DatabaseError as error:
            raise StoreError(
                f"{self.path} is not a devicebench results database: it cannot be read as SQLite "
                f"({error}). It was left as it is; {_WHAT_TO_DO}"
            ) from None
        if application_id == 0 and version == 0 and not tables:
            return 0
        if application_id != APPLICATION_ID:
            raise StoreError(
                f"{self.path} is an SQLite database of another application (application id "
                f"{application_id}, tables: {tables or 'none'}), not devicebench results. It was left "
                "as it is; "
                f"{_WHAT_TO_DO}"
            )
        if version > len(MIGRATIONS):
            raise StoreError(
                f"{self.path} was made by a newer devicebench (schema {version}); upgrade devicebench "
                f"to read it (this one knows schema {len(MIGRATIONS)}), or {_WHAT_TO_DO}"
            )
        present = set((tables or "").split(", "))
        missing = [table for table in TABLES[: 4 if version == 1 else len(TABLES)] if table not in present]
        if version and missing:
            raise StoreError(
                f"{self.path} is a damaged devicebench results database: table {', '.join(missing)} "
                f"is missing (was it edited by another program?). It was left as it is; {_DAMAGED}"
            )
        return version

    def _migrate(self) -> None:
        """Bring the file to the newest schema in one transaction: a failure leaves it exactly as it was."""
        with self._transaction(f"upgrade the file to schema {len(MIGRATIONS)}"):
            version = self._schema_version()  # again, under the write lock: another process may have migrated
            for migration in MIGRATIONS[version:]:
                migration(self._connection)
            self._connection.execute(f"PRAGMA user_version = {len(MIGRATIONS):d}")
            self._connection.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, action: str, begin: str = "BEGIN IMMEDIATE") -> Iterator[None]:
        """Commit everything inside at once, or nothing. IMMEDIATE takes the write lock up front, so a writer
        waits its turn (up to BUSY_TIMEOUT_S) instead of failing when another process writes at the same time.

        A failure (a full disk, a lock held too long) rolls it all back and is a StoreError naming `action`.
        """
        try:
            self._connection.execute(begin)
            try:
                yield
                self._connection.execute("COMMIT")  # in the try: a COMMIT that fails must not leave it open
            except BaseException:  # Ctrl-C too: never leave a transaction open on the connection
                self._connection.rollback()
                raise
        except sqlite3.Error as error:
            explanation = _explain(error, self.path, unchanged=True)
            raise StoreError(f"could not {action} in {self.path}: {explanation}") from None
        self.check_still_there(action)

    def check_still_there(self, action: str = "keep the runs") -> None:
        """A StoreError when the path no longer leads to the file this store writes to: deleted (or its folder),
        or replaced by another file. SQLite keeps writing to the file it opened, so every write would still
        succeed, into a file nobody can open again, and "Runs stored in" would name a file without them."""
        if self._file is None:
            return
        try:
            now = _file_identity(self.path)
        except OSError:
            now = None
        if now == self._file:
            return
        happened = "was deleted (or its folder was)" if now is None else "was replaced by another file"
        raise StoreError(
            f"could not {action} in {self.path}: the file {happened} while devicebench was writing to "
            "it, and what it wrote went with the old file; " + _WHAT_TO_DO
        )

    # --- writing, as a run happens ---

    def add_session(self, result: Result) -> None:
        """Record the machine and the session, without runs; adding it again changes nothing."""
        with self._transaction(f"store session {result.result_id}"):
            self._insert_session(result)

    def start_run(self, result_id: str, record: RunRecord) -> None:
        """Record a run of session `result_id` as it starts, with its current status (`running`)."""
        with self._transaction(f"store the start of run {record.run_id}"):
            self._insert_run(result_id, record)
            self._connection.execute(
                "INSERT INTO live_runs (run_id, hostname, process_id, process_namespace) VALUES (?, ?, ?, ?)",
                (record.run_id, socket.gethostname(), os.getpid(), pid_namespace()),
            )
            self._refuse_unreadable([record.run_id])

    def add_epoch(self, run_id: str, epoch: EpochRecord) -> None:
        with self._transaction(f"store epoch {epoch.epoch} of run {run_id}"):
            self._connection.execute(_INSERT_EPOCH, _epoch_row(run_id, epoch))
            self._refuse_unreadable([run_id])

    def finish_run(self, record: RunRecord) -> None:
        """Record the run's final status, error and every run-level figure.

        Its epochs are written again where missing, in case Ctrl-C struck while one was being stored. A session
        with an interrupted run was itself interrupted.
        """
        with self._transaction(f"store the end of run {record.run_id}"):
            if self._connection.execute(_UPDATE_RUN, _run_row(record)).rowcount == 0:
                raise ValueError(f"run {record.run_id} was never started in {self.path}")
            self._insert_epochs(record)
            self._connection.execute("DELETE FROM live_runs WHERE run_id = ?", (record.run_id,))
            if record.status == "interrupted":
                self._connection.execute(
                    "UPDATE sessions SET interrupted = 1 WHERE result_id = "
                    "(SELECT result_id FROM runs WHERE run_id = ?)",
                    (record.run_id,),
                )
            self._refuse_unreadable([record.run_id])

    # --- moving results between databases ---

    def import_result(self, result: Result) -> int:
        """Add a session from elsewhere, keeping its ids and fingerprint; returns how many of its runs were new."""
        return self.import_results([result])

    def import_results(self, results: Iterable[Result]) -> int:
        """Add sessions in one transaction, all or nothing; returns how many runs were new."""
        added = 0
        with self._transaction("import the results"):
            for result in results:
                self._refuse_another_session_of_the_same_id(result)
                self._insert_session(result)
                new_runs = [record for record in result.runs if self._insert_run(result.result_id, record)]
                for record in new_runs:
                    self._insert_epochs(record)
                self._refuse_unreadable([record.run_id for record in new_runs])
                added += len(new_runs)
        return added

    def _refuse_unreadable(self, run_ids: list[str]) -> None:
        """Read the runs just written back, inside the writing transaction, as every reading command will: a run
        the reader would refuse is refused now (the transaction rolls back), never after it was stored."""
        for start in range(0, len(run_ids), 500):  # SQLite's limit on parameters in one statement
            chunk = run_ids[start : start + 500]
            matching = f"WITH matching AS (SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' * len(chunk))})) "
            try:
                _assemble(*self._rows(matching, chunk))
            except (KeyError, TypeError, ValueError, RecursionError) as error:
                raise UnreadableRun(
                    f"nothing was stored: devicebench could not read this run back ({error}). This is a bug in "
                    "devicebench or in the workload that made the run: please report it"
                ) from None

    def _refuse_another_session_of_the_same_id(self, result: Result) -> None:
        """Raise StoreError when `result` is not the session stored under its id (another machine's, another
        time's) or one of its runs is stored in another session: pooling those runs would mix different sessions.
        The same session again (a re-import, or another export of some of its runs) passes."""
        stored = self._connection.execute(
            f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE result_id = ?", (result.result_id,)
        ).fetchone()
        if stored is not None:
            incoming = _session_row(result)
            for column in (
                "machine_id",
                "hostname",
                "created_utc",
                "devicebench_version",
                "machine_json",
                "config_json",
            ):
                if not _same_value(stored[column], incoming[column], column.endswith("_json")):
                    raise StoreError(
                        f"session {result.result_id} is already stored in {self.path} with another "
                        f"{column.removesuffix('_json').replace('_', ' ')}: two different sessions carry the same "
                        "id, and importing would pool the runs of one with the other's. Nothing was imported; "
                        "export the file again from the machine that ran it, or import it into another --db"
                    )
        run_ids = [run.run_id for run in result.runs]
        for start in range(0, len(run_ids), 500):  # SQLite's limit on parameters in one statement
            chunk = run_ids[start : start + 500]
            other = self._connection.execute(
                f"SELECT run_id, result_id FROM runs WHERE run_id IN ({', '.join('?' * len(chunk))}) "
                "AND result_id != ? LIMIT 1",
                (*chunk, result.result_id),
            ).fetchone()
            if other is not None:
                raise StoreError(
                    f"run {other['run_id']} of session {result.result_id} is already stored in {self.path} as a run "
                    f"of another session ({other['result_id']}): two different runs carry the same id. Nothing "
                    "was imported; export the file again from the machine that ran it, or import it into another "
                    "--db"
                )

    def _insert_session(self, result: Result) -> None:
        machine = result.machine
        self._connection.execute(
            "INSERT OR IGNORE INTO machines (machine_id, machine_name) VALUES (?, ?)",
            (machine["machine_id"], machine["machine_name"]),
        )
        self._connection.execute(_INSERT_SESSION, _session_row(result))

    def _insert_run(self, result_id: str, record: RunRecord) -> bool:
        """Insert the run unless its id is already stored; returns whether it was new."""
        return self._connection.execute(_INSERT_RUN, {"result_id": result_id, **_run_row(record)}).rowcount == 1

    def _insert_epochs(self, record: RunRecord) -> None:
        self._connection.executemany(_INSERT_EPOCH, [_epoch_row(record.run_id, epoch) for epoch in record.epochs])

    # --- reading ---

    def results(
        self,
        *,
        workload: str | None = None,
        machine: str | None = None,
        last: int | None = None,
        status: str | None = None,
    ) -> list[Result]:
        """Sessions, oldest first, holding only their matching runs; a session with none is left out.

        workload: a name or shell pattern ("mnist-*"); machine: a machine name, hostname or machine id prefix;
        status: ok, failed, interrupted…; last: only the `last` most recently started runs that match.
        """
        conditions = ["1"]
        if workload is not None:
            conditions.append("runs.workload GLOB :workload")
        if machine is not None:
            conditions.append(
                "(machines.machine_name = :machine OR sessions.hostname = :machine "
                "OR substr(sessions.machine_id, 1, length(:machine)) = :machine)"
            )
        if status is not None:
            conditions.append("runs.status = :status")
        matching = (
            "WITH matching AS (SELECT runs.run_id FROM runs JOIN sessions USING (result_id) "
            f"JOIN machines USING (machine_id) WHERE {' AND '.join(conditions)} "
            "ORDER BY runs.started_utc DESC, runs.rowid DESC LIMIT :limit) "  # in UTC_TIME_FORMAT: by time
        )
        parameters = {
            "workload": workload,
            "machine": machine,
            "status": status,
            "limit": -1 if last is None else last,
        }  # LIMIT -1: no limit
        with self._transaction("read the runs", "BEGIN"):  # one snapshot, whatever other processes write
            rows = self._rows(matching, parameters)
        try:
            return _assemble(*rows)
        except (KeyError, TypeError, ValueError, RecursionError) as error:  # InvalidResult and JSONDecodeError too
            raise StoreError(
                f"{self.path} is a damaged devicebench results database: {error}. Nothing was changed in it; {_DAMAGED}"
            ) from None

    def _rows(self, matching: str, parameters: Any) -> tuple[list[sqlite3.Row], list[sqlite3.Row], list[sqlite3.Row]]:
        """The session, run and epoch rows of the runs the `matching` common table expression names."""
        sessions = self._connection.execute(
            f"{matching} SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE result_id IN "
            "(SELECT result_id FROM runs WHERE run_id IN matching) ORDER BY created_utc, rowid",
            parameters,
        ).fetchall()
        runs = self._connection.execute(
            f"{matching} SELECT result_id, run_id, {', '.join(RUN_COLUMNS)}, settings_json FROM runs "
            "WHERE run_id IN matching ORDER BY result_id, position",
            parameters,
        ).fetchall()
        epochs = self._connection.execute(
            f"{matching} SELECT run_id, {', '.join(EPOCH_COLUMNS)} FROM epochs WHERE run_id IN matching "
            "ORDER BY run_id, epoch",
            parameters,
        ).fetchall()
        return sessions, runs, epochs

    def run_ids_starting(self, prefix: str) -> list[str]:
        """The stored run ids that start with `prefix` (a whole id, or the 8 characters `history` shows), sorted."""
        with self._transaction("look up the run ids", "BEGIN"):
            rows = self._connection.execute(
                "SELECT run_id FROM runs WHERE substr(run_id, 1, length(?)) = ? ORDER BY run_id", (prefix, prefix)
            ).fetchall()
        return [row[0] for row in rows]

    def forget_runs(self, run_ids: Iterable[str]) -> tuple[int, int]:
        """Delete the runs `run_ids` with their epochs, then every session left with no run and every machine left
        with no session, in one transaction: all of it or nothing. Returns (runs, sessions) deleted."""
        ids = [(run_id,) for run_id in dict.fromkeys(run_ids)]
        with self._transaction("forget the runs"):
            for table in ("epochs", "live_runs", "runs"):
                self._connection.executemany(f"DELETE FROM {table} WHERE run_id = ?", ids)
            sessions = self._connection.execute(
                "DELETE FROM sessions WHERE result_id NOT IN (SELECT result_id FROM runs)"
            ).rowcount
            self._connection.execute("DELETE FROM machines WHERE machine_id NOT IN (SELECT machine_id FROM sessions)")
        return len(ids), sessions

    def stored_names(self) -> tuple[list[str], list[str]]:
        """The names of the machines and the workloads stored, sorted: what a filter that matched nothing could
        have named instead."""
        with self._transaction("read the names of machines and workloads", "BEGIN"):
            machines = self._connection.execute("SELECT DISTINCT machine_name FROM machines ORDER BY 1").fetchall()
            workloads = self._connection.execute("SELECT DISTINCT workload FROM runs ORDER BY 1").fetchall()
        return [row[0] for row in machines], [row[0] for row in workloads]


def pid_namespace() -> str | None:
    """This process's PID namespace, e.g. 'pid:[4026531836]' on Linux; None where the system has none to read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _cannot_be_written(error: sqlite3.Error) -> bool:
    """Whether `error` says the database (or its folder) cannot be written, as opposed to locked or damaged."""
    name, message = getattr(error, "sqlite_errorname", ""), str(error)
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or any(
        words in message for words in ("readonly", "unable to open")
    )


def _refuse_if_not_a_file(path: Path) -> None:
    """Refuse a FIFO, a device or a socket as the database: reading one would hang or never end."""
    try:
        if not path.is_dir():  # a folder gets its own words when SQLite tries to open it
            require_regular_file(path, "the results database")
    except FileNotFoundError:
        return  # a new database
    except UnusableFile as error:
        raise StoreError(f"{error}. It was left as it is; {_WHAT_TO_DO}") from None
    except OSError:
        return  # an unusable name: _refuse_if_not_sqlite and SQLite say what is wrong


def _refuse_if_not_sqlite(path: Path) -> None:
    """Refuse a file that is neither empty nor SQLite before SQLite opens it, so nothing can write to it."""
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return  # a new database; a folder fails clearly when SQLite tries to open it
    except OSError as error:
        raise StoreError(f"cannot read the results database {path} ({error.strerror}); {_WHAT_TO_DO}") from None
    if header and header != SQLITE_HEADER:
        raise StoreError(
            f"{path} is not a devicebench results database: it is not an SQLite file (damaged, or "
            f"another kind of file). It was left as it is; {_WHAT_TO_DO}"
        )


def _explain(error: sqlite3.Error, path: Path, *, unchanged: bool = False) -> str:
    """What `error` means for the database at `path`, in words, and what to do about it. `unchanged`: say that the
    failed transaction was rolled back, leaving the file as it was."""
    name = getattr(error, "sqlite_errorname", "")  # SQLITE_FULL, SQLITE_BUSY...: absent from errors made in Python
    message = str(error)
    if name == "SQLITE_FULL" or "disk is full" in message:
        problem, advice = "the disk holding it is full", "free some space on that disk, or " + _WHAT_TO_DO
    elif name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in message:
        problem, advice = "it is damaged", _DAMAGED
    elif "no such table" in message or "no such column" in message:
        problem, advice = "part of devicebench's tables is missing from it (edited by another program?)", _DAMAGED
    elif name.startswith("SQLITE_CONSTRAINT") or isinstance(error, sqlite3.IntegrityError):
        problem, advice = "what it holds contradicts what was to be added (damaged, or edited by hand)", _DAMAGED
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in message:
        problem = f"it is locked by another process, which has held it for more than {BUSY_TIMEOUT_S:g} s"
        advice = (
            "close the program that has it open (another devicebench writing to it, or a database browser) or "
            "wait for it to finish, then try again; or " + _WHAT_TO_DO
        )
    elif path.is_dir():  # SQLite's "unable to open database file" says no more
        problem, advice = "it is a folder, not a database file", _WHAT_TO_DO
    elif name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or any(
        words in message for words in ("readonly", "unable to open")
    ):
        problem = f"it or its folder {path.parent} cannot be written"
        advice = "make them writable, or " + _WHAT_TO_DO
    elif name.startswith("SQLITE_IOERR") or "I/O error" in message:
        problem, advice = "the disk failed to read or write it", "check the disk, or " + _WHAT_TO_DO
    else:
        problem, advice = "SQLite failed", _WHAT_TO_DO
    kept = "; the file is unchanged, with everything stored in it before" if unchanged else ""
    return f"{problem} ({message}){kept}. To go on, {advice}"


def _session_row(result: Result) -> dict[str, Any]:
    machine = result.machine
    return {
        "result_id": result.result_id,
        "machine_id": machine["machine_id"],
        "hostname": machine["hostname"],
        "created_utc": result.created_utc,
        "devicebench_version": result.devicebench_version,
        "interrupted": result.interrupted,
        "machine_json": _json_text(machine),
        "config_json": _json_text(result.config),
    }


def _same_value(stored: Any, incoming: Any, is_json: bool) -> bool:
    """Whether a stored session's column holds what an imported one would; JSON compared as what it means."""
    if not is_json or stored == incoming:
        return stored == incoming
    try:
        return json.loads(stored) == json.loads(incoming)
    except (TypeError, ValueError, RecursionError):
        return False


def _json_text(value: Any) -> str:
    return json.dumps(finite_or_none(value), allow_nan=False)


def _run_row(record: RunRecord) -> dict[str, Any]:
    # strict JSON's convention: a NaN or infinite figure is stored NULL. The epochs have rows of their own
    row = finite_or_none({column: getattr(record, column) for column in RUN_COLUMNS})
    return {**row, "settings_json": _json_text(dataclasses.asdict(record.settings))}


LIST_EPOCH_COLUMNS = ("rank_device_utilization_percent",)  # lists, kept as JSON text in their column


def _epoch_row(run_id: str, epoch: EpochRecord) -> dict[str, Any]:
    row = finite_or_none(dataclasses.asdict(epoch))
    return {"run_id": run_id, **row, **{column: json_or_none(row[column]) for column in LIST_EPOCH_COLUMNS}}


def json_or_none(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def _stored_json(text: Any, what: str) -> Any:
    """A JSON column's value; ValueError naming `what` when the text is not JSON."""
    try:
        return json.loads(text)
    except (TypeError, ValueError, RecursionError):
        raise ValueError(f"{what} is not JSON: {str(text)[:60]!r}") from None


def _assemble(sessions: list[sqlite3.Row], runs: list[sqlite3.Row], epochs: list[sqlite3.Row]) -> list[Result]:
    """Rows back into Results, through the dict form Result.from_dict reads (every field checked: the file may have
    been edited or damaged); ValueError names what is wrong."""
    epochs_by_run: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in epochs:
        epoch = {column: row[column] for column in EPOCH_COLUMNS}
        for column in LIST_EPOCH_COLUMNS:
            epoch[column] = (
                None
                if epoch[column] is None
                else _stored_json(epoch[column], f"run {row['run_id']}'s {column} of epoch {row['epoch']}")
            )
        epochs_by_run[row["run_id"]].append(epoch)
    runs_by_session: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in runs:
        runs_by_session[row["result_id"]].append(
            {
                **{column: row[column] for column in RUN_COLUMNS},
                "settings": _stored_json(row["settings_json"], f"run {row['run_id']}'s settings_json"),
                "epochs": epochs_by_run[row["run_id"]],
            }
        )
    return [
        Result.from_dict(
            {
                "schema_version": SCHEMA_VERSION,  # migrations keep stored rows in the current schema
                "result_id": row["result_id"],
                "devicebench_version": row["devicebench_version"],
                "created_utc": row["created_utc"],
                "interrupted": bool(row["interrupted"]),
                "machine": _stored_json(row["machine_json"], f"session {row['result_id']}'s machine_json"),
                "config": _stored_json(row["config_json"], f"session {row['result_id']}'s config_json"),
                "runs": runs_by_session[row["result_id"]],
            },
            f"session {row['result_id']}",
        )
        for row in sessions
    ]
