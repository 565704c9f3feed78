"""`devicebench history`: every stored run, one line each.

devicebench history --workload 'mnist-*' --last 10
"""

from __future__ import annotations

import json
from typing import Annotated, Optional, get_args

import typer

from devicebench.cli import (
    DatabaseOption,
    LastFilter,
    MachineFilter,
    WorkloadFilter,
    app,
    console,
    errors,
    fail,
    open_store,
)
from devicebench.report.history import history_table
from devicebench.results.schema import RunStatus
from devicebench.results.store import baselines_note, own_sessions
from devicebench.results.transfer import export_document


@app.command()
def history(
    workload: WorkloadFilter = None,
    machine: MachineFilter = None,
    last: LastFilter = None,
    status: Annotated[
        Optional[str],
        typer.Option(help=f"Only runs that ended so: {', '.join(get_args(RunStatus))}.", show_default=False),
    ] = None,
    db: DatabaseOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the runs as an export document (JSON).")] = False,
    wide: Annotated[bool, typer.Option("--wide", help="Add each run's epochs, epoch time, data and batch.")] = False,
) -> None:
    """The stored runs, oldest first: when, where, what, how fast and how accurate.

    [bold]devicebench history --machine laptop --last 5[/]: the laptop's five latest runs.
    """
    if status is not None and status not in get_args(RunStatus):
        raise fail(f"unknown status {status!r}; a run's status is one of {', '.join(get_args(RunStatus))}")
    with open_store(db, writes=False) as store:
        results, baselines = own_sessions(store.results(workload=workload, machine=machine, last=last, status=status))
    if baselines:
        errors.print(baselines_note(baselines), highlight=False)
    if as_json:
        print(json.dumps(export_document(results), indent=2))
    elif not results:
        filtered = any(value is not None for value in (workload, machine, last, status))
        found = f"No runs in {store.path} match these filters." if filtered else f"No runs stored in {store.path} yet."
        console.print(
            f"{found} Make some with `devicebench run`, or bring some from another machine with "
            "`devicebench import FILE.json`.",
            highlight=False,
        )
    else:
        console.print(history_table(results, store.path, wide=wide))
