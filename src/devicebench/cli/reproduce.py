"""`devicebench reproduce`: re-run a seed experiment here and set it beside what its post published.

devicebench reproduce S1 --quick --devices cpu
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.text import Text

from devicebench.cli import DatabaseOption, app, console, errors
from devicebench.cli.session import (
    BudgetOption,
    DataDirOption,
    DataOption,
    DevicesOption,
    JsonOption,
    ModeOption,
    QuietOption,
    RepeatsOption,
    SeedOption,
    SetOption,
    TensorBoardOption,
    ThreadsOption,
    duration_seconds,
    exit_for,
    plan_or_fail,
    train_and_show,
)
from devicebench.config import RunConfig
from devicebench.report.reproduction import record_table, reproduction_table
from devicebench.reproduce import (
    record_comparisons,
    reproductions,
    seed_workloads,
    seeds_without_workloads,
)
from devicebench.results.compare import compare


@app.command()
def reproduce(
    seeds: Annotated[
        Optional[list[str]],
        typer.Argument(
            help="Seed experiments S1 … S5 (`devicebench list` shows the workloads of each; docs/workloads.md the posts "
            "they come from), or all (the default); or reference models (resnet50, bert-base, …), set beside "
            "the figures the field published of them (docs/record.md).",
            show_default=False,
            metavar="SEEDS",
        ),
    ] = None,
    quick: Annotated[
        bool,
        typer.Option("--quick", help="Reduced epochs and steps (the quick suite) instead of the published settings."),
    ] = False,
    devices: DevicesOption = "auto",
    repeats: RepeatsOption = 1,
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    data: DataOption = "auto",
    data_dir: DataDirOption = None,
    mode: ModeOption = "seed",
    every_row: Annotated[
        bool,
        typer.Option(
            "--every-row", help="For a reference model, every published row of the record, not only each GPU's fastest."
        ),
    ] = False,
    budget: BudgetOption = None,
    overrides: SetOption = None,
    json_file: JsonOption = None,
    quiet: QuietOption = False,
    db: DatabaseOption = None,
    tensorboard: TensorBoardOption = None,
) -> None:
    """Train each seed's workloads at its published settings and print published vs measured here, side by side:
    hardware, throughput, speedup and accuracy; for a reference model, the public record's figures of it
    beside this machine's, in the unit each was published in. The runs are stored like any other.

    [bold]devicebench reproduce S2 --devices cpu,cuda[/]: the CIFAR-10 MLP, 10 full epochs on each device.

    [bold]devicebench reproduce all --quick[/]: every seed, reduced, in minutes.

    [bold]devicebench reproduce resnet50 --devices cpu --budget 2m[/]: ResNet-50 beside its published GPU figures.
    """
    asked = seeds or ["all"]
    workloads = seed_workloads(asked)
    for entry in workloads:
        if entry.requires() is not None:
            errors.print(f"{entry.name} is left out: it {entry.requires()}", highlight=False)
    workloads = [entry for entry in workloads if entry.requires() is None]
    config = RunConfig(
        workloads=tuple(entry.name for entry in workloads),
        suite="quick" if quick else "seeds",
        devices=devices,
        repeats=repeats,
        seed=seed,
        threads=threads,
        data=data,
        data_dir=str(data_dir) if data_dir else None,
        mode=mode,
        budget_s=duration_seconds("--budget", budget),
        overrides=tuple(overrides or ()),
    )
    for missing in seeds_without_workloads(asked):
        errors.print(f"{missing} has no workloads in this version of devicebench yet; skipped.", highlight=False)
    outcome = train_and_show(plan_or_fail(config), json_file=json_file, quiet=quiet, db=db, tensorboard=tensorboard)
    rows = compare([outcome.result])
    measured = reproductions(rows)
    if measured:
        console.print(reproduction_table(measured))
    for reproduction in measured:
        if reproduction.outlook is not None:
            console.print(Text(reproduction.outlook))  # Text: a hardware name is no markup
    for comparison in record_comparisons(rows, every_row=every_row):
        console.print(record_table(comparison), crop=False)  # its sources whole, longer than the screen or not
    exit_for(outcome)
