"""What a check finds: one `Check` row (measured, judged pass, warn or fail, with advice), the groups rows are shown
in, and the questions every group asks of the machine (which accelerators, which of them NVIDIA's).

    python -c "from devicebench.check.findings import Check; print(Check(None, 'cpu', 'bf16', 'pass', 'native'))"
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from devicebench import devices, machine

PASS, WARN, FAIL = "pass", "warn", "fail"
STATUSES = (PASS, WARN, FAIL)
SOFTWARE, WORK, TIMING, CEILINGS, CPU = "software", "work lands on the device", "timing", "ceilings", "cpu"
NOISE = "run-to-run"
GROUPS = (SOFTWARE, CPU, WORK, TIMING, CEILINGS, NOISE)  # the order the checks run and are shown in
PEAK_TOLERANCE = 1.05  # a rate this far above the datasheet's boost-clock peak is not physics: the clock is wrong


@dataclass(frozen=True)
class Check:
    """One finding: what was measured, how it was judged, and what to do when it is not a pass."""

    device: str | None  # "cpu", "cuda:0"; None: the machine as a whole
    group: str  # one of GROUPS
    name: str
    status: str  # one of STATUSES
    measured: str  # the figure, in words and units
    advice: str | None = None  # what to do; every warn and fail has one, a pass none

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r} is not one of {', '.join(STATUSES)}")
        if (self.advice is None) != (self.status == PASS):
            raise ValueError(f"{self.name}: a {self.status} has advice exactly when it is not a pass")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def accelerators() -> list[torch.device]:
    return [device for device in devices.local_devices() if device.type != "cpu"]


def is_nvidia(device: torch.device) -> bool:
    return device.type == "cuda" and not machine.snapshot().hip_build  # a ROCm build drives AMD GPUs as "cuda"


def nvidia_gpus() -> list[torch.device]:
    return [device for device in accelerators() if is_nvidia(device)]
