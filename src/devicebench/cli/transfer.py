"""`devicebench export` and `devicebench import`: move stored runs between machines, or out to a spreadsheet.

devicebench export laptop.json --machine laptop && devicebench import laptop.json --db other.sqlite
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer

from devicebench.cli import (
    DatabaseOption,
    LastFilter,
    MachineFilter,
    WorkloadFilter,
    app,
    check_output_file,
    check_outputs_or_fail,
    console,
    fail,
    open_store,
)
from devicebench.engine.timing import wall_clock_utc
from devicebench.results.schema import Result
from devicebench.results.store import Store
from devicebench.results.transfer import (
    ResultsFileError,
    stream_results_file,
    write_csv_export,
    write_json_export,
)

EXPORT_WRITERS = {".json": write_json_export, ".csv": write_csv_export}


@app.command()
def export(
    file: Annotated[
        Path,
        typer.Argument(
            help="Where to write: FILE.json (importable again) or FILE.csv (one row per epoch).", show_default=False
        ),
    ],
    workload: WorkloadFilter = None,
    machine: MachineFilter = None,
    last: LastFilter = None,
    db: DatabaseOption = None,
) -> None:
    """Write stored runs to a JSON file for `devicebench import` on another machine, or to CSV.

    [bold]devicebench export laptop.json[/]: every stored run.

    [bold]devicebench export mnist.csv --workload 'mnist-*'[/]: the MNIST runs, one row per epoch.
    """
    write = EXPORT_WRITERS.get(file.suffix.lower())
    if write is None:
        raise fail(f"cannot export to {file}: the name must end in {' or '.join(EXPORT_WRITERS)}")
    check_output_file("to", file)
    check_outputs_or_fail({"the export file": file}, db=db)
    with open_store(db, writes=False) as store:
        stored = store.results(workload=workload, machine=machine, last=last)
        # a run still going is left out: its record is not finished, and `import` reads only finished runs
        results = [finished for result in stored if (finished := _finished_runs(result)).runs]
        live = sum(len(result.runs) for result in stored) - sum(len(result.runs) for result in results)
        if not results:  # an empty export would replace a file that may hold runs with nothing
            raise fail(_nothing_to_export(store, file, workload=workload, machine=machine, live=live))
    try:
        write(file, results)
    except OSError as error:  # a full disk, say: nothing half-written is left behind (files.write_atomically)
        raise fail(f"cannot write {file}: {error}") from None
    runs = sum(len(result.runs) for result in results)
    console.print(
        f"Wrote {runs} run{'' if runs == 1 else 's'} from {store.path} to {file}"
        + (
            f"; left out {live} still running (export again once {'it has' if live == 1 else 'they have'} ended)"
            if live
            else ""
        ),
        highlight=False,
    )


def _finished_runs(result: Result) -> Result:
    """`result` with only its runs that have ended."""
    return dataclasses.replace(result, runs=[run for run in result.runs if run.status != "running"])


def _nothing_to_export(store: Store, file: Path, *, workload: str | None, machine: str | None, live: int) -> str:
    """Why nothing was exported, naming the filters and what they could have matched."""
    machines, workloads = store.stored_names()
    kept = f"{file} was left as it is" if file.exists() else f"{file} was not written"
    if live:
        return f"nothing to export: every matching run in {store.path} is still running; export once they end; {kept}"
    if not workloads:
        return f"nothing to export: no runs are stored in {store.path} yet; {kept}"
    filters = " ".join(
        f"{flag} {value!r}" for flag, value in (("--workload", workload), ("--machine", machine)) if value is not None
    )
    return (
        f"nothing to export: no run stored in {store.path} matches {filters}; {kept}. Stored are machines: "
        f"{', '.join(machines)}; workloads: {', '.join(workloads)}"
    )


@app.command("import")
def import_command(
    files: Annotated[
        list[Path],
        typer.Argument(help="Files from `devicebench export` or `devicebench run --json`.", show_default=False),
    ],
    db: DatabaseOption = None,
) -> None:
    """Add runs from other machines; runs already stored are skipped, so importing twice adds nothing.

    Each file is imported whole or not at all.

    [bold]devicebench import server.json gpu-box.json[/]
    """
    from devicebench.environment import machine_fingerprint  # here: it imports torch, which export must not

    failure: typer.Exit | None = None
    fingerprint = machine_fingerprint()
    this_machine = (fingerprint["machine_id"], fingerprint["machine_name"])
    with open_store(db) as store:
        for file in files:
            runs: list[int] = []  # each session's, as it is read
            try:  # read as it is stored, in one transaction: a wrong field anywhere rolls back the whole file
                added = store.import_results(
                    _counting_runs(stream_results_file(file, now_utc=wall_clock_utc()), runs), this_machine=this_machine
                )
            except ResultsFileError as error:
                failure = fail(str(error))  # say so now, and go on with the other files
                continue
            present = sum(runs) - added
            console.print(
                f"{file}: {added} run{'' if added == 1 else 's'} added, {present} already present", highlight=False
            )
    if failure is not None:
        raise failure


def _counting_runs(results: Iterator[Result], runs: list[int]) -> Iterator[Result]:
    """`results`, each session's number of runs appended to `runs` as it passes on to be stored."""
    for result in results:
        runs.append(len(result.runs))
        yield result
