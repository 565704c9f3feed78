"""The stored calibration: each machine's measured ceilings kept in one JSON file (`calibration_path`), merged
device by device so that calibrating cuda:1 later keeps the CPU's figures, read back checked, and the matmul peak a
run's MFU is taken against (`peak_tflops`). engine/calibrate.py measures the ceilings. Beside them, under
`run_to_run`, each device's run-to-run variation between fresh processes (engine/run_to_run.py), which a speedup
interval from one process a side includes (`stored_run_to_run`); a file without it has none measured.

    python -c "from devicebench.engine.calibration_store import load_calibration; from devicebench.environment import machine_fingerprint as f; print(load_calibration(f()['machine_id']))"
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import torch

from devicebench.choices import MATMUL_PRECISIONS
from devicebench.engine.calibrate import QUICK_PLAN, DeviceCeilings
from devicebench.engine.calibration_files import calibration_path
from devicebench.engine.run_to_run import RunToRunMeasurement
from devicebench.engine.timing import wall_clock_utc
from devicebench.files import UnusableFile, require_regular_file
from devicebench.results.plausibility import peak_doubt
from devicebench.results.schema import write_atomically
from devicebench.version import __version__

CALIBRATION_SCHEMA = 2  # the version of the stored file's layout; 2: sustained stretches, precisions not native

logger = logging.getLogger(__name__)


class CalibrationError(ValueError):
    """A stored calibration that cannot be read; the message names the file and how to replace it."""


def save_calibration(
    machine_id: str,
    machine_name: str,
    ceilings: Iterable[DeviceCeilings],
    folder: str | Path | None = None,
    run_to_run: Iterable[RunToRunMeasurement] = (),
) -> Path:
    """Store `ceilings` and `run_to_run` for this machine, keeping the devices' figures stored before that were not
    measured again; return the file's path. An unreadable file is replaced, with a warning."""
    path = calibration_path(machine_id, folder)
    try:
        stored = load_calibration(machine_id, folder)
    except CalibrationError as error:
        logger.warning("%s Replacing it.", error)
        stored = None
    devices = dict(stored["devices"]) if stored else {}
    devices.update({entry.device: entry.to_dict() for entry in ceilings})
    variation = dict(stored["run_to_run"]) if stored else {}
    variation.update({entry.device: entry.to_dict() for entry in run_to_run})
    document = {
        "schema": CALIBRATION_SCHEMA,
        "machine_id": machine_id,
        "machine_name": machine_name,
        "created_utc": wall_clock_utc(),
        "devicebench_version": __version__,
        "torch_version": torch.__version__,
        "devices": devices,
        "run_to_run": variation,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(document, indent=2) + "\n")
    return path


def load_calibration(machine_id: str, folder: str | Path | None = None) -> dict | None:
    """The stored calibration of this machine (see save_calibration), or None when it was never calibrated.

    Raises CalibrationError for a file that is not JSON, not a calibration, or another machine's.
    """
    path = calibration_path(machine_id, folder)
    try:
        require_regular_file(path, "the calibration file")
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, UnusableFile) as error:
        raise _unreadable(path, str(error)) from None
    except RecursionError:
        raise _unreadable(path, "its JSON is nested too deeply to be one") from None
    if not isinstance(document, dict) or document.get("schema") != CALIBRATION_SCHEMA:
        # schema 1 timed bursts of a few milliseconds and emulated bf16: its figures are not worth converting
        found = document.get("schema") if isinstance(document, dict) else None
        raise _unreadable(path, f"not a devicebench calibration of schema {CALIBRATION_SCHEMA} (schema {found!r})")
    if document.get("machine_id") != machine_id:
        raise _unreadable(path, f"it belongs to machine {document.get('machine_id')!r}, not {machine_id!r}")
    devices = document.get("devices")
    if not isinstance(devices, dict):
        raise _unreadable(path, "it has no 'devices' table")
    checked = _checked_entries(path, devices, DeviceCeilings.from_dict, "entry", "a device's ceilings")
    for device, entry in checked.items():  # a hand-edited figure would make every MFU read 0%
        for precision, measured in entry.matmul.items():
            doubt = peak_doubt(entry.device_name, precision, measured.rate)
            if doubt:
                raise _unreadable(path, f"its {precision} matmul peak of {device} cannot have been measured: {doubt}")
    variation = document.get("run_to_run", {})  # absent from a file written before it was measured
    if not isinstance(variation, dict):
        raise _unreadable(path, "its 'run_to_run' is not a table")
    checked_variation = _checked_entries(
        path, variation, RunToRunMeasurement.from_dict, "run-to-run entry", "a measurement"
    )
    # the checked figures (as JSON has them: lists), never the file's raw values
    return {
        **document,
        "devices": {device: _as_json(entry.to_dict()) for device, entry in checked.items()},
        "run_to_run": {device: _as_json(entry.to_dict()) for device, entry in checked_variation.items()},
    }


