"""The only code in devicebench that reads a clock.

Every reading is taken at a *synchronized* boundary: the device is made to finish all queued work before the
clock is read, so asynchronous accelerators (CUDA, MPS, XPU) cannot make a step look faster than it was.
Warm-up is a named phase: the first epoch of every run is reported apart and never mixed into steady state.

    python -c "from devicebench.engine.timing import Stopwatch; import torch; w = Stopwatch(torch.device('cpu')); print(w.now())"
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import psutil

from devicebench.results.schema import UTC_TIME_FORMAT

if TYPE_CHECKING:  # torch is loaded by the first synchronization: commands that train nothing read the wall clock
    import torch

Clock = Callable[[], float]  # seconds, monotonic
Synchronizer = Callable[["torch.device"], None]


def synchronize_device(device: torch.device) -> None:
    """devices.synchronize, imported on first use (then a dictionary look-up) so that importing this module
    imports no torch."""
    from devicebench.devices import synchronize

    synchronize(device)


def children_cpu_seconds() -> float:
    """CPU seconds, user and system, of this process's live child processes (and theirs), each since its start; a
    child that has ended, or cannot be read, counts nothing."""
    total = 0.0
    for child in psutil.Process().children(recursive=True):
        try:
            times = child.cpu_times()
        except psutil.Error:  # ended between the listing and the reading, or not ours to read
            continue
        total += times.user + times.system
    return total


@dataclass
class Stopwatch:
    """Reads a monotonic clock after synchronizing one device.

    `clock` and `synchronize` are injectable so tests can prove, with a fake clock, that every reading sits
    behind a synchronization and which phase each interval lands in.
    """

    device: torch.device
    clock: Clock = time.perf_counter
    synchronize: Synchronizer = synchronize_device
    host_clock: Clock = time.perf_counter  # the same clock, read without synchronizing (a separate name for tests)
    thread_clock: Clock = time.thread_time  # CPU seconds of the thread that reads it (see thread_cpu_now)
    children_clock: Clock = children_cpu_seconds  # CPU seconds of this process's children (loader workers)

    def now(self) -> float:
        """Seconds on the monotonic clock, after all work queued on the device has finished."""
        self.synchronize(self.device)
        return self.clock()

    def host_now(self) -> float:
        """Seconds on the same clock WITHOUT synchronizing: only for how long the host itself waited (for a
        batch), an interval during which the device may rightly still be working."""
        return self.host_clock()

    def thread_cpu_now(self) -> float:
        """CPU seconds the calling thread (the training loop's) has run so far: not a time of day but the seconds
        the kernel gave this one thread on any core, user and system together. Another process keeping a core busy
        lengthens every interval on the wall clock (the thread waits to be scheduled, and for its OpenMP threads to
        be), but hardly this figure: time spent waiting, sleeping or blocked is not counted. Nor is the work of the
        thread's helpers (OpenMP threads, loader workers), nor, on an accelerator, the device's own. Where idle
        OpenMP threads spin (libgomp's default, OMP_WAIT_POLICY=ACTIVE) the thread's waits at their barriers are
        spent spinning and counted, and load moves it again: read it where they sleep (PASSIVE). Not synchronized:
        read it just after a synchronized reading (`now`), at the same boundary."""
        return self.thread_clock()

    def children_cpu_now(self) -> float:
        """CPU seconds, user and system, that this process's live child processes (a data loader's workers) have
        run so far, each since its start; on no clock of time elapsed, and load hardly moves it."""
        return self.children_clock()


def host_seconds() -> float:
    """Monotonic host clock, NOT synchronized with any device: for background sampling, never for timing work."""
    return time.perf_counter()


@dataclass
class Budget:
    """A stretch of seconds on the host's monotonic clock, spent from the moment it is made: how much is left
    decides how long the runs still to come may train (runner.py). Bookkeeping, never a measurement: no device is
    synchronized, and a run's own figures come from its Stopwatch."""

    seconds: float
    clock: Clock = time.perf_counter
    spent_before: float = 0.0  # seconds spent before it was made: a command's start-up (see process_age_s)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def spent(self) -> float:
        return self.spent_before + self.clock() - self.started

    def left(self) -> float:
        """Seconds still to spend; negative once overspent."""
        return self.seconds - self.spent()


def process_age_s() -> float:
    """Seconds since this process started: what a command spent starting (Python, torch, planning) before its first
    run, which its time budget counts too. On the wall clock, the only one the process's start is known on."""
    return max(0.0, time.time() - psutil.Process().create_time())


def wall_clock_utc() -> str:
    """The current UTC date and time, ISO 8601 to the second: when a run started, for the record."""
    return time.strftime(UTC_TIME_FORMAT, time.gmtime())


WARMUP_EPOCHS = 1  # the first epoch carries allocator growth, kernel selection and cache warm-up


def is_warmup_epoch(epoch: int) -> bool:
    """Whether `epoch` (1-based) belongs to the warm-up phase rather than to steady state."""
    return epoch <= WARMUP_EPOCHS
