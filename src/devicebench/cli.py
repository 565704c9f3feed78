"""The `devicebench` command: flags become a RunConfig, one library call does the work, tables show it.

    devicebench --help
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from devicebench import __version__, runner
from devicebench.config import ConfigError, RunConfig
from devicebench.devices import DeviceError
from devicebench.environment import machine_fingerprint
from devicebench.report.progress import RichReporter
from devicebench.report.tables import machine_view, results_tables, workloads_table
from devicebench.workloads import Workload, list_workloads

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


def _fail(message: str, code: int = EXIT_USAGE) -> typer.Exit:
    errors.print(f"[bold red]error:[/] {message}", highlight=False)
    return typer.Exit(code)


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


@app.command()
def devices(
    as_json: Annotated[bool, typer.Option("--json", help="Print the machine fingerprint as JSON.")] = False,
) -> None:
    """What this machine has: CPU, cores, ISA, memory, every GPU torch can see, and why there is none."""
    fingerprint = machine_fingerprint()
    if as_json:
        print(json.dumps(fingerprint, indent=2))
    else:
        console.print(machine_view(fingerprint))


@app.command("list")
def list_command(
    pattern: Annotated[str, typer.Argument(help="Shell-style name pattern, e.g. 'mnist-*'.")] = "*",
    as_json: Annotated[bool, typer.Option("--json", help="Print the workloads as JSON.")] = False,
) -> None:
    """The workloads: their seed experiment, dataset, size, default settings and published figures."""
    found = list_workloads(pattern)
    if not found:
        known = ", ".join(entry.name for entry in list_workloads())
        raise _fail(f"no workload matches {pattern!r}; known workloads: {known}")
    if as_json:
        print(json.dumps([_workload_json(entry) for entry in found], indent=2))
    else:
        console.print(workloads_table(found))


def _workload_json(entry: Workload) -> dict:
    published = entry.published
    return {
        "name": entry.name,
        "seed": entry.seed,
        "dataset": entry.dataset,
        "summary": entry.summary,
        "parameter_count": entry.parameter_count(),
        "defaults": dict(entry.defaults),
        "quick": {"epochs": entry.quick.epochs, "max_steps": entry.quick.max_steps,
                  "max_eval_steps": entry.quick.max_eval_steps},
        "published": {
            "speedup": published.speedup,
            "basis": published.basis,
            "hardware": published.hardware,
            "accuracy": published.accuracy,
            "accuracy_kind": published.accuracy_kind,
            "epoch_time_s": dict(published.epoch_time_s),
            "end_to_end_s": dict(published.end_to_end_s),
            "samples_per_s": dict(published.samples_per_s),
        },
    }


@app.command()
def run(
    workloads: Annotated[
        Optional[list[str]],
        typer.Argument(help="Workloads to run (names or patterns such as 'mnist-*'); none = the suite's.",
                       show_default=False),
    ] = None,
    suite: Annotated[
        Optional[str],
        typer.Option(help="quick: every workload, reduced (the default with no names); "
                          "seeds: the published settings (the default with names).", show_default=False),
    ] = None,
    devices: Annotated[
        str, typer.Option(help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda.")
    ] = "auto",
    epochs: Annotated[Optional[int], typer.Option(help="Epochs per run; the first is warm-up.", show_default=False)] = None,
    batch_size: Annotated[Optional[int], typer.Option(help="Samples per step (default: the seed's).",
                                                      show_default=False)] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Cap on training steps per epoch.", show_default=False)] = None,
    max_eval_steps: Annotated[Optional[int], typer.Option(help="Cap on evaluation batches per epoch.",
                                                          show_default=False)] = None,
    repeats: Annotated[int, typer.Option(help="Runs per (workload, device), for the spread.")] = 1,
    seed: Annotated[int, typer.Option(help="Random seed: weights, data order, synthetic data.")] = 0,
    threads: Annotated[Optional[int], typer.Option(help="CPU threads for torch (default: torch's choice).",
                                                   show_default=False)] = None,
    data: Annotated[str, typer.Option(help="auto (real if cached or downloadable, else synthetic, loudly), "
                                           "real, or synthetic.")] = "auto",
    data_dir: Annotated[Optional[Path], typer.Option(
        help="Folder holding the datasets (default: $DEVICEBENCH_DATA, else the user cache).",
        show_default=False)] = None,
    target_accuracy: Annotated[Optional[float], typer.Option(
        help="Record the time to reach this test accuracy (a fraction, e.g. 0.98).", show_default=False)] = None,
    json_file: Annotated[Optional[Path], typer.Option("--json", help="Write every measurement to this JSON file.",
                                                      show_default=False)] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars or epoch lines.")] = False,
) -> None:
    """Train workloads on each device and print throughput, epoch times, accuracy and the speedup vs CPU.

    [bold]devicebench run[/]: every workload, reduced (the quick suite), on every device.

    [bold]devicebench run mnist-cnn2 --devices cpu,cuda[/]: one workload at its published settings.

    [bold]devicebench run 'cifar*' --suite quick --repeats 3 --json out.json[/]: three repeats, saved.

    Exit status: 0 done, 1 a run failed or ran out of memory, 2 a bad request, 130 interrupted (Ctrl-C).
    """
    try:
        config = RunConfig(
            workloads=tuple(workloads or ()), suite=suite, devices=devices, epochs=epochs, batch_size=batch_size,
            max_steps=max_steps, max_eval_steps=max_eval_steps, repeats=repeats, seed=seed, threads=threads,
            data=data, data_dir=str(data_dir) if data_dir else None, target_accuracy=target_accuracy,
        )
    except ConfigError as error:
        raise _fail(str(error)) from None
    if json_file is not None and not json_file.parent.is_dir():  # find out now, not after an hour of training
        raise _fail(f"cannot write --json {json_file}: folder {json_file.parent} does not exist; create it first")
    reporter = RichReporter(errors, quiet=quiet)
    try:
        result = runner.run(config, reporter)
    except DeviceError as error:
        raise _fail(str(error)) from None
    finally:
        reporter.close()
    for table in results_tables(result):
        console.print(table)
    if json_file is not None:
        try:
            result.write_json(json_file)
        except OSError as error:  # a full disk, say: the tables above still hold every number
            raise _fail(f"could not write {json_file} ({error}); the tables above hold the results",
                        EXIT_FAILED_RUN) from None
        errors.print(f"Results written to {json_file}")
    if result.interrupted:
        finished = sum(len(record.epochs) for record in result.runs)
        kept = f"{finished} finished epoch{'' if finished == 1 else 's'}"
        raise _fail(f"interrupted; {kept} kept above" + (f" and in {json_file}" if json_file else ""),
                    EXIT_INTERRUPTED)
    if any(record.status in ("failed", "oom") for record in result.runs):
        raise typer.Exit(EXIT_FAILED_RUN)

