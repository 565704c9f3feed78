"""`devicebench forget`: delete stored runs, by the ids `history` shows, with their epochs. A session left with no
run goes too. It lists what it will delete and asks first.

    devicebench history && devicebench forget 3f9c2a1b
"""

from __future__ import annotations

from typing import Annotated

import typer

from devicebench.cli import DatabaseOption, app, confirmed, console, fail, open_store


@app.command()
def forget(
    run_ids: Annotated[
        list[str],
        typer.Argument(
            help="Run ids, whole or as the first characters `devicebench history` shows (one run each).",
            show_default=False,
        ),
    ],
    db: DatabaseOption = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete stored runs by id (as `history` shows them), with their epochs; asks first.

    A session left with no run is deleted with its last run. Nothing else changes: what `history`, `compare`,
    `report`, `export` and `estimate` read simply no longer holds these runs.

    [bold]devicebench forget 3f9c2a1b 77e0d415[/]: two runs, after a yes.
    """
    with open_store(db) as store:  # a database that cannot be written is refused before anything is asked
        chosen: list[str] = []
        for asked in run_ids:
            # a whole id as stored first (one that another id starts with, or " " from an old import), then the start
            # of one as `history` shows it
            found = store.run_ids_starting(asked) if asked else []
            if asked in found:
                found = [asked]
            elif asked.strip() != asked:
                found = store.run_ids_starting(asked.strip()) if asked.strip() else []
            if not found:
                raise fail(
                    f"no run {asked!r} in {store.path}; `devicebench history` lists the stored runs and their "
                    "ids. Nothing was deleted"
                )
            if len(found) > 1:
                raise fail(
                    f"{asked!r} starts {len(found)} run ids in {store.path} ({', '.join(found[:3])}"
                    f"{', ...' if len(found) > 3 else ''}); give more of the id. Nothing was deleted"
                )
            chosen.append(found[0])
        chosen = list(dict.fromkeys(chosen))
        doomed = [(result, run) for result in store.results() for run in result.runs if run.run_id in chosen]
        still_running = [run.run_id[:8] for _, run in doomed if run.status == "running"]
        if still_running:
            raise fail(
                f"run {', '.join(still_running)} is still running; stop it first, or forget it once it has "
                "ended. Nothing was deleted"
            )
        for result, run in doomed:
            epochs = f"{len(run.epochs)} epoch{'' if len(run.epochs) == 1 else 's'}"
            console.print(
                f"{run.run_id[:8]}  {run.started_utc}  {result.machine.get('machine_name', '?')}  "
                f"{run.workload} on {run.device} ({run.device_name}), {run.status}, {epochs}",
                highlight=False,
                markup=False,
            )
        count = f"{len(doomed)} run{'' if len(doomed) == 1 else 's'}"
        these = "this run" if len(doomed) == 1 else f"these {count}"
        if not confirmed(f"Delete {these} from {store.path}?", yes=yes):
            console.print("Nothing deleted.")
            return
        _, sessions = store.forget_runs(chosen)
    console.print(
        f"Deleted {count} from {store.path}"
        + (f", and {sessions} session{'' if sessions == 1 else 's'} left with no run" if sessions else ""),
        highlight=False,
        markup=False,
    )
