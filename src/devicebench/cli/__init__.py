"""The `devicebench` command: flags become a config, one library call does the work, tables show it.

One module per command; each registers itself on `app` when imported at the bottom of this file.

    devicebench --help
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer
from rich.console import Console
from rich.markup import escape

from devicebench.config import LARGEST_WHOLE_NUMBER
from devicebench.devices import DeviceError, resolve_devices
from devicebench.results.prices import PriceError, Prices, parse_prices
from devicebench.results.store import Store, StoreError, default_db_path
from devicebench.version import __version__

EXIT_FAILED_RUN = 1  # some run failed or ran out of memory; its reason is in the table and the JSON
EXIT_USAGE = 2  # the request itself was wrong: unknown workload, device, suite or value
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT); everything finished before it is kept
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143: stopped by SIGTERM (kill, a scheduler, a container), kept the same way

app = typer.Typer(
    help="Measure how much faster deep-learning training runs on one device than another, and why.\n\n"
    "Trains the published CPU-vs-GPU experiments on every device this machine has, "
    "with one PyTorch engine, and prints throughput, epoch time, accuracy and the speedup with its spread.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
)
WIDTH_WHEN_PIPED = 200  # columns for logs and pipes, where rich would otherwise fold the 12-column tables

console = Console()
errors = Console(stderr=True, soft_wrap=True)  # messages and paths stay whole lines in logs; panels still fit
for _stream in (console, errors):
    if not _stream.is_terminal and "COLUMNS" not in os.environ:
        _stream.width = WIDTH_WHEN_PIPED


def _version(value: bool) -> None:
    if value:
        console.print(f"devicebench {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """devicebench: how much faster does this model train on that device, why, and what does it cost?"""




def fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    """Print `message` as an error and return the Exit to raise with `code`."""
    errors.print(f"[bold red]error:[/] {escape(message)}", highlight=False)  # '[report]' is text, not markup
    return typer.Exit(code)


# Options that several commands share, so that each means the same everywhere.
DatabaseOption = Annotated[Optional[Path], typer.Option(
    "--db", help="Results database (default: $DEVICEBENCH_DB, else results.sqlite in the user data folder).",
    show_default=False)]
WorkloadFilter = Annotated[Optional[str], typer.Option(help="Only this workload, or a pattern such as 'mnist-*'.",
                                                       show_default=False)]
MachineFilter = Annotated[Optional[str], typer.Option(help="Only this machine: its name, hostname or id prefix.",
                                                      show_default=False)]
LastFilter = Annotated[Optional[int], typer.Option(min=1, max=LARGEST_WHOLE_NUMBER, show_default=False,
                                                   help="Only the N most recently started runs that match.")]
BaselineOption = Annotated[str, typer.Option(
    help="What speedups are measured against: a device on each row's own machine (cpu, cuda:0), "
         "or one fixed MACHINE/DEVICE such as laptop/cpu.")]
LocalDevicesOption = Annotated[str, typer.Option(
    "--devices", help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda.")]
PriceOption = Annotated[Optional[str], typer.Option(
    help="Hourly prices, e.g. cpu=0.10,cuda=2.50, or a TOML file with prices per machine: adds cost per million "
         "samples and cost against the baseline.", show_default=False)]


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


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[list[int]]:
    """While inside, SIGTERM stops work as Ctrl-C does (a KeyboardInterrupt), so what finished is kept the same way.

    Yields a list that holds signal.SIGTERM once one arrived, for the exit status. Outside the main thread (where
    Python cannot install handlers) nothing changes.
    """
    received: list[int] = []

    def interrupt(number: int, frame: object) -> None:
        received.append(number)
        signal.default_int_handler(number, frame)  # raises KeyboardInterrupt, as a Ctrl-C would

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread
        yield received
        return
    try:
        yield received
    finally:
        signal.signal(signal.SIGTERM, previous)


def local_devices_or_fail(spec: str) -> list[torch.device]:
    """The devices `--devices` names, or a clear error listing those present."""
    try:
        return resolve_devices(spec)
    except DeviceError as error:
        raise fail(str(error)) from None


def open_store(db: Path | None) -> Store:
    """The results database `--db` names (or the default one), or a clear error when it is not usable."""
    try:
        return Store(default_db_path(db))
    except StoreError as error:
        raise fail(str(error)) from None


def prices_from(price: str | None) -> Prices | None:
    """`--price` read, or a clear error saying how to write it."""
    try:
        return None if price is None else parse_prices(price)  # --price '' is refused, not ignored
    except PriceError as error:
        raise fail(str(error)) from None


for _command in ("machine", "run", "sweep", "predict", "reproduce", "history", "compare", "transfer", "report",
                 "calibrate", "check"):
    importlib.import_module(f"{__name__}.{_command}")
