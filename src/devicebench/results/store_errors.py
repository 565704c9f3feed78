"""What can be wrong with the results database, in words: the store's errors, the checks that refuse a file before
SQLite opens it, and what each SQLite error means for the file and what to do about it.

    python -c "from devicebench.results.store_errors import StoreError; print(StoreError.exit_status)"
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from devicebench.errors import DevicebenchError
from devicebench.files import DB_VARIABLE, SQLITE_HEADER, UnusableFile, require_regular_file

BUSY_TIMEOUT_S = 30.0  # how long a write waits for another process's write to finish before giving up
WHAT_TO_DO = f"pass another --db (or set {DB_VARIABLE}) to keep results elsewhere"
DAMAGED = (
    "restore it from a backup, or save what can still be read with `sqlite3 FILE .recover` into a new "
    f"file; or {WHAT_TO_DO}"
)


class StoreError(DevicebenchError, RuntimeError):
    """The database file cannot be used: it says which file, what is wrong with it, and what to do."""


class UnreadableRun(StoreError):
    """A run that reading it back would refuse; it was not stored."""


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`; None when there is none."""
    try:
        status = os.stat(path)
    except FileNotFoundError:
        return None
    return status.st_dev, status.st_ino


def cannot_be_written(error: sqlite3.Error) -> bool:
    """Whether `error` says the database (or its folder) cannot be written, as opposed to locked or damaged."""
    name, message = getattr(error, "sqlite_errorname", ""), str(error)
    return name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or any(
        words in message for words in ("readonly", "unable to open")
    )


def refuse_if_not_a_file(path: Path) -> None:
    """Refuse a FIFO, a device or a socket as the database: reading one would hang or never end."""
    try:
        if not path.is_dir():  # a folder gets its own words when SQLite tries to open it
            require_regular_file(path, "the results database")
    except FileNotFoundError:
        return  # a new database
    except UnusableFile as error:
        raise StoreError(f"{error}. It was left as it is; {WHAT_TO_DO}") from None
    except OSError:
        return  # an unusable name: refuse_if_not_sqlite and SQLite say what is wrong


def refuse_if_not_sqlite(path: Path) -> None:
    """Refuse a file that is neither empty nor SQLite before SQLite opens it, so nothing can write to it."""
    try:
        with path.open("rb") as file:
            header = file.read(len(SQLITE_HEADER))
    except (FileNotFoundError, IsADirectoryError):
        return  # a new database; a folder fails clearly when SQLite tries to open it
    except OSError as error:
        raise StoreError(f"cannot read the results database {path} ({error.strerror}); {WHAT_TO_DO}") from None
    if header and header != SQLITE_HEADER:
        raise StoreError(
            f"{path} is not a devicebench results database: it is not an SQLite file (damaged, or "
            f"another kind of file). It was left as it is; {WHAT_TO_DO}"
        )


def explain(error: sqlite3.Error, path: Path, *, unchanged: bool | str = False) -> str:
    """What `error` means for the database at `path`, in words, and what to do about it. `unchanged`: say that the
    failed transaction was rolled back, leaving the file as it was; as text, what the file holds then instead."""
    name = getattr(error, "sqlite_errorname", "")  # SQLITE_FULL, SQLITE_BUSY...: absent from errors made in Python
    message = str(error)
    if name == "SQLITE_FULL" or "disk is full" in message:
        problem, advice = "the disk holding it is full", "free some space on that disk, or " + WHAT_TO_DO
    elif name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in message:
        problem, advice = "it is damaged", DAMAGED
    elif "no such table" in message or "no such column" in message:
        problem, advice = "part of devicebench's tables is missing from it (edited by another program?)", DAMAGED
    elif name.startswith("SQLITE_CONSTRAINT") or isinstance(error, sqlite3.IntegrityError):
        problem, advice = "what it holds contradicts what was to be added (damaged, or edited by hand)", DAMAGED
    elif name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in message:
        problem = f"it is locked by another process, which has held it for more than {BUSY_TIMEOUT_S:g} s"
        advice = (
            "close the program that has it open (another devicebench writing to it, or a database browser) or "
            "wait for it to finish, then try again; or " + WHAT_TO_DO
        )
    elif path.is_dir():  # SQLite's "unable to open database file" says no more
        problem, advice = "it is a folder, not a database file", WHAT_TO_DO
    elif name.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN")) or any(
        words in message for words in ("readonly", "unable to open")
    ):
        problem = f"it or its folder {path.parent} cannot be written"
        advice = "make them writable, or " + WHAT_TO_DO
    elif name.startswith("SQLITE_IOERR") or "I/O error" in message:
        problem, advice = "the disk failed to read or write it", "check the disk, or " + WHAT_TO_DO
    else:
        problem, advice = "SQLite failed", WHAT_TO_DO
    kept = "; the file is unchanged, with everything stored in it before" if unchanged is True else ""
    if isinstance(unchanged, str):
        kept = f"; {unchanged}"
    return f"{problem} ({message}){kept}. To go on, {advice}"
