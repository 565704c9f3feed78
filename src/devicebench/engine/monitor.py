"""Background sampler: how busy the CPU and the device were during one training run, and how much energy the
device drew.

A daemon thread samples every `interval_s`: this process's CPU use and resident memory (psutil) and, on a CUDA
device, the GPU's utilisation, memory used and power (NVML, through nvidia-ml-py when it is installed). The
runner cuts the run into windows (one per epoch, say) with `window()`; each window reports its own `Usage`.
Telemetry never stops a benchmark: where NVML is missing or fails, the device figures are None and
`Usage.device_note` says why.

    python -c "import time, torch; from devicebench.engine.monitor import Monitor; m = Monitor(torch.device('cpu')); m.start(); time.sleep(1); print(m.stop())"
"""

from __future__ import annotations

import os
import statistics
import threading
from dataclasses import dataclass
from itertools import pairwise
from types import ModuleType
from typing import Any

import psutil
import torch

from devicebench.engine.timing import host_seconds

MIB = 1024 * 1024  # bytes
NVML_MISSING_NOTE = "install nvidia-ml-py for GPU utilisation and energy"


# The kernel counts a process's CPU time in clock ticks of 10 ms: a shorter window reads 0% or 100% by chance
SHORTEST_CPU_WINDOW_S = 0.1


@dataclass(frozen=True)
class Usage:
    """What was seen over one window of time."""

    samples: int
    process_cpu_percent: float | None  # mean over the window; 100 = one core fully busy
    rss_peak_mib: float | None  # peak of the sampled resident set size; a spike between samples is missed
    device_utilization_percent: float | None  # NVML GPU utilisation, mean over the window
    device_memory_peak_mib: float | None  # NVML memory used on the whole device (all processes), peak
    device_power_mean_w: float | None
    device_energy_j: float | None  # energy counter difference, or power integrated over the window
    device_note: str | None  # why device figures are missing, if they are


class NvmlUnavailable(Exception):
    """Why NVML cannot watch a device; the message becomes `Usage.device_note`."""


def nvml_target(cuda_index: int, cuda_visible_devices: str | None) -> int | str:
    """The NVML index (int) or GPU UUID (str) of torch's `cuda:<cuda_index>`.

    CUDA numbers the GPUs that CUDA_VISIBLE_DEVICES lists from 0, in the order listed; NVML ignores the variable
    and numbers every GPU in the machine. Raises NvmlUnavailable for an entry NVML cannot look up (a MIG UUID, a
    typo) or an index past the end of the list.
    """
    if cuda_visible_devices is None:
        return cuda_index
    entries = [entry.strip() for entry in cuda_visible_devices.split(",")]
    if cuda_index >= len(entries):
        raise NvmlUnavailable(f"cuda:{cuda_index} is not among CUDA_VISIBLE_DEVICES={cuda_visible_devices!r}")
    entry = entries[cuda_index]
    if entry.isdigit():
        return int(entry)
    if entry.startswith("GPU-"):
        return entry
    raise NvmlUnavailable(f"cannot map CUDA_VISIBLE_DEVICES entry {entry!r} to an NVML device")


@dataclass(frozen=True)
class _DeviceReading:
    utilization_percent: float
    memory_used_mib: float
    power_w: float


@dataclass(frozen=True)
class _Sample:
    host_s: float  # host_seconds() when taken
    process_cpu_percent: float  # since the previous sample
    rss_mib: float
    device: _DeviceReading | None


