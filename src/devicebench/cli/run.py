"""`devicebench run`: train workloads on devices and print the comparison.

    devicebench run --help
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from devicebench import runner
from devicebench.cli import (
    EXIT_FAILED_RUN,
    EXIT_INTERRUPTED,
    app,
    console,
    errors,
    fail,
)
from devicebench.config import ConfigError, RunConfig
from devicebench.devices import DeviceError
from devicebench.report.progress import RichReporter
from devicebench.report.tables import comparison_tables
from devicebench.results.compare import compare


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
        raise fail(str(error)) from None
    if json_file is not None and not json_file.parent.is_dir():  # find out now, not after an hour of training
        raise fail(f"cannot write --json {json_file}: folder {json_file.parent} does not exist; create it first")
    reporter = RichReporter(errors, quiet=quiet)
    try:
        result = runner.run(config, reporter)
    except DeviceError as error:
        raise fail(str(error)) from None
    finally:
        reporter.close()
    for table in comparison_tables(compare([result])):
        console.print(table)
    if json_file is not None:
        try:
            result.write_json(json_file)
        except OSError as error:  # a full disk, say: the tables above still hold every number
            raise fail(f"could not write {json_file} ({error}); the tables above hold the results",
                        EXIT_FAILED_RUN) from None
        errors.print(f"Results written to {json_file}")
    if result.interrupted:
        finished = sum(len(record.epochs) for record in result.runs)
        kept = f"{finished} finished epoch{'' if finished == 1 else 's'}"
        raise fail(f"interrupted; {kept} kept above" + (f" and in {json_file}" if json_file else ""),
                    EXIT_INTERRUPTED)
    if any(record.status in ("failed", "oom") for record in result.runs):
        raise typer.Exit(EXIT_FAILED_RUN)
