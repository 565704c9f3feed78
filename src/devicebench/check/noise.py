"""The run-to-run check of `devicebench check`: the machine's variation between fresh processes on one device,
measured as `devicebench calibrate` measures it (engine/run_to_run.py) and stored beside the ceilings, so that every
later speedup interval from one process a side includes it; warned above the noisy flag's 5%.

    python -c "import torch; from devicebench.check import noise; print(noise.run_to_run_check(torch.device('cpu')))"
"""

from __future__ import annotations

import torch

from devicebench.check.findings import NOISE, PASS, WARN, Check
from devicebench.engine.calibration_store import save_calibration
from devicebench.engine.run_to_run import measure_run_to_run
from devicebench.environment import machine_fingerprint
from devicebench.results.compare import NOISY_EPOCH_TIME_CV


def run_to_run_check(device: torch.device) -> Check:
    """Measure and store `device`'s run-to-run CV; a warn above NOISY_EPOCH_TIME_CV, with what to do."""
    measured = measure_run_to_run(device)
    fingerprint = machine_fingerprint()
    save_calibration(fingerprint["machine_id"], fingerprint["machine_name"], [], run_to_run=[measured])
    load = "" if measured.load_average is None else f", 1-minute load average {measured.load_average:.2f}"
    figure = (
        f"{measured.between_text()}{load}; stored: every later speedup interval from one process a side includes it"
    )
    if measured.cv <= NOISY_EPOCH_TIME_CV:
        return Check(str(device), NOISE, "run-to-run variation", PASS, figure)
    return Check(
        str(device),
        NOISE,
        "run-to-run variation",
        WARN,
        figure,
        f"Fresh processes differ by more than {NOISY_EPOCH_TIME_CV:.0%}: close other programs and check again, and "
        "run with --repeats 3 or more (each repeat a fresh process) before trusting a speedup.",
    )
