"""The results store: every run in one SQLite file, written as it happens and read back as `Result`s.

A session (`Result`) is inserted when it starts, each run when it starts (status `running`), each epoch the moment it
finishes and the run again when it ends. Every write is its own committed transaction, so Ctrl-C or a crash keeps every
finished epoch. WAL mode and a busy timeout let several devicebench processes write to one file at once. A file that is
not ours (damaged, another application's, or made by a newer devicebench) is refused and never modified.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 5 && devicebench history
"""

from __future__ import annotations

import os
import random
import socket
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from devicebench.files import DB_VARIABLE, expanded, user_folder
from devicebench.results import migrations, store_errors, store_imports
from devicebench.results.schema import EpochRecord, Result, RunRecord
from devicebench.results.store_errors import (
    DAMAGED,
    WHAT_TO_DO,
    StoreError,
    UnreadableRun,
    cannot_be_written,
    explain,
    file_identity,
    refuse_if_not_a_file,
    refuse_if_not_sqlite,
)
from devicebench.results.store_rows import (
    EPOCH_COLUMNS,
    INSERT_EPOCH,
    INSERT_RUN,
    INSERT_SESSION,
    RUN_COLUMNS,
    SESSION_COLUMNS,
    UPDATE_RUN,
    assemble,
    epoch_row,
    run_row,
    session_row,
)

DB_ENVIRONMENT_VARIABLE = DB_VARIABLE
WAL_SWITCH_ATTEMPTS = 100  # about 5 s of retries at a random 0.01-0.1 s apart
ABANDONED = "the process running it ended without finishing it (killed or crashed); its finished epochs are kept"


def default_db_path(db: str | Path | None = None) -> Path:
    """`db` when given, else $DEVICEBENCH_DB, else results.sqlite in the user's data folder."""
    if db:
        return expanded(db, "--db")
    chosen = os.environ.get(DB_ENVIRONMENT_VARIABLE, "").strip()
    if chosen:
        return expanded(chosen, f"${DB_ENVIRONMENT_VARIABLE}")
    return user_folder("data", "the results database") / "results.sqlite"


# --- the store -------------------------------------------------------------------------------------------------


