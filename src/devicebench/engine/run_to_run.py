"""A machine's run-to-run variation, measured: one short training workload in several fresh processes per device,
and the coefficient of variation of their steady throughput.

The epochs of one process share its luck (memory layout, allocator history, thread placement, clock state): on a
2-core VM fresh processes of one run differ by 3-18% where the epochs of one differ by 1-3%. An interval drawn from
the epochs of one process a side holds only for those processes; results/stats.py `speedup_across_processes` adds
the machine's figure measured here so that it holds for fresh ones. Each process trains a small convolutional
network on random batches held on the device (no data loading, so what varies is the process, not the input):
an untimed warm-up of WARMUP_S, then CALIBRATION_EPOCHS timed epochs of the steps that fill EPOCH_S, and reports
their samples/s; the processes run one after another, never side by side. `devicebench calibrate` and `devicebench
check` call it; engine/calibration_store.py keeps the figure beside the ceilings, with when and under what load it
was measured.

    python -m devicebench.engine.run_to_run cpu
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from devicebench.engine.timing import Stopwatch, wall_clock_utc
from devicebench.results.stats import RunToRun, between_process_cv

CALIBRATION_PROCESSES = 5  # fresh processes per device: the figure's degrees of freedom are one fewer
CALIBRATION_EPOCHS = 3  # timed epochs per process; its figure is their median
WARMUP_S = 0.5  # untimed steps first: allocator growth, kernel selection; also sizes the epochs
EPOCH_S = 0.4  # each timed epoch is about this long: five processes take under 30 s on a 2-core CPU, start-up included
BATCH = 64  # images of 1 x 28 x 28 a step, as the MNIST workloads train
PROCESS_TIMEOUT_S = 120.0  # one process that hangs must not hang calibrate

# a device's name → the samples/s of each timed epoch of one fresh process (tests replace it)
Launcher = Callable[[str], list[float]]


@dataclass(frozen=True)
class RunToRunMeasurement:
    """One device's run-to-run variation and how it was taken."""

    device: str  # as str(torch.device) writes it
    cv: float  # between fresh processes, their epochs' own variation taken out (stats.between_process_cv)
    process_epoch_rates: tuple[tuple[float, ...], ...]  # samples/s of each timed epoch, one tuple a process
    measured_utc: str
    load_average: float | None  # the 1-minute load average when it started; None where it cannot be read

    @property
    def run_to_run(self) -> RunToRun:
        return between_process_cv(self.process_epoch_rates)

    def between_text(self) -> str:
        """ "3.1% between 5 fresh processes"; where the processes' levels differed no more than their epochs' own
        variation explains, the estimate is 0, which is no claim that fresh processes never differ: it says so."""
        processes = f"{len(self.process_epoch_rates)} fresh processes"
        if self.cv > 0:
            return f"{self.cv:.1%} between {processes}"
        return f"too small to tell from their epochs' own variation between {processes} (counted as 0%)"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunToRunMeasurement:
        """The measurement to_dict() wrote; KeyError, TypeError or ValueError for anything else."""
        rates = tuple(tuple(float(rate) for rate in process) for process in data["process_epoch_rates"])
        if (
            len(rates) < 2
            or len({len(process) for process in rates}) != 1
            or len(rates[0]) < 2
            or not all(math.isfinite(rate) and rate > 0 for process in rates for rate in process)
        ):
            raise ValueError("process_epoch_rates: expected two or more processes of as many finite rates > 0 each")
        load = data["load_average"]
        if not isinstance(data["device"], str) or not isinstance(data["measured_utc"], str):
            raise TypeError("device and measured_utc must be strings")
        return cls(
            device=data["device"],
            cv=between_process_cv(rates).cv,  # from the rates, never a hand-edited figure beside them
            process_epoch_rates=rates,
            measured_utc=data["measured_utc"],
            load_average=None if load is None else float(load),
        )


def measure_run_to_run(
    device: torch.device, *, processes: int = CALIBRATION_PROCESSES, launch: Launcher | None = None
) -> RunToRunMeasurement:
    """Train the short workload in `processes` fresh processes on `device`, one after another, and take the CV
    between them of their steady samples/s."""
    launch = launch or _fresh_process
    load_average = _load_average()
    measured_utc = wall_clock_utc()
    rates = tuple(tuple(launch(str(device))) for _ in range(processes))
    return RunToRunMeasurement(
        device=str(device),
        cv=between_process_cv(rates).cv,
        process_epoch_rates=rates,
        measured_utc=measured_utc,
        load_average=load_average,
    )


def _fresh_process(device: str) -> list[float]:
    """Run this module in a new interpreter on `device` and read its epochs' samples/s (Ctrl-C ends it too)."""
    finished = subprocess.run(
        [sys.executable, "-m", "devicebench.engine.run_to_run", device],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )
    if finished.returncode != 0:
        raise RuntimeError(f"the run-to-run process on {device} failed: {finished.stderr.strip()[-500:]}")
    return [float(rate) for rate in json.loads(finished.stdout.strip().splitlines()[-1])]


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # a platform that keeps none
        return None


def train_epochs(device: torch.device, watch: Stopwatch | None = None) -> list[float]:
    """This process's part: warm up, then CALIBRATION_EPOCHS timed epochs of the small network; their samples/s."""
    watch = watch or Stopwatch(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3),
        torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(64 * 12 * 12, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    images = torch.randn(BATCH, 1, 28, 28, device=device)
    labels = torch.randint(0, 10, (BATCH,), device=device)

    def step() -> None:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    start, steps = watch.now(), 0
    while (elapsed := watch.now() - start) < WARMUP_S or steps < 2:
        step()
        steps += 1
    epoch_steps = max(1, round(steps * EPOCH_S / elapsed))
    rates = []
    for _ in range(CALIBRATION_EPOCHS):
        start = watch.now()
        for _ in range(epoch_steps):
            step()
        rates.append(epoch_steps * BATCH / (watch.now() - start))
    return rates


if __name__ == "__main__":
    print(json.dumps(train_epochs(torch.device(sys.argv[1]))))
