"""`devicebench calibrate`: measure each device's ceilings, show them against the datasheet, keep them.

    devicebench calibrate --devices cpu --quick
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from devicebench.cli import (
    EXIT_FAILED_RUN,
    EXIT_INTERRUPTED,
    app,
    console,
    errors,
    fail,
)
from devicebench.devices import DeviceError, resolve_devices
from devicebench.engine.calibrate import (
    BYTES_PER_MIB,
    QUICK_SIZES,
    DeviceCeilings,
    default_sizes,
    measure_ceilings,
    save_calibration,
)
from devicebench.environment import machine_fingerprint
from devicebench.report.tables import number_text, percent_text
from devicebench.results.datasheets import datasheet_for


@app.command()
def calibrate(
    devices: Annotated[str, typer.Option(
        help="auto (every local device), cpu, cuda, cuda:1, mps, or a list: cpu,cuda.")] = "auto",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the stored calibration (every device calibrated on this machine) as JSON.")] = False,
    quick: Annotated[bool, typer.Option(
        "--quick", help="Small matrices and copies: a check in seconds that understates the ceilings.")] = False,
) -> None:
    """Measure each device's ceilings (dense matmul TFLOP/s per precision, memory and host-to-device GB/s) and
    store them for this machine, beside the datasheet's figures.

    [bold]devicebench calibrate[/]: every local device (tens of seconds each).

    [bold]devicebench calibrate --devices cuda:1[/]: one GPU; the devices stored before are kept.

    The file is $DEVICEBENCH_CALIBRATION_DIR/<machine id>.json, else in the user data folder.
    """
    try:
        chosen = resolve_devices(devices)
    except DeviceError as error:
        raise fail(str(error)) from None
    fingerprint = machine_fingerprint()
    measured: list[DeviceCeilings] = []
    try:
        with errors.status("Calibrating") as status:
            for device in chosen:
                measured.append(measure_ceilings(
                    device, sizes=QUICK_SIZES if quick else default_sizes(device),
                    progress=lambda step, device=device: status.update(f"Calibrating {device}: {step}")))
    except KeyboardInterrupt:  # the devices finished before Ctrl-C are kept
        if not measured:
            raise fail("interrupted; nothing stored", EXIT_INTERRUPTED) from None
        finished = ", ".join(entry.device for entry in measured)
        raise fail(f"interrupted; {finished} stored in {_store(fingerprint, measured)}", EXIT_INTERRUPTED) from None
    path = _store(fingerprint, measured)
    if as_json:
        print(path.read_text(encoding="utf-8"), end="")
    else:
        for ceilings in measured:
            console.print(ceilings_table(ceilings))
    errors.print(f"Calibration stored in {path}")


def ceilings_table(ceilings: DeviceCeilings) -> Table:
    """One device's ceilings: measured, the datasheet's figure, and the one as a percent of the other."""
    datasheet = datasheet_for(ceilings.device_name)
    sizes = ceilings.sizes
    against = (f"Datasheet: {datasheet.product}, dense peaks without sparsity ({datasheet.source})."
               if datasheet else "No datasheet known for this device.")
    table = Table(title=f"{ceilings.device} ({ceilings.device_name})", title_justify="left",
                  caption=f"Best of {sizes.repeats} repeats of {sizes.operations_per_repeat} operations each. "
                          f"{against}", caption_justify="left")
    for column in ("Quantity", "Measured", "Datasheet", "Of datasheet"):
        table.add_column(column, justify="left" if column == "Quantity" else "right")
    matrix = f"{sizes.matmul_size}x{sizes.matmul_size}"
    rows = [(f"Matmul {precision} ({matrix})", rate, datasheet.tflops(precision) if datasheet else None, 2,
             " TFLOP/s") for precision, rate in ceilings.matmul_tflops.items()]  # 2 decimals: a CPU makes fractions
    rows.append((f"Memory copy ({_mib(sizes.memory_copy_bytes)}, read + write)", ceilings.memory_gb_s,
                 datasheet.memory_gb_s if datasheet else None, 1, " GB/s"))
    rows += [(f"Host to device ({_mib(sizes.host_to_device_bytes)}, {memory_kind})", rate, None, 1, " GB/s")
             for memory_kind, rate in ceilings.host_to_device_gb_s.items()]  # datasheets give only the PCIe link's
    for quantity, measured, promised, digits, unit in rows:
        table.add_row(quantity, number_text(measured, digits, unit), number_text(promised, digits, unit),
                      percent_text(measured / promised if promised else None))
    return table


def _mib(size_bytes: int) -> str:
    return f"{size_bytes / BYTES_PER_MIB:,.0f} MiB"


def _store(fingerprint: dict, measured: list[DeviceCeilings]) -> Path:
    try:
        return save_calibration(fingerprint["machine_id"], fingerprint["machine_name"], measured)
    except OSError as error:
        raise fail(f"could not store the calibration ({error}); set DEVICEBENCH_CALIBRATION_DIR to a writable "
                   "folder", EXIT_FAILED_RUN) from None
