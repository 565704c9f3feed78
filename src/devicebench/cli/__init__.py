"""The `devicebench` command: flags become a config, one library call does the work, tables show it.

One module per command; each registers itself on `app` when imported at the bottom of this file.

    devicebench --help
"""

from __future__ import annotations

import importlib
import os
from typing import Annotated

import typer
from rich.console import Console

from devicebench import __version__

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
WIDTH_WHEN_PIPED = 130  # columns for logs and pipes, where rich would otherwise fold tables into 80

console = Console()
errors = Console(stderr=True)
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
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


for _command in ("machine", "run"):
    importlib.import_module(f"{__name__}.{_command}")
