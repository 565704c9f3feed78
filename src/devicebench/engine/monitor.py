"""Background sampler: how busy the CPU and the device were during one training run, and how much energy the
device drew.

A daemon thread samples every `interval_s`: this process's CPU use and resident memory (psutil) and, on a CUDA
device, the GPU's memory used (NVML, through nvidia-ml-py when it is installed). GPU utilisation comes from the
driver's own sample buffer where it keeps one, and energy from the GPU's energy counter where it has one. The
runner cuts the run into windows (one per epoch, say) with `window()`; each window reports its own `Usage`.

Telemetry never stops a benchmark. Each NVML figure is read on its own: where NVML is missing or one figure fails
(NotSupported on a MIG slice, say), that figure is None and `Usage.device_note` says which and why. A window
shorter than a figure's own update period reports that figure as None too: such a reading describes the time
around the window more than the window.

    python -c "import time, torch; from devicebench.engine.monitor import Monitor; m = Monitor(torch.device('cpu')); m.start(); time.sleep(1); print(m.stop())"
"""

from __future__ import annotations

import statistics
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from types import ModuleType
from typing import Any, TypeVar

import psutil
import torch

from devicebench.engine.timing import host_seconds
from devicebench.host import BYTES_PER_MIB
from devicebench.nvml import NvmlUnavailable, open_nvml, shut_down

# Every window an NVML figure can be told for (0.1 s and up, below) holds at least two samples, while a sample
# costs this process at most a few tenths of a millisecond of Python (psutil and two to four NVML calls, which
# release the GIL while the driver answers; 0.3 ms measured on 2 cores under a load of 12): under 1% of a core
# at 20 per second, next to a training loop that may itself be bound by Python. Utilisation does not depend on
# it: the driver samples that itself, and each poll drains the driver's buffer.
SAMPLE_INTERVAL_S = 0.05

# The kernel counts a process's CPU time in clock ticks of 10 ms: a shorter window reads 0% or 100% by chance
SHORTEST_CPU_WINDOW_S = 0.1
# Each figure's own update period: a window shorter than it reports the figure as unknown
ENERGY_COUNTER_STEP_S = 0.1  # the energy counter moves in steps about 100 ms apart: a shorter window may read 0 J
POWER_AVERAGING_S = 1.0  # nvmlDeviceGetPowerUsage is the mean of the last second on Ampere and newer (GA100 aside)
UTILIZATION_RATES_PERIOD_S = 1.0  # nvmlDeviceGetUtilizationRates covers the last 1/6 s to 1 s, by product: the longest

# The figures NVML gives, each read on its own; these names are what `Usage.device_note` calls them, in this order
UTILIZATION = "utilisation"
MEMORY = "memory"
POWER_AND_ENERGY = "power and energy"
FIGURES = (UTILIZATION, MEMORY, POWER_AND_ENERGY)

# The field of NVML's c_nvmlValue_t union that holds a sample, indexed by NVML_VALUE_TYPE_* (0 = double ... 6)
SAMPLE_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")
SPACINGS_KEPT = 256  # recent spacings of buffered samples that set the utilisation sample period


@dataclass(frozen=True)
class Usage:
    """What was seen over one window of time."""

    samples: int
    process_cpu_percent: float | None  # mean over the window; 100 = one core fully busy
    rss_peak_mib: float | None  # peak of the sampled resident set size; a spike between samples is missed
    device_utilization_percent: float | None  # NVML GPU utilisation, mean of the samples taken in the window
    device_memory_peak_mib: float | None  # NVML memory used on the whole device (all processes), peak
    device_power_mean_w: float | None  # device_energy_j over the window's length
    device_energy_j: float | None  # energy counter difference, or power integrated over the window
    device_note: str | None  # which device figures are missing and why, if any are


@dataclass(frozen=True)
class _DevicePoll:
    """One reading of the figures NVML only gives as they are now; None where a figure failed (see `missing`)."""

    memory_used_mib: float | None
    power_w: float | None  # polled only where there is no energy counter to take power from
    utilization_percents: tuple[float, ...]  # the buffered samples taken since the last poll, or the one polled rate


@dataclass(frozen=True)
class _Sample:
    host_s: float  # host_seconds() when taken
    process_cpu_percent: float  # since the previous sample
    rss_mib: float
    device: _DevicePoll | None


