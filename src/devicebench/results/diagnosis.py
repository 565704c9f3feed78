"""Input-bound or compute-bound: why a run is as fast as it is, from what its epochs measured.

S3's lesson: a small network leaves a GPU 0-10% busy because reading, decoding and augmenting the images on
the CPU cannot keep up; a faster device then buys nothing. The verdict reads two measurements of the steady
epochs (the warm-up epoch starts the loader workers and would blame them unfairly):
- the share of training time the loop spent waiting for its next batch (engine/loop.py), and
- the device's own busy figure where NVML gives one: a GPU that is busy most of the time is the bottleneck
  however long the host waited, since the host may wait for data while queued GPU work still runs.

    python -c "from devicebench.results.diagnosis import INPUT_BOUND_WAIT_SHARE; print(INPUT_BOUND_WAIT_SHARE)"
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

from devicebench.results.schema import RunRecord

INPUT_BOUND_WAIT_SHARE = 0.5  # waiting for batches took at least half of the training time
BUSY_DEVICE_PERCENT = 80.0  # a device busier than this is the bottleneck, whatever the host waited
IDLE_DEVICE_PERCENT = 50.0  # below this, a device that is not starved for data is held back by the host's steps

Verdict = Literal["input-bound", "compute-bound"]


@dataclass(frozen=True)
class Diagnosis:
    verdict: Verdict
    wait_share: float  # of steady training time, spent waiting for batches
    device_utilization_percent: float | None
    text: str  # the numbers and the lever that would help


def diagnose(record: RunRecord, cores: int) -> Diagnosis | None:
    """The verdict for `record`, trained on a machine with `cores` CPU cores; None without timed epochs."""
    epochs = [e for e in (record.steady_epochs or record.epochs) if e.input_wait_s is not None and e.train_time_s > 0]
    if not epochs:
        return None
    waited = sum(epoch.input_wait_s for epoch in epochs if epoch.input_wait_s is not None)  # none is, as chosen
    trained = sum(epoch.train_time_s for epoch in epochs)
    share = waited / trained
    busy = [e.device_utilization_percent for e in epochs if e.device_utilization_percent is not None]
    utilization = statistics.median(busy) if busy else None
    measured = f"waited for batches {share:.0%} of training ({waited:.2f} s of {trained:.2f} s)"
    if utilization is not None:
        measured += f", device {utilization:.0f}% busy"
    if share >= INPUT_BOUND_WAIT_SHARE and (utilization is None or utilization < BUSY_DEVICE_PERCENT):
        workers = record.settings.workers
        levers = [f"more --workers (now {workers}, {cores} cores)"] if workers < cores else []
        levers += [
            "a smaller image size",
            "augmentation off (--set augment=false) or on the device",
            "a larger --batch-size",
        ]
        return Diagnosis("input-bound", share, utilization, f"{measured}; try {', '.join(levers)}")
    if utilization is not None and utilization < IDLE_DEVICE_PERCENT:
        lever = "the device idles between small steps: a larger --batch-size gives it more work per step"
    else:
        lever = "the input pipeline keeps up: a faster device or a larger --batch-size would help"
    return Diagnosis("compute-bound", share, utilization, f"{measured}; {lever}")
