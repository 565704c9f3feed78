"""`devicebench compare`: stored runs, per workload, as rows of (machine, device, settings) with speedups.

devicebench compare --workload 'mnist-*' --price cpu=0.10,cuda=2.50
"""

from __future__ import annotations

from typing import Annotated

import typer

from devicebench.cli import (
    BaselineOption,
    DatabaseOption,
    LastFilter,
    MachineFilter,
    PoolInterruptedOption,
    PriceOption,
    WorkloadFilter,
    app,
    console,
    errors,
    open_store,
    prices_from,
)
from devicebench.report.tables import comparison_tables
from devicebench.results.compare import DEFAULT_BASELINE, compare
from devicebench.results.store import baselines_note, own_sessions

WideOption = Annotated[
    bool,
    typer.Option(
        "--wide",
        help="Every column: epoch time, ms/step, TFLOP/s, busy, warm-up, end to end, published figures, cost "
        "and energy (the JSON holds them all either way).",
    ),
]


@app.command("compare")
def compare_command(
    workload: WorkloadFilter = None,
    machine: MachineFilter = None,
    last: LastFilter = None,
    baseline: BaselineOption = DEFAULT_BASELINE,
    price: PriceOption = None,
    db: DatabaseOption = None,
    wide: WideOption = False,
    pool_interrupted: PoolInterruptedOption = False,
) -> None:
    """Compare stored runs across devices and machines: medians with spread, speedups with rank intervals of stated level.

    Runs whose settings change speed (batch size, data source, threads…) are never pooled: they get rows of
    their own, and the table names what sets them apart.

    [bold]devicebench compare --baseline laptop/cpu --price cpu=0.10,cuda=2.50[/]: every machine against the
    laptop's CPU, with the cost of a job on each.
    """
    prices = prices_from(price)
    with open_store(db, writes=False) as store:
        results, baselines = own_sessions(store.results(workload=workload, machine=machine, last=last))
    if baselines:
        errors.print(baselines_note(baselines), highlight=False)
    if not results:
        console.print(
            f"No stored runs match in {store.path}. Make some with `devicebench run`, or bring some from "
            "another machine with `devicebench import FILE.json`.",
            highlight=False,
        )
        return
    for table in comparison_tables(
        compare(results, baseline=baseline, prices=prices, pool_interrupted=pool_interrupted), wide=wide
    ):
        console.print(table)
