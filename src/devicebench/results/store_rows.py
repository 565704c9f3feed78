"""How the results database's rows are made from a `Result` and read back into one: the columns, the statements
that insert them, and the assembly that checks every field of what was read.

    python -c "from devicebench.results.store_rows import RUN_COLUMNS; print(len(RUN_COLUMNS))"
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from devicebench.results.schema import SCHEMA_VERSION, EpochRecord, Result, RunRecord, finite_or_none

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


def _insert_sql(table: str, columns: Iterable[str], values: dict[str, str] | None = None) -> str:
    """INSERT OR IGNORE of named parameters, one per column; `values` gives SQL for the columns that need it."""
    columns = list(columns)
    expressions = [(values or {}).get(column, f":{column}") for column in columns]
    return f"INSERT OR IGNORE INTO {table} ({', '.join(columns)}) VALUES ({', '.join(expressions)})"


# A run's position is the number of runs its session already has: runs are inserted in the order they start
INSERT_RUN = _insert_sql(
    "runs",
    ("result_id", "position", *RUN_COLUMNS, "settings_json"),
    {"position": "(SELECT COUNT(*) FROM runs WHERE result_id = :result_id)"},
)
UPDATE_RUN = (
    f"UPDATE runs SET {', '.join(f'{column} = :{column}' for column in (*RUN_COLUMNS, 'settings_json'))} "
    "WHERE run_id = :run_id"
)
INSERT_EPOCH = _insert_sql("epochs", ("run_id", *EPOCH_COLUMNS))
INSERT_SESSION = _insert_sql("sessions", SESSION_COLUMNS)


def session_row(result: Result) -> dict[str, Any]:
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


def same_value(stored: Any, incoming: Any, is_json: bool) -> bool:
    """Whether a stored session's column holds what an imported one would; JSON compared as what it means."""
    if not is_json or stored == incoming:
        return stored == incoming
    try:
        return json.loads(stored) == json.loads(incoming)
    except (TypeError, ValueError, RecursionError):
        return False


def _json_text(value: Any) -> str:
    return json.dumps(finite_or_none(value), allow_nan=False)


def run_row(record: RunRecord) -> dict[str, Any]:
    # strict JSON's convention: a NaN or infinite figure is stored NULL. The epochs have rows of their own
    row = finite_or_none({column: getattr(record, column) for column in RUN_COLUMNS})
    return {**row, "settings_json": _json_text(dataclasses.asdict(record.settings))}


LIST_EPOCH_COLUMNS = ("rank_device_utilization_percent",)  # lists, kept as JSON text in their column


def epoch_row(run_id: str, epoch: EpochRecord) -> dict[str, Any]:
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


def assemble(sessions: list[sqlite3.Row], runs: list[sqlite3.Row], epochs: list[sqlite3.Row]) -> list[Result]:
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