Value = TypeVar("Value")


class _NvmlReader:
    """One GPU seen through NVML: every NVML call of the monitor's sampling is in this class.

    The first NVMLError of a figure drops that figure for the rest of the run, its reason kept in `missing`; the
    other figures go on.
    """

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self.missing: dict[str, str] = {}  # figure -> why NVML no longer gives it
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.has_energy_counter = True
        except nvml.NVMLError:  # NotSupported before Volta and on MIG slices: power is polled and integrated instead
            self.has_energy_counter = False
        self._newest_sample_us = 0  # timestamp of the newest utilisation sample taken from the driver's buffer
        # between consecutive buffered samples, the latest few: their median is the buffer's sample period
        self._sample_spacings_us: deque[int] = deque(maxlen=SPACINGS_KEPT)
        try:
            self._buffered_utilization()  # samples from before the run: only their timestamps are kept
            self._has_sample_buffer = True
        except nvml.NVMLError:  # no buffer on this GPU: poll nvmlDeviceGetUtilizationRates instead
            self._has_sample_buffer = False

    @classmethod
    def open(cls, device: torch.device) -> _NvmlReader:
        """Initialises NVML and finds `device`; raises NvmlUnavailable saying why it cannot."""
        return cls(*open_nvml(device))

    def poll(self) -> _DevicePoll:
        handle = self._handle
        return _DevicePoll(
            memory_used_mib=self._read(MEMORY, lambda: self._nvml.nvmlDeviceGetMemoryInfo(handle).used / BYTES_PER_MIB),
            power_w=None
            if self.has_energy_counter
            else self._read(POWER_AND_ENERGY, lambda: self._nvml.nvmlDeviceGetPowerUsage(handle) / 1000),  # milliwatts
            utilization_percents=self._read(UTILIZATION, self._new_utilization) or (),
        )

    def energy_counter_j(self) -> float | None:
        """Energy used since the driver loaded; None where the GPU has no counter or it failed."""
        if not self.has_energy_counter:
            return None
        return self._read(  # millijoules
            POWER_AND_ENERGY, lambda: self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000
        )

    def update_periods_s(self) -> dict[str, tuple[float, str]]:
        """The shortest window each averaged figure can be told for, and what sets it."""
        if self._has_sample_buffer and self._sample_spacings_us:
            utilization = (statistics.median(self._sample_spacings_us) / 1e6, "utilisation sample period")
        else:  # polled rates, or a buffer that has not shown its period yet
            utilization = (UTILIZATION_RATES_PERIOD_S, "longest utilisation sample period")
        if self.has_energy_counter:
            energy = (ENERGY_COUNTER_STEP_S, "energy counter step")
        else:
            energy = (POWER_AVERAGING_S, "power averaging window")
        return {UTILIZATION: utilization, POWER_AND_ENERGY: energy}

    def close(self) -> None:
        shut_down(self._nvml)

    def _read(self, figure: str, read: Callable[[], Value]) -> Value | None:
        if figure in self.missing:
            return None
        try:
            return read()
        except self._nvml.NVMLError as error:
            self.missing[figure] = f"NVML: {error}"
            return None

    def _new_utilization(self) -> tuple[float, ...]:
        if not self._has_sample_buffer:
            return (float(self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu),)
        return self._buffered_utilization()

    def _buffered_utilization(self) -> tuple[float, ...]:
        """The driver's utilisation samples newer than the newest one already taken, each the percent of its sample
        period the GPU was busy; draining the buffer at every poll keeps its ring from overwriting any."""
        try:
            value_type, samples = self._nvml.nvmlDeviceGetSamples(
                self._handle, self._nvml.NVML_GPU_UTILIZATION_SAMPLES, self._newest_sample_us
            )
        except self._nvml.NVMLError_NotFound:  # no sample newer than that
            return ()
        if not samples:
            return ()
        timestamps_us = sorted(sample.timeStamp for sample in samples)  # microseconds
        previous_us = [self._newest_sample_us] if self._newest_sample_us else []
        self._sample_spacings_us.extend(later - earlier for earlier, later in pairwise(previous_us + timestamps_us))
        self._newest_sample_us = timestamps_us[-1]
        value_field = SAMPLE_VALUE_FIELDS[value_type]
        return tuple(float(getattr(sample.sampleValue, value_field)) for sample in samples)


