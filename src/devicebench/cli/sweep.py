"""`devicebench sweep`: one workload over a grid of batch sizes, loader workers and parameters, per device.

devicebench sweep --help
"""

from __future__ import annotations

import itertools
from typing import Annotated, Optional

import typer

from devicebench.choices import MODES
from devicebench.cli import DatabaseOption, app, fail
from devicebench.cli.compare import WideOption
from devicebench.cli.session import (
    DataDirOption,
    DataOption,
    DevicesOption,
    JsonOption,
    QuietOption,
    RepeatsOption,
    SeedOption,
    ThreadsOption,
    exit_for,
    plan_or_fail,
    train_and_show,
)
from devicebench.config import RunConfig
from devicebench.report.tables import sweep_tables
from devicebench.results.compare import compare

MOST_GRID_POINTS = 200  # a typo like --batch-size 1,2,...,1000 should be caught, not run for a week


def parse_values(flag: str, text: str | None) -> list[int | None]:
    """'32,64,128' as [32, 64, 128]; None (flag not given) as [None]: the default."""
    if text is None:
        return [None]
    parts = text.split(",")
    if not any(part.strip() for part in parts):
        raise fail(f"{flag} {text!r} names no values")
    try:
        values = [int(part) for part in parts]  # '32,,64' is a value left out, refused as any word is
    except ValueError:
        raise fail(f"{flag} {text!r}: write whole numbers separated by single commas, e.g. {flag} 32,64,128") from None
    return list(dict.fromkeys(values))  # each value once, in the order given


def parse_set_grid(items: list[str]) -> list[tuple[str, ...]]:
    """['depth=8,16', 'augment=false'] as every combination: [('depth=8', 'augment=false'), ('depth=16', ...)]."""
    axes = []
    for item in items:
        name, equals, values = item.partition("=")
        listed = values.split(",")
        if not equals or not name.strip() or not all(value.strip() for value in listed):
            # 'depth=,' names no value, like 'depth='; 'depth=8,,16' leaves one out
            raise fail(f"--set {item!r} is not KEY=VALUE[,VALUE...]; write e.g. --set depth=8,16,32")
        axes.append([f"{name.strip()}={value.strip()}" for value in listed])
    return list(itertools.product(*axes))


@app.command()
def sweep(
    workload: Annotated[str, typer.Argument(help="The workload to sweep, e.g. catdog-original.", show_default=False)],
    batch_size: Annotated[
        Optional[str],
        typer.Option(help="Batch sizes to try, e.g. 32,64,128,512 (default: the seed's).", show_default=False),
    ] = None,
    workers: Annotated[
        Optional[str],
        typer.Option(
            help="Loader processes to try, e.g. 0,2,4 (default: devicebench's choice, see `run --help`).",
            show_default=False,
        ),
    ] = None,
    overrides: Annotated[
        Optional[list[str]],
        typer.Option(
            "--set",
            help="A workload parameter and its values, e.g. --set depth=8,16,32 (repeatable: every combination runs).",
            show_default=False,
        ),
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="seed, tuned, or seed,tuned: both, to see what tuning each device is worth (see `run --help`)."
        ),
    ] = "seed",
    devices: DevicesOption = "auto",
    epochs: Annotated[
        Optional[int], typer.Option(help="Epochs per point; the first is warm-up (default 3).", show_default=False)
    ] = None,
    max_steps: Annotated[
        Optional[int],
        typer.Option(help="Cap on training steps per epoch (default: the quick suite's).", show_default=False),
    ] = None,
    max_eval_steps: Annotated[
        Optional[int], typer.Option(help="Cap on evaluation batches per epoch.", show_default=False)
    ] = None,
    repeats: RepeatsOption = 1,
    seed: SeedOption = 0,
    threads: ThreadsOption = None,
    data: DataOption = "auto",
    data_dir: DataDirOption = None,
    json_file: JsonOption = None,
    quiet: QuietOption = False,
    db: DatabaseOption = None,
    wide: WideOption = False,
) -> None:
    """Train one workload at every point of a grid on each device, store every point, and print a throughput
    table per device with the wait-for-data share and the input-bound/compute-bound verdict of each point.

    Points train at the quick suite's reduced length unless --epochs / --max-steps say otherwise.

    [bold]devicebench sweep catdog-original --batch-size 32,64 --workers 0,2 --max-steps 30 --data-dir pets/[/]

    [bold]devicebench sweep catdog-deep --set depth=8,16,32 --devices cpu,cuda[/]: the GPU/CPU ratio against depth.
    """
    modes = list(dict.fromkeys(part.strip() for part in mode.split(",")))
    if any(part not in MODES for part in modes):  # '' and 'seed,,tuned' too
        raise fail(f"--mode {mode!r}: write seed, tuned, or seed,tuned")
    # Every seed point before any tuned one: tuned mode's allocator setting outlives its runs (engine/tuning_applied.py)
    grid = [
        (size, loaders, settings, point_mode)
        for point_mode, size, loaders, settings in itertools.product(
            modes,
            parse_values("--batch-size", batch_size),
            parse_values("--workers", workers),
            parse_set_grid(overrides or []),
        )
    ]
    if len(grid) > MOST_GRID_POINTS:
        raise fail(f"the grid has {len(grid)} points (more than {MOST_GRID_POINTS}); sweep fewer values at once")
    configs = [
        RunConfig(
            workloads=(workload,),
            suite="quick",
            devices=devices,
            epochs=epochs,
            batch_size=size,
            max_steps=max_steps,
            max_eval_steps=max_eval_steps,
            repeats=repeats,
            seed=seed,
            threads=threads,
            data=data,
            data_dir=str(data_dir) if data_dir else None,
            workers=loaders,
            overrides=settings,
            mode=point_mode,
        )
        for size, loaders, settings, point_mode in grid
    ]
    job_plan = plan_or_fail(configs)
    if len(job_plan.workloads) != 1:
        raise fail(f"sweep takes one workload; {workload!r} matches several")
    swept = (
        (["batch_size"] if batch_size else [])
        + (["workers"] if workers else [])
        + [item.partition("=")[0].strip() for item in overrides or []]
        + (["mode"] if len(modes) > 1 else [])
    )
    outcome = train_and_show(
        job_plan,
        json_file=json_file,
        quiet=quiet,
        db=db,
        tensorboard=None,
        tables=lambda result: sweep_tables(compare([result]), swept, wide=wide),
    )
    exit_for(outcome)
