"""`devicebench calibrate`: measure each device's ceilings, show them against the datasheet, keep them.

devicebench calibrate --devices cpu
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.status import Status
from rich.table import Table
from rich.text import Text

from devicebench.check.cpu import busy_warning
from devicebench.choices import MATMUL_PRECISIONS
from devicebench.cli import (
    EXIT_FAILED_RUN,
    LocalDevicesOption,
    app,
    console,
    errors,
    fail,
    local_devices_or_fail,
    stopped,
)
from devicebench.engine.calibrate import (
    QUICK_PLAN,
    DeviceCeilings,
    Measurement,
    default_plan,
    measure_ceilings,
)
from devicebench.engine.calibration_store import save_calibration
from devicebench.engine.run_to_run import RunToRunMeasurement, measure_run_to_run
from devicebench.environment import machine_fingerprint
from devicebench.host import BYTES_PER_MIB
from devicebench.report.fitting import FittedTable, fitted
from devicebench.report.text import number_text, percent_text
from devicebench.results.datasheets import datasheet_for


@app.command()
def calibrate(
    devices: LocalDevicesOption = "auto",
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the stored calibration (every device calibrated on this machine) as JSON."),
    ] = False,
    quick: Annotated[
        bool,
        typer.Option(
            "--quick",
            help="Small matrices and copies, short stretches: a check in seconds that understates the "
            "ceilings, so it is shown but not stored (MFU is never taken against it).",
        ),
    ] = False,
) -> None:
    """Measure each device's sustained ceilings (dense matmul TFLOP/s in each precision it computes natively,
    memory and host-to-device GB/s) and its run-to-run variation, and store them for this machine, beside the
    datasheet's figures.

    The run-to-run variation: a short training workload in 5 fresh processes; a speedup interval from one process
    a side includes it for every run made after it.

    [bold]devicebench calibrate[/]: every local device (the ceilings: under a minute for the CPU, about 45 s a
    GPU; then 5 processes of about 2 s of training each, plus their start).

    [bold]devicebench calibrate --devices cuda:1[/]: one GPU; the devices stored before are kept.

    The file is $DEVICEBENCH_CALIBRATION_DIR/<machine id>.json, else in the user data folder.
    """
    chosen = local_devices_or_fail(devices)
    fingerprint = machine_fingerprint()
    busy = busy_warning()  # read before measuring: the load of the minute before is other processes' alone
    if busy is not None:  # warned, not refused: the stored file is replaced by the next calibration, GPU ceilings
        # hardly depend on the host's load, and a machine that is always shared must still be able to calibrate
        errors.print(
            Text(
                busy
                + (
                    ""
                    if quick
                    else " Ceilings measured now come out low, and MFU taken against them "
                    "high; they are stored all the same: run `devicebench calibrate` again once the "
                    "machine is quiet, which replaces them."
                ),
                style="yellow",
            ),
            soft_wrap=False,
        )
    measured: list[DeviceCeilings] = []
    variation: list[RunToRunMeasurement] = []
    try:
        with errors.status("Calibrating") as status:
            for device in chosen:
                measured.append(
                    measure_ceilings(
                        device,
                        plan=QUICK_PLAN if quick else default_plan(device),
                        progress=_shown_on(status, f"Calibrating {device}"),
                    )
                )
                if not quick:  # --quick stores nothing, and the processes take most of a minute
                    status.update(f"Calibrating {device}: run-to-run variation, a short workload in fresh processes")
                    variation.append(measure_run_to_run(device))
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP (devicebench.stopping): the devices finished are kept
        if not measured or quick:
            raise stopped("nothing stored") from None
        finished = ", ".join(entry.device for entry in measured)
        raise stopped(f"{finished} stored in {_store(fingerprint, measured, variation)}") from None
    if quick:  # its small sizes understate the ceilings: an MFU taken against them would pass 100%
        if as_json:
            print(json.dumps({"devices": {entry.device: entry.to_dict() for entry in measured}}, indent=2))
        else:
            for ceilings in measured:
                console.print(ceilings_table(ceilings))
        errors.print(
            "Not stored: --quick understates the ceilings. Run `devicebench calibrate` without --quick to "
            "store the figures that MFU is taken against."
        )
        return
    path = _store(fingerprint, measured, variation)
    if as_json:
        print(path.read_text(encoding="utf-8"), end="")
    else:
        for ceilings in measured:
            console.print(ceilings_table(ceilings))
        for entry in variation:
            console.print(run_to_run_text(entry), soft_wrap=True)
    errors.print(
        f"Calibration stored in {path}" + (", measured while the machine was busy (see above)" if busy else "")
    )


NOT_NATIVE = "not native"  # a precision the device only emulates: calibrate does not measure it


def ceilings_table(ceilings: DeviceCeilings) -> FittedTable:
    """One device's ceilings: measured, the datasheet's figure, and the one as a percent of the other."""
    datasheet = datasheet_for(ceilings.device_name)
    plan = ceilings.plan
    against = (
        f"Datasheet: {datasheet.product}, dense peaks without sparsity ({datasheet.source})."
        if datasheet
        else "No datasheet known for this device."
    )
    emulated = (
        f" {', '.join(ceilings.not_native)}: {NOT_NATIVE}, only emulated by this device, so not measured."
        if ceilings.not_native
        else ""
    )
    table = Table(
        title=f"{ceilings.device} ({ceilings.device_name})",
        title_justify="left",
        caption=f"Each figure: the median of up to {plan.stretches} timed stretches of at least "
        f"{plan.stretch_s:g} s of sustained work, after {plan.warmup_s:g} s of warm-up."
        f"{emulated} {against}",
        caption_justify="left",
    )
    for column in ("Quantity", "Measured", "Datasheet", "Of datasheet"):
        table.add_column(column, justify="left" if column == "Quantity" else "right")
    for precision in MATMUL_PRECISIONS:
        promised = datasheet.tflops(precision) if datasheet else None
        if precision in ceilings.matmul:
            product = ceilings.matmul[precision]
            table.add_row(
                f"Matmul {precision} ({product.size}x{product.size})", *_figures(product, promised, 2, " TFLOP/s")
            )  # 2 decimals: a CPU makes fractions
        elif precision in ceilings.not_native:
            table.add_row(f"Matmul {precision}", NOT_NATIVE, number_text(promised, 2, " TFLOP/s"), "—")
    copy = ceilings.memory_copy
    table.add_row(
        f"Memory copy ({_mib(copy.size)}, read + write)",
        *_figures(copy, datasheet.memory_gb_s if datasheet else None, 1, " GB/s"),
    )
    for memory_kind, transfer in ceilings.host_to_device.items():  # datasheets give only the PCIe link's
        table.add_row(f"Host to device ({_mib(transfer.size)}, {memory_kind})", *_figures(transfer, None, 1, " GB/s"))
    return fitted(table)


def _figures(measured: Measurement, promised: float | None, digits: int, unit: str) -> tuple[str, str, str]:
    """Measured, datasheet, and the one as a percent of the other."""
    return (
        number_text(measured.rate, digits, unit),
        number_text(promised, digits, unit),
        percent_text(measured.rate / promised if promised else None),
    )


def _mib(size_bytes: int) -> str:
    return f"{size_bytes / BYTES_PER_MIB:,.0f} MiB"


def run_to_run_text(measured: RunToRunMeasurement) -> str:
    """`cpu run-to-run: 3.1% between 5 fresh processes (412-455 samples/s), measured at ... under a load of 1.20`."""
    medians = [sorted(process)[len(process) // 2] for process in measured.process_epoch_rates]
    load = "" if measured.load_average is None else f" under a 1-minute load average of {measured.load_average:.2f}"
    return (
        f"{measured.device} run-to-run: {measured.between_text()}, their epochs' own "
        f"variation taken out ({min(medians):,.0f}-{max(medians):,.0f} samples/s), measured {measured.measured_utc}"
        f"{load}. A speedup interval from one process a side includes it."
    )


def _store(fingerprint: dict, measured: list[DeviceCeilings], variation: list[RunToRunMeasurement]) -> Path:
    try:
        return save_calibration(fingerprint["machine_id"], fingerprint["machine_name"], measured, run_to_run=variation)
    except OSError as error:
        raise fail(
            f"could not store the calibration ({error}); set DEVICEBENCH_CALIBRATION_DIR to a writable folder",
            EXIT_FAILED_RUN,
        ) from None


def _shown_on(status: Status, doing: str) -> Callable[[str], None]:
    """What shows each step of `doing` on the status line."""
    return lambda step: status.update(f"{doing}: {step}")
