"""`devicebench check`: is the GPU really doing the work, and can this machine's numbers be trusted?

devicebench check --devices cpu
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from devicebench.check import document, run_checks
from devicebench.check.findings import FAIL, PASS, WARN, Check
from devicebench.cli import (
    EXIT_FAILED_RUN,
    LocalDevicesOption,
    app,
    console,
    errors,
    local_devices_or_fail,
    stopped,
)
from devicebench.report.fitting import FittedTable, fitted

STATUS_STYLES = {PASS: "green", WARN: "yellow", FAIL: "bold red"}
MACHINE_WIDE = "machine"  # what the Device column says of a check about the whole machine


@app.command()
def check(
    devices: LocalDevicesOption = "auto",
    as_json: Annotated[
        bool,
        typer.Option(
            "--json", help='Print {"checks": [...], "failed": N, "warned": N, "passed": N} instead of the table.'
        ),
    ] = False,
) -> None:
    """Check this machine in under a minute: the PyTorch build against its GPUs and drivers, the CPU's threads,
    ISA and load, and on each device a short training run (does the work land there?), timing with and without
    synchronizing (does the clock wait for it?) and a short calibration against the datasheet (does it reach its
    rating?). Each check passes, warns or fails, with the figure measured and what to do.

    [bold]devicebench check[/]: every local device.

    [bold]devicebench check --devices cuda:0 --json[/]: one GPU, as JSON.

    Exits 1 when a check fails (a warn does not), 2 for an unknown device. The short calibration is not stored.
    """
    chosen = local_devices_or_fail(devices)
    try:
        with errors.status("Checking") as status:
            checks = run_checks(chosen, progress=lambda step: status.update(f"Checking {step}"))
    except KeyboardInterrupt:
        raise stopped("nothing to show") from None
    found = document(checks)
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        console.print(checks_table(checks, found))
    if found["failed"]:
        raise typer.Exit(EXIT_FAILED_RUN)


def checks_table(checks: list[Check], found: dict) -> FittedTable:
    """One row a check, grouped by device (the machine first, then each device in the order they ran) and by group
    within it; each warn or fail says what to do under its figure."""
    table = Table(
        title="devicebench check",
        title_justify="left",
        caption_justify="left",
        caption=f"{found['failed']} failed, {found['warned']} warned, {found['passed']} passed. "
        "A warn leaves the numbers usable but explains why they may be low or vary.",
    )
    for column in ("Device", "Group", "Check", "Status", "Measured, and what to do"):
        table.add_column(column, overflow="fold")
    previous: tuple[str, str] | None = None
    for index, entry in enumerate(checks):
        device = entry.device or MACHINE_WIDE
        next_device = (checks[index + 1].device or MACHINE_WIDE) if index + 1 < len(checks) else None
        advice = f"\n[{STATUS_STYLES[entry.status]}]→ {escape(entry.advice)}[/]" if entry.advice else ""
        table.add_row(
            "" if previous and device == previous[0] else device,
            "" if (device, entry.group) == previous else entry.group,
            entry.name,
            f"[{STATUS_STYLES[entry.status]}]{entry.status}[/]",
            escape(entry.measured) + advice,
            end_section=next_device != device,
        )
        previous = (device, entry.group)
    return fitted(table, leading=0)  # a device's name stands on its first row only: no label to repeat