def _as_json(value: dict) -> dict:
    return json.loads(json.dumps(value))


Entry = TypeVar("Entry", DeviceCeilings, RunToRunMeasurement)


def _checked_entries(
    path: Path, table: dict, parse: Callable[[Any], Entry], entry_words: str, kind_words: str
) -> dict[str, Entry]:
    """Each device's entry of `table` parsed, refused in words where it is not one (`kind_words`) or names another
    device than the one it is filed under."""
    checked = {}
    for device, entry in table.items():
        try:
            parsed = parse(entry)
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise _unreadable(path, f"its {entry_words} for {device!r} is not {kind_words}: {error}") from None
        if parsed.device != device:
            raise _unreadable(path, f"its {entry_words} for {device!r} holds that of {parsed.device!r}")
        checked[device] = parsed
    return checked


def _calibration_or_none(machine_id: str, folder: str | Path | None) -> dict | None:
    """The stored calibration, or None where there is none or it cannot be read (a warning says so: a run must never
    fail because of its calibration)."""
    try:
        return load_calibration(machine_id, folder)
    except CalibrationError as error:
        logger.warning("%s Going on without it.", error)
        return None


def stored_run_to_run(machine_id: str, device: str, folder: str | Path | None = None) -> RunToRunMeasurement | None:
    """The run-to-run variation stored for `device` of this machine; None when it was never measured or the file
    cannot be read (a warning says so: a run must never fail because of its calibration)."""
    stored = _calibration_or_none(machine_id, folder)
    entry = stored["run_to_run"].get(device) if stored else None
    return None if entry is None else RunToRunMeasurement.from_dict(entry)


def peak_tflops(machine_id: str, device: str, precision: str, folder: str | Path | None = None) -> float | None:
    """The matmul TFLOP/s stored for `device` ("cpu", "cuda:0") of this machine at `precision` ("fp32", "tf32",
    "bf16"); None when it was not calibrated or not measured (a precision the device does not compute natively),
    when it was measured by a quick calibration (whose small sizes understate it), or when the file cannot be read
    (a warning says so: a run must never fail because of its calibration)."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}; calibrated precisions are {', '.join(MATMUL_PRECISIONS)}")
    stored = _calibration_or_none(machine_id, folder)
    entry = stored["devices"].get(device) if stored else None
    if entry is None:
        return None
    ceilings = DeviceCeilings.from_dict(entry)
    if ceilings.plan == QUICK_PLAN:  # stored by an older devicebench: its small sizes understate the ceiling
        logger.warning(
            "The calibration of %s was taken with --quick, which understates its ceilings: MFU is left "
            "out. Run `devicebench calibrate --devices %s` to measure it.",
            device,
            device,
        )
        return None
    measured = ceilings.matmul.get(precision)
    return None if measured is None else measured.rate


def _unreadable(path: Path, reason: str) -> CalibrationError:
    return CalibrationError(
        f"{path} is not a readable devicebench calibration ({reason}). Run `devicebench calibrate` again: "
        "it will overwrite the file."
    )
