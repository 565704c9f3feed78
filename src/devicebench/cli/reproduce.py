"""`devicebench reproduce`: re-run a seed experiment here and set it beside what its post published.

    devicebench reproduce S1 --quick --devices cpu
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.text import Text

from devicebench.cli import DatabaseOption, app, console, errors, fail
from devicebench.cli.run import (
    DataDirOption,
    DataOption,
    DevicesOption,
    JsonOption,
    ModeOption,
    QuietOption,
    RepeatsOption,
    SeedOption,
    TensorBoardOption,
    ThreadsOption,
    exit_for,
    plan_or_fail,
    train_and_show,
)
from devicebench.config import ConfigError, RunConfig
from devicebench.report.tables import reproduction_table
from devicebench.reproduce import (
    ReproduceError,
    reproductions,
    seed_workloads,
    seeds_without_workloads,
)
from devicebench.results.compare import compare


@app.command()
def reproduce(
    seeds: Annotated[Optional[list[str]], typer.Argument(
        help="Seed experiments S1 … S5 (`devicebench list` shows the workloads of each; docs/workloads.md the posts "
             "they come from), or all (the default).", show_default=False, metavar="SEEDS")] = None,
    quick: Annotated[bool, typer.Option("--quick", help="Reduced epochs and steps (the quick suite) instead of the "
                                                        "published settings.")] = False,
    devices: DevicesOption = "auto",
    repeats: RepeatsOption = 1,
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    data: DataOption = "auto",
    data_dir: DataDirOption = None,
    mode: ModeOption = "seed",
    json_file: JsonOption = None,
    quiet: QuietOption = False,
    db: DatabaseOption = None,
    tensorboard: TensorBoardOption = None,
) -> None:
    """Train each seed's workloads at its published settings and print published vs measured here, side by side:
    hardware, throughput, speedup and accuracy. The runs are stored like any other.

    [bold]devicebench reproduce S2 --devices cpu,cuda[/]: the CIFAR-10 MLP, 10 full epochs on each device.

    [bold]devicebench reproduce all --quick[/]: every seed, reduced, in minutes.
    """
    asked = seeds or ["all"]
    try:
        workloads = seed_workloads(asked)
        for entry in workloads:
            if entry.requires() is not None:
                errors.print(f"{entry.name} is left out: it {entry.requires()}", highlight=False)
        workloads = [entry for entry in workloads if entry.requires() is None]
        config = RunConfig(workloads=tuple(entry.name for entry in workloads), suite="quick" if quick else "seeds",
                           devices=devices, repeats=repeats, seed=seed, threads=threads, data=data,
                           data_dir=str(data_dir) if data_dir else None, mode=mode)
    except (ReproduceError, ConfigError) as error:
        raise fail(str(error)) from None
    for missing in seeds_without_workloads(asked):
        errors.print(f"{missing} has no workloads in this version of devicebench yet; skipped.", highlight=False)
    outcome = train_and_show(plan_or_fail(config), json_file=json_file, quiet=quiet, db=db, tensorboard=tensorboard)
    measured = reproductions(compare([outcome.result]))
    console.print(reproduction_table(measured))
    for entry in measured:
        if entry.outlook is not None:
            console.print(Text(entry.outlook))  # Text: a hardware name is no markup
    exit_for(outcome)


