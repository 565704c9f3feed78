"""The results database's schema: the tables of schema 1, every migration since, and the check that a file is ours
and which schema it holds before anything is written to it.

    python -c "from devicebench.results.migrations import MIGRATIONS; print(len(MIGRATIONS))"
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from devicebench.results.store_errors import DAMAGED, WHAT_TO_DO, StoreError

APPLICATION_ID = 0x4476426E  # "DvBn" in ASCII: PRAGMA application_id, how our files tell themselves from others'


# Schema 1. A migration is a snapshot: it lists its columns rather than deriving them from today's dataclasses
_SCHEMA_1 = (
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


def _create_tables(connection: sqlite3.Connection) -> None:
    """Schema 1: the tables of _SCHEMA_1."""
    for statement in _SCHEMA_1:  # one by one: executescript() would commit the migration's transaction midway
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


def _add_definition(connection: sqlite3.Connection) -> None:
    """Schema 12: the fingerprint of each run's workload definition; NULL for the runs stored before it."""
    connection.execute("ALTER TABLE runs ADD COLUMN definition TEXT")


def _forget_first_definitions(connection: sqlite3.Connection) -> None:
    """Schema 13: the definitions schema 12 recorded are forgotten (NULL, as if never recorded): they hashed the
    initial weights' statistics, which torch 2.11 and 2.13 draw differently for one seed, so one model's runs under
    the two were kept apart. A definition now reads how the weights were initialised (workloads/definition.py)."""
    connection.execute("UPDATE runs SET definition = NULL")


def _add_processes_and_run_to_run(connection: sqlite3.Connection) -> None:
    """Schema 14: the process each run trained in (NULL before: a session's repeats shared its process), and the
    machine's run-to-run CV and its degrees of freedom when it ran (NULL: not measured)."""
    connection.execute("ALTER TABLE runs ADD COLUMN process_id TEXT")
    connection.execute("ALTER TABLE runs ADD COLUMN run_to_run_cv REAL")
    connection.execute("ALTER TABLE runs ADD COLUMN run_to_run_freedom REAL")


def _add_thread_cpu(connection: sqlite3.Connection) -> None:
    """Schema 15: the training thread's CPU seconds of each epoch (NULL before: not recorded)."""
    connection.execute("ALTER TABLE epochs ADD COLUMN train_thread_cpu_s REAL")


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
    _add_definition,
    _forget_first_definitions,
    _add_processes_and_run_to_run,
    _add_thread_cpu,
]
TABLES = ("machines", "sessions", "runs", "epochs", "live_runs")  # schema 1's four, then schema 2's


def schema_version(connection: sqlite3.Connection, path: Path) -> int:
    """The file's schema version, 0 for a new empty database; raises StoreError for a file that is not ours."""
    try:  # one statement, so one snapshot: the tables and the version a migration commits are seen together
        application_id, version, tables = connection.execute(
            "SELECT (SELECT application_id FROM pragma_application_id), "
            "(SELECT user_version FROM pragma_user_version), "
            "(SELECT group_concat(name, ', ') FROM sqlite_master WHERE type = 'table')"
        ).fetchone()
    except sqlite3.OperationalError:
        raise  # locked, unreadable folder, disk error: a problem of the file's place, not of its content
    except sqlite3.DatabaseError as error:
        raise StoreError(
            f"{path} is not a devicebench results database: it cannot be read as SQLite "
            f"({error}). It was left as it is; {WHAT_TO_DO}"
        ) from None
    if application_id == 0 and version == 0 and not tables:
        return 0
    if application_id != APPLICATION_ID:
        raise StoreError(
            f"{path} is an SQLite database of another application (application id "
            f"{application_id}, tables: {tables or 'none'}), not devicebench results. It was left "
            "as it is; "
            f"{WHAT_TO_DO}"
        )
    if version > len(MIGRATIONS):
        raise StoreError(
            f"{path} was made by a newer devicebench (schema {version}); upgrade devicebench "
            f"to read it (this one knows schema {len(MIGRATIONS)}), or {WHAT_TO_DO}"
        )
    present = set((tables or "").split(", "))
    missing = [table for table in TABLES[: 4 if version == 1 else len(TABLES)] if table not in present]
    if version and missing:
        raise StoreError(
            f"{path} is a damaged devicebench results database: table {', '.join(missing)} "
            f"is missing (was it edited by another program?). It was left as it is; {DAMAGED}"
        )
    return version


def upgrade(connection: sqlite3.Connection, path: Path) -> None:
    """Bring the file at `path` to the newest schema, inside the caller's write transaction."""
    version = schema_version(connection, path)  # again, under the write lock: another process may have migrated
    for migration in MIGRATIONS[version:]:
        migration(connection)
    connection.execute(f"PRAGMA user_version = {len(MIGRATIONS):d}")
    connection.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
