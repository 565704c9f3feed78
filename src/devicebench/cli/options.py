"""What the commands share: the options that mean the same in every command, and the checks that refuse a bad
value (a file that cannot be written, a database in a missing folder, an output that would destroy an input)
before any work.

    devicebench history --last 0
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from devicebench.cli.exits import fail
from devicebench.engine.calibration_files import calibration_path
from devicebench.files import check_outputs, database_files, expanded, module_sources
from devicebench.results.prices import Prices, parse_prices
from devicebench.results.schema import LARGEST_WHOLE_NUMBER
from devicebench.results.store import Store, default_db_path
from devicebench.results.store_errors import StoreError

if TYPE_CHECKING:
    import torch

# Options that several commands share, so that each means the same everywhere.
DatabaseOption = Annotated[
    Optional[Path],
    typer.Option(
        "--db",
        help="Results database (default: $DEVICEBENCH_DB, else results.sqlite in the user data folder).",
        show_default=False,
    ),
]
WorkloadFilter = Annotated[
    Optional[str], typer.Option(help="Only this workload, or a pattern such as 'mnist-*'.", show_default=False)
]
MachineFilter = Annotated[
    Optional[str], typer.Option(help="Only this machine: its name, hostname or id prefix.", show_default=False)
]


def _run_count(value: int | None) -> int | None:
    """--last N: a count of runs, 1 or more (and one the database can compare with)."""
    if value is not None and not 1 <= value <= LARGEST_WHOLE_NUMBER:
        raise typer.BadParameter(f"{value} is no count of runs; give N ≥ 1 (at most {LARGEST_WHOLE_NUMBER:,})")
    return value


# a range of its own: typer's would print [1<=x<=9223372036854775807]
LastFilter = Annotated[
    Optional[int],
    typer.Option(
        metavar="N",
        callback=_run_count,
        show_default=False,
        help="Only the N most recently started runs that match (N ≥ 1).",
    ),
]
BaselineOption = Annotated[
    str,
    typer.Option(
        help="What speedups are measured against: a device on each row's own machine (cpu, cuda:0), "
        "or one fixed MACHINE/DEVICE such as laptop/cpu (two machines of one name are told apart by their ids, "
        "vm@3f2a1b/cpu, as the tables label them)."
    ),
]
PoolInterruptedOption = Annotated[
    bool,
    typer.Option(
        "--pool-interrupted",
        help="Pool interrupted runs (Ctrl-C, a stop) with the finished ones of the same settings; by default they "
        "get a row of their own, labelled interrupted, and are no finished row's baseline.",
    ),
]
LocalDevicesOption = Annotated[
    str, typer.Option("--devices", help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda.")
]
PriceOption = Annotated[
    Optional[str],
    typer.Option(
        help="Hourly prices, e.g. cpu=0.10,cuda=2.50, or a TOML file with prices per machine: adds cost per million "
        "samples and cost against the baseline.",
        show_default=False,
    ),
]


def check_output_file(flag: str, path: Path) -> None:
    """Refuse, before any work, a file argument that cannot be written: a folder, or one in a missing folder."""
    with _unusable_names(flag, path):
        if path.is_dir():
            raise fail(f"cannot write {flag} {path}: it is a folder; name a file inside it")
        if not path.parent.is_dir():
            raise fail(f"cannot write {flag} {path}: folder {path.parent} does not exist; create it first")


def check_folder(flag: str, path: Path | None, *, must_exist: bool = False) -> None:
    """Refuse, before any work, a folder argument that names a file (or, with `must_exist`, nothing at all)."""
    if path is None:
        return
    with _unusable_names(flag, path):
        if path.exists() and not path.is_dir():
            raise fail(f"{flag} {path} is a file, not a folder; name a folder")
        if must_exist and not path.exists():
            raise fail(f"{flag} {path} does not exist: check the path, or create the folder first (mkdir -p {path})")


@contextlib.contextmanager
def _unusable_names(flag: str, path: Path) -> Iterator[None]:
    """A name the system refuses to look up (longer than it allows, say) is a refusal, not a traceback."""
    try:
        yield
    except OSError as error:
        raise fail(f"{flag} {path}: {error.strerror or error}; name another path") from None


def local_devices_or_fail(spec: str) -> list[torch.device]:
    """The devices `--devices` names, or a clear error (a DeviceError) listing those present."""
    from devicebench.devices import (
        resolve_devices,  # torch: only for the commands that use devices
    )

    return resolve_devices(spec)


def open_store(db: Path | None, *, writes: bool = True) -> Store:
    """The results database `--db` names (or the default one), or a clear error when it is not usable.

    A --db in a missing folder is refused as --json is (a mistyped folder is not made behind the user's back); the
    default database's folder is made. A command that `writes` takes the write lock once, waiting as a write would,
    so that a locked database is refused before any work; one that only reads opens a read-only database
    read-only."""
    if db is not None:
        with _unusable_names("--db", db):
            folder = expanded(db, "--db").parent
            if not folder.is_dir():
                raise fail(f"cannot open --db {db}: folder {folder} does not exist; create it first")
    store = Store(default_db_path(db), reading_only=not writes)
    if writes:
        try:
            store.check_writable()
        except StoreError:
            store.close()
            raise
    return store


def check_outputs_or_fail(
    outputs: dict[str, Path | None],
    *,
    db: Path | None,
    reads: dict[str, Path | None] | None = None,
    data_dir: str | Path | None = None,
    modules: dict[str, str | None] | None = None,
    folders: dict[str, Path | None] | None = None,
) -> None:
    """Refuse, before any work, an output that would destroy an input or another output (files.check_outputs): the
    results database `db` names (or the default one, with SQLite's files beside it), the calibration files, the
    files of `data_dir`, `reads`, the files the command reads besides, and the source files of `modules`, the
    MODULE:FUNCTION specs it imports (--model, --data...); `folders`, the folders it writes into (--tensorboard),
    which may be none of these files. Every command that writes files asks."""
    sources: dict[str, Path | None] = {}
    for flag, spec in (modules or {}).items():
        found = module_sources(spec) if spec else []
        sources |= {
            f"the source of {flag} {spec}" + (f" ({source})" if len(found) > 1 else ""): source for source in found
        }
    check_outputs(
        dict(outputs),  # typed as check_outputs takes them: any path-like
        {**database_files(default_db_path(db)), **(reads or {}), **sources},
        input_folders={"--data-dir": data_dir},
        output_folders=dict(folders or {}),
        # a file written there, existing or not, would be read as a machine's calibration
        kept_folders={"the calibration folder": calibration_path("machine").parent},
    )


def input_is_terminal() -> bool:
    """Whether a person can answer a question (a function of its own, which tests replace with a terminal)."""
    return sys.stdin.isatty()


def confirmed(question: str, *, yes: bool) -> bool:
    """Whether the user agrees to what the command just listed (`data remove`, `forget`): True with --yes; else
    asked on the terminal. Without a terminal to ask on (a script, a pipe) it is refused: nothing is deleted
    unasked."""
    if yes:
        return True
    if not input_is_terminal():
        raise fail("refusing to delete without confirmation when input is not a terminal; add --yes")
    return typer.confirm(question)


def prices_from(price: str | None) -> Prices | None:
    """`--price` read, or a clear error (a PriceError) saying how to write it."""
    return None if price is None else parse_prices(price)  # --price '' is refused, not ignored