class Monitor:
    """Samples one device and this process in a background thread; see the module docstring.

    `window()` after `stop()` raises RuntimeError: the thread is gone, so there is nothing left to report.
    `stop()` is idempotent: a second call returns the same Usage as the first.
    """

    def __init__(self, device: torch.device, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self.device = device
        self.interval_s = interval_s
        self._process = psutil.Process()
        self._lock = threading.Lock()  # guards the window fields below, written by both threads
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: _NvmlReader | None = None
        self._device_note: str | None = None  # why there is no NVML at all
        self._window_start: _Sample | None = None  # the previous window's last sample: this window's left edge
        self._window_samples: list[_Sample] = []
        self._window_start_energy_j: float | None = None
        self._final_usage: Usage | None = None

    def start(self) -> None:
        """Starts the daemon thread that samples every `interval_s`."""
        if self._thread is not None:
            raise RuntimeError("this Monitor was already started; use a new Monitor for a new run")
        self._open_device()
        with self._lock:
            # psutil's first cpu_percent() only sets its reference point (and returns 0.0); this left edge
            # is never counted as a sample of its own
            self._window_start = self._take_sample()
            self._window_start_energy_j = self._read_energy_counter()
        self._thread = threading.Thread(target=self._sample_until_stopped, name="devicebench-monitor", daemon=True)
        self._thread.start()

    def window(self) -> Usage:
        """The usage since the previous window() (or start); begins a new window and keeps sampling."""
        if self._final_usage is not None:
            raise RuntimeError("the Monitor is stopped: window() has nothing left to watch; stop() gave the last Usage")
        if self._thread is None:
            raise RuntimeError("call start() before window()")
        with self._lock:
            return self._close_window()

    def stop(self) -> Usage:
        """The usage since the previous window(); stops and joins the thread. A second call returns the same."""
        if self._final_usage is not None:
            return self._final_usage
        if self._thread is None:
            raise RuntimeError("call start() before stop()")
        self._stop_requested.set()
        self._thread.join()
        with self._lock:
            self._final_usage = self._close_window()
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        return self._final_usage

    def __enter__(self) -> Monitor:
        self.start()
        return self

    def __exit__(self, *exception_info: object) -> None:
        self.stop()

    def _open_device(self) -> None:
        # CPU: only the process figures. CPU package energy (RAPL) is out of scope, so no note is owed either.
        if self.device.type == "cpu":
            return
        if self.device.type != "cuda":
            self._device_note = f"no utilisation or energy sampler for {self.device.type} devices"
            return
        try:
            self._nvml = _NvmlReader.open(self.device)
        except NvmlUnavailable as reason:
            self._device_note = str(reason)

    def _sample_until_stopped(self) -> None:
        while not self._stop_requested.wait(self.interval_s):
            with self._lock:
                self._window_samples.append(self._take_sample())

    def _take_sample(self) -> _Sample:
        """One reading of everything; the caller holds the lock."""
        return _Sample(
            host_s=host_seconds(),
            process_cpu_percent=self._process.cpu_percent(),
            rss_mib=self._process.memory_info().rss / BYTES_PER_MIB,
            device=None if self._nvml is None else self._nvml.poll(),
        )

    def _read_energy_counter(self) -> float | None:
        return None if self._nvml is None else self._nvml.energy_counter_j()

    def _close_window(self) -> Usage:
        """Takes the closing sample, summarises the window and opens the next one at it; the caller holds the lock."""
        assert self._window_start is not None
        closing_sample = self._take_sample()
        self._window_samples.append(closing_sample)
        end_energy_j = self._read_energy_counter()
        edges = [self._window_start, *self._window_samples]
        cpu_percent, rss_peak_mib = _process_figures(edges)
        device = (
            _DeviceFigures(note=self._device_note)
            if self._nvml is None
            else _device_figures(self._nvml, edges, self._window_start_energy_j, end_energy_j)
        )
        self._window_start, self._window_samples, self._window_start_energy_j = closing_sample, [], end_energy_j
        return Usage(
            samples=len(edges) - 1,
            process_cpu_percent=cpu_percent,
            rss_peak_mib=rss_peak_mib,
            device_utilization_percent=device.utilization_percent,
            device_memory_peak_mib=device.memory_peak_mib,
            device_power_mean_w=device.power_mean_w,
            device_energy_j=device.energy_j,
            device_note=device.note,
        )


def _process_figures(edges: list[_Sample]) -> tuple[float | None, float]:
    """This process's mean CPU use and peak RSS over a window: `edges` are its left edge and then its samples."""
    samples = edges[1:]
    elapsed_s = [later.host_s - earlier.host_s for earlier, later in pairwise(edges)]
    # each cpu_percent covers the time since the previous sample, so weight it by that time
    total_s = sum(elapsed_s)
    if total_s >= SHORTEST_CPU_WINDOW_S:
        process_cpu_percent: float | None = (
            sum(sample.process_cpu_percent * dt for sample, dt in zip(samples, elapsed_s, strict=True)) / total_s
        )
    elif total_s > 0:
        process_cpu_percent = None  # a few clock ticks cannot say how busy the CPU was: unknown, not 0%
    else:
        process_cpu_percent = statistics.fmean(sample.process_cpu_percent for sample in samples)
    return process_cpu_percent, max(sample.rss_mib for sample in samples)


@dataclass(frozen=True)
class _DeviceFigures:
    utilization_percent: float | None = None
    memory_peak_mib: float | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    note: str | None = None  # which figures are None, and why


def _device_figures(
    reader: _NvmlReader, edges: list[_Sample], start_energy_j: float | None, end_energy_j: float | None
) -> _DeviceFigures:
    """The NVML figures of one window: `edges` are its left edge and then its samples, the last taken as it closed."""
    window_polls = _device_polls(edges[1:])
    window_s = edges[-1].host_s - edges[0].host_s
    unknown = dict(reader.missing)  # figure -> why it is None in this window
    for figure, (period_s, period_name) in reader.update_periods_s().items():
        if figure not in unknown and window_s < period_s:
            unknown[figure] = f"the {window_s:.3g} s window is shorter than the {period_s:.3g} s {period_name}"
    utilization_percents = [percent for poll in window_polls for percent in poll.utilization_percents]
    if UTILIZATION not in unknown and not utilization_percents:
        unknown[UTILIZATION] = "NVML took no utilisation sample in the window"

    energy_j = None
    if POWER_AND_ENERGY not in unknown:
        if reader.has_energy_counter:
            # both counter reads gave a figure: a read that fails puts POWER_AND_ENERGY in `missing` for good
            assert start_energy_j is not None and end_energy_j is not None
            energy_j = end_energy_j - start_energy_j
        else:  # integrate power over time (trapezoid rule)
            powers_w = _known([poll.power_w for poll in _device_polls(edges)])
            energy_j = sum(
                (earlier_w + later_w) / 2 * (later.host_s - earlier.host_s)
                for (earlier_w, later_w), (earlier, later) in zip(pairwise(powers_w), pairwise(edges))
            )
    return _DeviceFigures(
        utilization_percent=None if UTILIZATION in unknown else statistics.fmean(utilization_percents),
        memory_peak_mib=None if MEMORY in unknown else max(_known([poll.memory_used_mib for poll in window_polls])),
        power_mean_w=None if energy_j is None else energy_j / window_s,
        energy_j=energy_j,
        note="; ".join(f"{figure} unknown: {unknown[figure]}" for figure in FIGURES if figure in unknown) or None,
    )


def _device_polls(samples: list[_Sample]) -> list[_DevicePoll]:
    """Each sample's NVML reading: a monitor with an NVML reader polls it in every sample it takes."""
    polls = []
    for sample in samples:
        assert sample.device is not None  # _device_figures is asked only of a monitor that has a reader
        polls.append(sample.device)
    return polls


def _known(values: list[float | None]) -> list[float]:
    """A figure's readings over a window NVML gave it in: None is a failed read, which puts the figure in
    `missing` for the rest of the run, so a figure read in the window has no None."""
    known = [value for value in values if value is not None]
    assert len(known) == len(values)
    return known


def peak_rss_mib() -> float | None:
    """This process's peak resident set size so far, as the kernel counts it (every spike); None where unknown."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 if sys.platform != "darwin" else peak / 2**20  # kB on Linux, bytes on macOS
