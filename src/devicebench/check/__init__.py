"""`devicebench check`: a doctor for one machine. Is the GPU really doing the work, and can its numbers be trusted?

Each check measures one thing and judges it `pass`, `warn` or `fail`, with the figure it measured and, for a warn
or a fail, what to do. Machine-wide: the PyTorch build against the GPUs and drivers present, the driver and toolkit
versions, variables that hide devices, the optional libraries a GPU needs (nvidia-ml-py, XGBoost with CUDA), and
the CPU (threads against cores, the vector ISA torch's kernels use, bf16, other processes' load). Per device: a
short training run while engine.monitor samples (the parameters sit on the device, the device gets busy, the
process appears in its process list), known work timed with and without synchronizing (a clock that does not wait
for an asynchronous device is caught by physics: work cannot finish faster than the datasheet's peak, nor as fast
as it is queued), and a short calibration against the datasheet with, on NVIDIA, clocks, temperature, power limit
and PCIe link. The short calibration is shown, never stored; the run-to-run variation between fresh processes is
measured as `calibrate` measures it, and stored. A check that itself fails (an NVML error, running out of memory)
becomes a row saying so; nothing here raises. The ceilings take under a minute on any machine (about 10 s on a
2-core CPU); the run-to-run variation adds 5 processes of about 2 s of training each, plus their start.

    devicebench check --devices cpu
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable
from typing import Any

import torch

from devicebench import devices
from devicebench.check import ceilings, cpu, noise, software, work
from devicebench.check.findings import CEILINGS, CPU, FAIL, NOISE, PASS, SOFTWARE, TIMING, WARN, WORK, Check


def run_checks(chosen: Iterable[torch.device], *, progress: Callable[[str], None] | None = None) -> list[Check]:
    """Every check: the machine-wide ones, then each device's. `progress` hears what is being checked."""
    announce = progress or (lambda step: None)
    checks: list[Check] = []
    announce("software and CPU")
    for group, check in (
        *((SOFTWARE, check) for check in software.SOFTWARE_CHECKS),
        *((CPU, check) for check in cpu.CPU_CHECKS),
    ):
        label = check.__name__.removesuffix("_check").replace("_", " ")
        checks += _guarded(None, group, label, WARN, check)  # a library that cannot say is not the machine failing
    for device in chosen:

        def announce_step(step: str, device: torch.device = device) -> None:
            announce(f"{device}: {step}")

        per_device = (
            (WORK, lambda device=device: work.work_checks(device)),
            (TIMING, lambda device=device: work.timing_check(device)),
            (CEILINGS, lambda device=device: ceilings.ceiling_checks(device, progress=announce_step)),
            (NOISE, lambda device=device: noise.run_to_run_check(device)),
        )
        for group, measure in per_device:  # each runs within this iteration, so `device` is this one
            announce_step(group)
            checks += _guarded(str(device), group, group, FAIL, measure)  # a device that cannot do the work fails
    return checks


def document(checks: list[Check]) -> dict[str, Any]:
    """What `devicebench check --json` prints: every check, and how many failed, warned and passed."""
    counts = collections.Counter(check.status for check in checks)
    return {
        "checks": [check.to_dict() for check in checks],
        "failed": counts[FAIL],
        "warned": counts[WARN],
        "passed": counts[PASS],
    }


def _guarded(device: str | None, group: str, label: str, status: str, check: Callable[[], Any]) -> list[Check]:
    """The check's findings, or one row of `status` saying why the check called `label` could not run: never a
    traceback."""
    try:
        found = check()
    except Exception as error:  # an NVML error, running out of memory, a broken driver: all are findings
        memory = devices.out_of_memory(error)
        what = f"the {memory} ran out of memory" if memory else f"{type(error).__name__}: {error}"
        advice = (
            "Free memory (nvidia-smi lists the processes that hold a GPU's) and check again."
            if memory
            else "Run it again; if it fails the same way, the device or its driver is in a bad state (a reboot "
            "helps), or devicebench has a bug: report it with this message."
        )
        return [Check(device, group, "could not run", status, f"the {label} check stopped: {what}", advice)]
    return list(found) if isinstance(found, list) else [found]
