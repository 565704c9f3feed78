"""What an import must not do to the results store, checked inside its transaction before a session is written:
pool two sessions, two runs or two machines that carry one id, or store a run id that `forget` and `history` could
not tell from another's.

    python -m pytest tests/test_hostile_machines.py -q
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from devicebench.results.schema import Result
from devicebench.results.store_errors import WHAT_TO_DO, StoreError
from devicebench.results.store_rows import SESSION_COLUMNS, same_value, session_row


def refuse_a_prefix_of_another_id(connection: sqlite3.Connection, run_id: str) -> None:
    """StoreError when `run_id` starts a stored run's id or a stored id starts it: `forget` and `history` name
    runs by the start of their ids, and a forged id equal to the start of a real one would make it ambiguous."""
    # the ids that start with it sort between it and it followed by the last character there is: the primary
    # key's order finds them without reading every run
    longer = connection.execute(
        "SELECT run_id FROM runs WHERE run_id > ? AND run_id < ? LIMIT 1", (run_id, run_id + "\U0010ffff")
    ).fetchone()
    starts = [run_id[:length] for length in range(1, len(run_id))]  # at most 63 (transfer.ID_PATTERN)
    shorter = connection.execute(
        f"SELECT run_id FROM runs WHERE run_id IN ({', '.join('?' * len(starts))}) LIMIT 1", starts
    ).fetchone()
    other = longer or shorter
    if other is not None:
        raise StoreError(
            f"run {run_id} and the stored run {other[0]} start alike, one id the start of the other: `forget` "
            f"and `history` could not tell them apart. Nothing was imported; {WHAT_TO_DO}"
        )


def refuse_another_machine_of_the_same_id(
    connection: sqlite3.Connection, result: Result, this_machine: tuple[str, str] | None
) -> None:
    """StoreError when `result`'s machine id is this machine's or a stored machine's, under another name: one id
    is one machine, and a session claiming another's would pool its runs into that machine's rows."""
    machine_id, name = result.machine["machine_id"], result.machine["machine_name"]
    stored = connection.execute("SELECT machine_name FROM machines WHERE machine_id = ?", (machine_id,)).fetchone()
    known = [("a stored machine", stored[0])] if stored is not None else []
    if this_machine is not None and this_machine[0] == machine_id:
        known.append(("this machine", this_machine[1]))
    for whose, known_name in known:
        if known_name != name:
            raise StoreError(
                f"session {result.result_id} comes from a machine called {name!r} with the id {machine_id}, "
                f"which is the id of {whose}, {known_name!r}: one id is one machine, and its runs would pool "
                f"into {known_name!r}'s. Nothing was imported; export the file again from the machine that ran "
                "it, or import it into another --db"
            )


def refuse_another_session_of_the_same_id(connection: sqlite3.Connection, path: Path, result: Result) -> None:
    """Raise StoreError when `result` is not the session stored under its id (another machine's, another
    time's) or one of its runs is stored in another session: pooling those runs would mix different sessions.
    The same session again (a re-import, or another export of some of its runs) passes."""
    stored = connection.execute(
        f"SELECT {', '.join(SESSION_COLUMNS)} FROM sessions WHERE result_id = ?", (result.result_id,)
    ).fetchone()
    if stored is not None:
        incoming = session_row(result)
        for column in (
            "machine_id",
            "hostname",
            "created_utc",
            "devicebench_version",
            "machine_json",
            "config_json",
        ):
            if not same_value(stored[column], incoming[column], column.endswith("_json")):
                raise StoreError(
                    f"session {result.result_id} is already stored in {path} with another "
                    f"{column.removesuffix('_json').replace('_', ' ')}: two different sessions carry the same "
                    "id, and importing would pool the runs of one with the other's. Nothing was imported; "
                    "export the file again from the machine that ran it, or import it into another --db"
                )
    run_ids = [run.run_id for run in result.runs]
    for start in range(0, len(run_ids), 500):  # SQLite's limit on parameters in one statement
        chunk = run_ids[start : start + 500]
        other = connection.execute(
            f"SELECT run_id, result_id FROM runs WHERE run_id IN ({', '.join('?' * len(chunk))}) "
            "AND result_id != ? LIMIT 1",
            (*chunk, result.result_id),
        ).fetchone()
        if other is not None:
            raise StoreError(
                f"run {other['run_id']} of session {result.result_id} is already stored in {path} as a run "
                f"of another session ({other['result_id']}): two different runs carry the same id. Nothing "
                "was imported; export the file again from the machine that ran it, or import it into another "
                "--db"
            )