class _NvmlReader:
    """One GPU seen through NVML: every NVML call of the monitor is in this class."""

    def __init__(self, nvml: ModuleType, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle

    @classmethod
    def open(cls, cuda_index: int) -> _NvmlReader:
        """Initialises NVML and finds `cuda:<cuda_index>`; raises NvmlUnavailable saying why it cannot."""
        try:
            import pynvml
        except ImportError as error:
            raise NvmlUnavailable(NVML_MISSING_NOTE) from error
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML failed to initialise: {error}") from error
        try:
            target = nvml_target(cuda_index, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if isinstance(target, str):
                handle = pynvml.nvmlDeviceGetHandleByUUID(target)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(target)
        except NvmlUnavailable:
            pynvml.nvmlShutdown()
            raise
        except pynvml.NVMLError as error:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable(f"NVML failed to find cuda:{cuda_index}: {error}") from error
        return cls(pynvml, handle)

    def read(self) -> _DeviceReading:
        try:
            return _DeviceReading(
                utilization_percent=self._nvml.nvmlDeviceGetUtilizationRates(self._handle).gpu,
                memory_used_mib=self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used / MIB,
                power_w=self._nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000,  # milliwatts
            )
        except self._nvml.NVMLError as error:
            raise NvmlUnavailable(f"NVML stopped answering: {error}") from error

    def energy_counter_j(self) -> float | None:
        """Energy used since the driver loaded; None where the GPU has no counter (before Volta)."""
        try:
            return self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) / 1000  # millijoules
        except self._nvml.NVMLError:  # NVMLError_NotSupported on older GPUs: the caller integrates power instead
            return None

    def power_limit_w(self) -> float | None:
        """The power cap the driver enforces (a lowered cap slows the GPU); None where NVML cannot tell."""
        try:
            return self._nvml.nvmlDeviceGetEnforcedPowerLimit(self._handle) / 1000  # milliwatts
        except self._nvml.NVMLError:
            return None

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass  # the figures are already taken; a failed shutdown changes none of them


def power_limit_w(cuda_index: int) -> float | None:
    """The power cap NVML says the driver enforces on `cuda:<cuda_index>`, in watts; None without NVML."""
    try:
        reader = _NvmlReader.open(cuda_index)
    except NvmlUnavailable:
        return None
    try:
        return reader.power_limit_w()
    finally:
        reader.close()


class Monitor:
    """Samples one device and this process in a background thread; see the module docstring.

    `window()` after `stop()` raises RuntimeError: the thread is gone, so there is nothing left to report.
    `stop()` is idempotent: a second call returns the same Usage as the first.
    """

    def __init__(self, device: torch.device, interval_s: float = 0.25) -> None:
        self.device = device
        self.interval_s = interval_s
        self._process = psutil.Process()
        self._lock = threading.Lock()  # guards the window fields below, written by both threads
        self._stop_requested = threading.Event()
        self._thread: threading.Thread | None = None
        self._nvml: _NvmlReader | None = None
        self._device_note: str | None = None
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
            self._nvml = _NvmlReader.open(self.device.index or 0)  # a bare "cuda" is device 0, as in PyTorch
        except NvmlUnavailable as reason:
            self._device_note = str(reason)

    def _sample_until_stopped(self) -> None:
        while not self._stop_requested.wait(self.interval_s):
            with self._lock:
                self._window_samples.append(self._take_sample())

    def _take_sample(self) -> _Sample:
        """One reading of everything; the caller holds the lock."""
        device_reading = None
        if self._nvml is not None:
            try:
                device_reading = self._nvml.read()
            except NvmlUnavailable as reason:  # from here on the device figures are None, with the reason
                self._device_note = str(reason)
                self._nvml.close()
                self._nvml = None
        return _Sample(
            host_s=host_seconds(),
            process_cpu_percent=self._process.cpu_percent(),
            rss_mib=self._process.memory_info().rss / MIB,
            device=device_reading,
        )

    def _read_energy_counter(self) -> float | None:
        return None if self._nvml is None else self._nvml.energy_counter_j()

    def _close_window(self) -> Usage:
        """Takes the closing sample, summarises the window and opens the next one at it; the caller holds the lock."""
        assert self._window_start is not None
        closing_sample = self._take_sample()
        self._window_samples.append(closing_sample)
        end_energy_j = self._read_energy_counter()
        usage = _summarize(
            self._window_start, self._window_samples, self._window_start_energy_j, end_energy_j, self._device_note
        )
        self._window_start, self._window_samples, self._window_start_energy_j = closing_sample, [], end_energy_j
        return usage


def _summarize(
    window_start: _Sample,
    samples: list[_Sample],
    start_energy_j: float | None,
    end_energy_j: float | None,
    device_note: str | None,
) -> Usage:
    """The Usage of one window: `samples` follow `window_start`, the last one taken as the window closed."""
    edges = [window_start, *samples]
    elapsed_s = [later.host_s - earlier.host_s for earlier, later in pairwise(edges)]
    cpu_percents = [sample.process_cpu_percent for sample in samples]
    # each cpu_percent covers the time since the previous sample, so weight it by that time
    total_s = sum(elapsed_s)
    if total_s >= SHORTEST_CPU_WINDOW_S:
        process_cpu_percent: float | None = (
            sum(p * dt for p, dt in zip(cpu_percents, elapsed_s, strict=True)) / total_s)
    elif total_s > 0:
        process_cpu_percent = None  # a few clock ticks cannot say how busy the CPU was: unknown, not 0%
    else:
        process_cpu_percent = statistics.fmean(cpu_percents)
    rss_peak_mib = max(sample.rss_mib for sample in samples)

    readings = [sample.device for sample in edges if sample.device is not None]
    if len(readings) < len(edges):  # no device to watch, or NVML failed: device_note says which
        return Usage(len(samples), process_cpu_percent, rss_peak_mib, None, None, None, None, device_note)
    window_readings = readings[1:]
    if start_energy_j is not None and end_energy_j is not None:
        energy_j = end_energy_j - start_energy_j
    else:  # no energy counter on this GPU: integrate power over time (trapezoid rule)
        energy_j = sum(
            (earlier.power_w + later.power_w) / 2 * dt
            for (earlier, later), dt in zip(pairwise(readings), elapsed_s, strict=True)
        )
    return Usage(
        samples=len(samples),
        process_cpu_percent=process_cpu_percent,
        rss_peak_mib=rss_peak_mib,
        device_utilization_percent=statistics.fmean(reading.utilization_percent for reading in window_readings),
        device_memory_peak_mib=max(reading.memory_used_mib for reading in window_readings),
        device_power_mean_w=statistics.fmean(reading.power_w for reading in window_readings),
        device_energy_j=energy_j,
        device_note=device_note,
    )