class Store:
    """One results database, open for reading and writing. Use it as a context manager to close it."""

    def __init__(self, path: str | Path, *, reading_only: bool = False) -> None:
        """Open (or create) the database at `path`. `reading_only`, for a command that only reads: a database that
        cannot be written (a read-only file, folder or disk) is then opened read-only, and nothing in it changes."""
        self.path = Path(path)
        self.read_only = False  # whether it was opened read-only: nothing is written, abandoned runs are left be
        self._file: tuple[int, int] | None = None  # (device, inode) of the file written to, once it was opened
        refuse_if_not_a_file(self.path)
        refuse_if_not_sqlite(self.path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # the folder cannot be made: a file in the way, a read-only parent
            raise StoreError(f"cannot open the results database {self.path} ({error}); {WHAT_TO_DO}") from None
        try:
            self._connect()
        except sqlite3.Error as error:  # e.g. a read-only folder, or a lock held past the busy timeout
            if not (reading_only and cannot_be_written(error) and self.path.is_file()):
                raise StoreError(f"cannot open the results database {self.path}: {explain(error, self.path)}") from None
            self._connect_read_only()
        if not self.read_only:
            self._file = file_identity(self.path)

    def _connect(self, query: str | None = None) -> None:
        """Connect and open; `query`, a URI query such as "mode=ro", opens it that way."""
        # isolation_level=None: every transaction is begun and ended here, explicitly
        if query is None:
            self._connection = sqlite3.connect(self.path, timeout=store_errors.BUSY_TIMEOUT_S, isolation_level=None)
        else:
            self._connection = sqlite3.connect(
                f"{self.path.absolute().as_uri()}?{query}",
                timeout=store_errors.BUSY_TIMEOUT_S,
                isolation_level=None,
                uri=True,
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
            if not cannot_be_written(error) or Path(f"{self.path}-wal").exists():
                raise StoreError(f"cannot read the results database {self.path}: {explain(error, self.path)}") from None
            try:
                self._connect("mode=ro&immutable=1")
            except sqlite3.Error as error:
                raise StoreError(f"cannot read the results database {self.path}: {explain(error, self.path)}") from None

    def _open(self) -> None:
        version = migrations.schema_version(
            self._connection, self.path
        )  # reads only: a file that is not ours is refused before anything is written
        if self.read_only:
            if version < len(migrations.MIGRATIONS):
                raise StoreError(
                    f"{self.path} holds schema {version} and must be upgraded to schema "
                    f"{len(migrations.MIGRATIONS)} before this devicebench can read it, but it cannot be written (it "
                    "or its folder is read-only). To go on, make them writable and run the command "
                    f"again, or {WHAT_TO_DO}"
                )
            return
        self._switch_to_wal()
        self._connection.execute("PRAGMA foreign_keys = ON")
        if version < len(migrations.MIGRATIONS):
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

    def _migrate(self) -> None:
        """Bring the file to the newest schema in one transaction: a failure leaves it exactly as it was."""
        with self._transaction(f"upgrade the file to schema {len(migrations.MIGRATIONS)}"):
            migrations.upgrade(self._connection, self.path)

    def close(self) -> None:
        self._connection.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()

    @contextmanager
    def _transaction(self, action: str, begin: str = "BEGIN IMMEDIATE", *, kept: str | None = None) -> Iterator[None]:
        """Commit everything inside at once, or nothing. IMMEDIATE takes the write lock up front, so a writer
        waits its turn (up to BUSY_TIMEOUT_S) instead of failing when another process writes at the same time.

        A failure (a full disk, a lock held too long) rolls it all back and is a StoreError naming `action` and,
        given `kept`, what the file holds then (else: that it is unchanged).
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
            explanation = explain(error, self.path, unchanged=kept or True)
            raise StoreError(f"could not {action} in {self.path}: {explanation}") from None
        self.check_still_there(action)

    def check_still_there(self, action: str = "keep the runs") -> None:
        """A StoreError when the path no longer leads to the file this store writes to: deleted (or its folder),
        or replaced by another file. SQLite keeps writing to the file it opened, so every write would still
        succeed, into a file nobody can open again, and "Runs stored in" would name a file without them."""
        if self._file is None:
            return
        try:
            now = file_identity(self.path)
        except OSError:
            now = None
        if now == self._file:
            return
        happened = "was deleted (or its folder was)" if now is None else "was replaced by another file"
        raise StoreError(
            f"could not {action} in {self.path}: the file {happened} while devicebench was writing to "
            "it, and what it wrote went with the old file; " + WHAT_TO_DO
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
        with self._transaction(f"store epoch {epoch.epoch} of run {run_id}", kept=_cut_short(run_id)):
            self._connection.execute(INSERT_EPOCH, epoch_row(run_id, epoch))
            self._refuse_unreadable([run_id])

    def finish_run(self, record: RunRecord) -> None:
        """Record the run's final status, error and every run-level figure.

        Its epochs are written again where missing, in case Ctrl-C struck while one was being stored. A session
        with an interrupted run was itself interrupted.
        """
        with self._transaction(f"store the end of run {record.run_id}", kept=_cut_short(record.run_id)):
            if self._connection.execute(UPDATE_RUN, run_row(record)).rowcount == 0:
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

    def import_results(self, results: Iterable[Result], *, this_machine: tuple[str, str] | None = None) -> int:
        """Add sessions in one transaction, all or nothing; returns how many runs were new, or completed (a run stored
        cut short, as by a disk that filled mid-run, that the file holds further). `this_machine`, the (id, name)
        of the machine importing: a session claiming its id under another name is refused, as is one claiming the
        id of a stored machine of another name."""
        added = 0
        with self._transaction("import the results"):
            for result in results:
                store_imports.refuse_another_session_of_the_same_id(self._connection, self.path, result)
                store_imports.refuse_another_machine_of_the_same_id(self._connection, result, this_machine)
                self._insert_session(result)
                new_runs = [record for record in result.runs if self._insert_new_run(result.result_id, record)]
                for record in new_runs:
                    self._insert_epochs(record)
                self._refuse_unreadable([record.run_id for record in new_runs])
                added += len(new_runs)
        return added

    def _insert_new_run(self, result_id: str, record: RunRecord) -> bool:
        """Insert an imported run, or complete the stored one of its id that was cut short; returns whether either
        happened (False: the run is stored already, as far as the file holds it)."""
        stored = self._connection.execute(
            "SELECT status, (SELECT count(*) FROM epochs WHERE epochs.run_id = runs.run_id) AS epochs FROM runs "
            "WHERE run_id = ?",
            (record.run_id,),
        ).fetchone()
        if stored is None:
            store_imports.refuse_a_prefix_of_another_id(self._connection, record.run_id)
            return self._insert_run(result_id, record)
        # cut short (its process died, or the disk filled, mid-run) where the file holds more of the same run
        # (store_imports checked it is the same session)
        cut_short = stored["status"] == "interrupted" or (
            stored["status"] == "running" and not self._still_written(record.run_id)
        )
        if not cut_short or (record.status == "interrupted" and len(record.epochs) <= stored["epochs"]):
            return False
        for table in ("epochs", "live_runs"):
            self._connection.execute(f"DELETE FROM {table} WHERE run_id = ?", (record.run_id,))
        self._connection.execute(UPDATE_RUN, run_row(record))
        return True

    def _still_written(self, run_id: str) -> bool:
        """Whether another live process on this host is writing the run `run_id` (_close_abandoned_runs closed
        those of dead ones; this process's own run has ended once it imports)."""
        live = self._connection.execute(
            "SELECT process_id FROM live_runs WHERE run_id = ? AND hostname = ? "
            "AND (process_namespace IS ? OR process_namespace IS NULL)",
            (run_id, socket.gethostname(), pid_namespace()),
        ).fetchone()
        return live is None or (live[0] != os.getpid() and psutil.pid_exists(live[0]))

    def _refuse_unreadable(self, run_ids: list[str]) -> None:
        """Read the runs just written back, inside the writing transaction, as every reading command will: a run
        the reader would refuse is refused now (the transaction rolls back), never after it was stored."""
        for start in range(0, len(run_ids), 500):  # SQLite's limit on parameters in one statement
            chunk = run_ids[start : start + 500]
            matching = f"WITH matching AS (SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' * len(chunk))})) "
            try:
                assemble(*self._rows(matching, chunk))
            except (KeyError, TypeError, ValueError, RecursionError) as error:
                raise UnreadableRun(
                    f"nothing was stored: devicebench could not read this run back ({error}). This is a bug in "
                    "devicebench or in the workload that made the run: please report it"
                ) from None

    def _insert_session(self, result: Result) -> None:
        machine = result.machine
        self._connection.execute(
            "INSERT OR IGNORE INTO machines (machine_id, machine_name) VALUES (?, ?)",
            (machine["machine_id"], machine["machine_name"]),
        )
        self._connection.execute(INSERT_SESSION, session_row(result))

    def _insert_run(self, result_id: str, record: RunRecord) -> bool:
        """Insert the run unless its id is already stored; returns whether it was new."""
        return self._connection.execute(INSERT_RUN, {"result_id": result_id, **run_row(record)}).rowcount == 1

    def _insert_epochs(self, record: RunRecord) -> None:
        self._connection.executemany(INSERT_EPOCH, [epoch_row(record.run_id, epoch) for epoch in record.epochs])

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
            return assemble(*rows)
        except (KeyError, TypeError, ValueError, RecursionError) as error:  # InvalidResult and JSONDecodeError too
            raise StoreError(
                f"{self.path} is a damaged devicebench results database: {error}. Nothing was changed in it; {DAMAGED}"
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


def _cut_short(run_id: str) -> str:
    """What the file holds of a run whose epoch or end could not be stored, and how to mend it."""
    return (
        f"run {run_id} stays stored as started, with the epochs stored before, and reads as interrupted from the "
        "next command on: `devicebench import` of the run's --json file completes it, or `devicebench forget "
        f"{run_id[:8]}` removes it"
    )


def pid_namespace() -> str | None:
    """This process's PID namespace, e.g. 'pid:[4026531836]' on Linux; None where the system has none to read."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


# A session's config["purpose"] when it is the CPU baseline `devicebench estimate` trains: compare and history leave
# such runs out, so that a user's own runs are not set beside an estimate's three-step ones
ESTIMATE_BASELINE = "estimate baseline"


def own_sessions(results: Iterable[Result]) -> tuple[list[Result], int]:
    """The sessions a user ran, and how many runs the left-out CPU baselines of `devicebench estimate` hold."""
    kept, baselines = [], 0
    for result in results:
        if result.config.get("purpose") == ESTIMATE_BASELINE:
            baselines += len(result.runs)
        else:
            kept.append(result)
    return kept, baselines


def baselines_note(count: int) -> str:
    return (
        f"{count} run{'s' if count != 1 else ''} of `devicebench estimate`'s CPU baselines not shown "
        "(`devicebench forget` removes them)."
    )
