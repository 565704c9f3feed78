"""The `devicebench` command: flags become a config, one library call does the work, tables show it.

One module per command; each registers itself on `app` when imported at the bottom of this file.

    devicebench --help
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

from devicebench import __version__
from devicebench.results.prices import PriceError, Prices, parse_prices
from devicebench.results.store import Store, StoreError, default_db_path

EXIT_FAILED_RUN = 1  # some run failed or ran out of memory; its reason is in the table and the JSON
EXIT_USAGE = 2  # the request itself was wrong: unknown workload, device, suite or value
EXIT_INTERRUPTED = 130  # Ctrl-C; everything finished before it is kept

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
LastFilter = Annotated[Optional[int], typer.Option(min=1, help="Only the N most recently started runs that match.",
                                                   show_default=False)]
BaselineOption = Annotated[str, typer.Option(
    help="What speedups are measured against: a device on each row's own machine (cpu, cuda:0), "
         "or one fixed MACHINE/DEVICE such as laptop/cpu.")]
PriceOption = Annotated[Optional[str], typer.Option(
    help="Hourly prices, e.g. cpu=0.10,cuda=2.50, or a TOML file with prices per machine: adds cost per million "
         "samples and cost against the baseline.", show_default=False)]


def open_store(db: Path | None) -> Store:
    """The results database `--db` names (or the default one), or a clear error when it is not usable."""
    try:
        return Store(default_db_path(db))
    except StoreError as error:
        raise fail(str(error)) from None


def prices_from(price: str | None) -> Prices | None:
    """`--price` read, or a clear error saying how to write it."""
    try:
        return parse_prices(price) if price else None
    except PriceError as error:
        raise fail(str(error)) from None


for _command in ("machine", "run", "sweep", "predict", "reproduce", "history", "compare", "transfer", "report",
                 "calibrate"):
    importlib.import_module(f"{__name__}.{_command}")
