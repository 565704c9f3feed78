"""Where each machine's calibration is stored. No torch here: every command that writes files refuses an output
that would overwrite a calibration (cli.check_outputs_or_fail), and `export` must start without torch.

    python -c "from devicebench.engine.calibration_files import calibration_path; print(calibration_path('m'))"
"""

from __future__ import annotations

import os
from pathlib import Path

from devicebench.files import CALIBRATION_VARIABLE, expanded, user_folder

CALIBRATION_DIR_VARIABLE = CALIBRATION_VARIABLE


def calibration_path(machine_id: str, folder: str | Path | None = None) -> Path:
    """Where this machine's calibration lives: `<folder>/<machine_id>.json`, the folder being `folder`, else
    $DEVICEBENCH_CALIBRATION_DIR, else `calibration` in the user data folder (next to results.sqlite)."""
    chosen = folder or os.environ.get(CALIBRATION_DIR_VARIABLE, "").strip()
    base = (
        expanded(chosen, f"${CALIBRATION_VARIABLE}")
        if chosen
        else user_folder("data", "the calibration") / "calibration"
    )
    return base / f"{machine_id}.json"
