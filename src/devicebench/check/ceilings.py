"""The ceiling checks of `devicebench check`: a short calibration (never stored) against the datasheet and, on
NVIDIA, the clocks, temperature, power limit and PCIe link NVML reads while it runs.

    python -c "import torch; from devicebench.check import ceilings; print(ceilings.ceiling_checks(torch.device('cpu')))"
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from devicebench import host, nvml
from devicebench.check.findings import CEILINGS, FAIL, PASS, PEAK_TOLERANCE, WARN, Check, is_nvidia
from devicebench.engine.calibrate import CalibrationPlan, DeviceCeilings, Measurement, measure_ceilings
from devicebench.results.datasheets import datasheet_for

# Ceilings: a calibration of seconds, set against the datasheet
CEILING_LOW_FRACTION = 0.70  # of the datasheet: below it a GPU is throttled, power-capped, shared or MIG-sliced
CLOCK_LOW_FRACTION = 0.70  # of the maximum SM clock, the highest seen under load: below it the GPU is throttled
TEMPERATURE_MARGIN_C = 5  # degrees C below the slowdown threshold: this close, the GPU is about to slow down
# CPU: three fp32 stretches of 0.3 s at up to 2048x2048 (~17 GFLOP a product) and a copy past any cache
CPU_CHECK_PLAN = CalibrationPlan(
    matmul_size=2048,
    memory_copy_bytes=256 * host.BYTES_PER_MIB,
    host_to_device_bytes=host.BYTES_PER_MIB,
    warmup_s=0.1,
    stretch_s=0.3,
    stretches=3,
    cap_s=2.0,
)
# GPU: the full calibration's sizes (smaller ones understate a GPU), stretches of 0.2 s: about 1 s a figure
ACCELERATOR_CHECK_PLAN = CalibrationPlan(
    matmul_size=8192,
    memory_copy_bytes=1024 * host.BYTES_PER_MIB,
    host_to_device_bytes=256 * host.BYTES_PER_MIB,
    warmup_s=0.2,
    stretch_s=0.2,
    stretches=3,
    cap_s=2.0,
)


def check_plan(device: torch.device) -> CalibrationPlan:
    return CPU_CHECK_PLAN if device.type == "cpu" else ACCELERATOR_CHECK_PLAN


def ceiling_checks(
    device: torch.device,
    *,
    measure: Callable[..., DeviceCeilings] = measure_ceilings,
    progress: Callable[[str], None] | None = None,
) -> list[Check]:
    """A short calibration (check_plan; never stored) against the datasheet and, on NVIDIA, the clocks,
    temperature, power limit and PCIe link NVML reads while it runs."""
    announce = progress or (lambda step: None)
    gpu = _NvidiaGpu.open(device) if is_nvidia(device) else None
    try:

        def step(name: str) -> None:
            announce(name)
            if gpu:
                gpu.take_snapshot()  # just after the previous measurement's sustained work

        ceilings = measure(device, plan=check_plan(device), progress=step)
        if gpu:
            gpu.take_snapshot()
        checks = [*_datasheet_checks(device, ceilings), *_host_to_device_checks(device, ceilings)]
        return checks + (gpu.checks(device) if gpu else [])
    finally:
        if gpu:
            gpu.close()


def _datasheet_checks(device: torch.device, ceilings: DeviceCeilings) -> list[Check]:
    sheet = datasheet_for(ceilings.device_name)
    product = sheet.product if sheet else None
    checks = [
        _against_datasheet(
            device,
            f"matmul {precision}",
            measured,
            f"{measured.size}x{measured.size}",
            sheet.tflops(precision) if sheet else None,
            "TFLOP/s",
            product,
        )
        for precision, measured in ceilings.matmul.items()
    ]
    copy = ceilings.memory_copy
    checks.append(
        _against_datasheet(
            device,
            "memory copy",
            copy,
            f"{copy.size / host.BYTES_PER_MIB:,.0f} MiB",
            sheet.memory_gb_s if sheet else None,
            "GB/s",
            product,
        )
    )
    return checks


def _against_datasheet(
    device: torch.device,
    name: str,
    measured: Measurement,
    size: str,
    promised: float | None,
    unit: str,
    product: str | None,
) -> Check:
    figure = f"{measured.rate:,.2f} {unit} ({size})"
    if promised is None:
        return Check(str(device), CEILINGS, name, PASS, f"{figure}; no datasheet to compare")
    fraction = measured.rate / promised
    measured_text = f"{figure}, {fraction:.0%} of the {product} datasheet's {promised:,g} {unit}"
    if fraction > PEAK_TOLERANCE:
        return Check(
            str(device),
            CEILINGS,
            name,
            FAIL,
            measured_text,
            "Faster than the hardware can go: the clock did not wait for the device. See the timing check.",
        )
    if fraction < CEILING_LOW_FRACTION:
        return Check(
            str(device),
            CEILINGS,
            name,
            WARN,
            measured_text,
            "Below its rating: throttled (temperature, clocks), a lowered power limit, a MIG slice or another "
            "process sharing the GPU (nvidia-smi shows each). `devicebench calibrate` measures it longer.",
        )
    return Check(str(device), CEILINGS, name, PASS, measured_text)


def _host_to_device_checks(device: torch.device, ceilings: DeviceCeilings) -> list[Check]:
    copies = ceilings.host_to_device
    if not copies:
        return []  # the CPU's memory is the host's
    measured = ", ".join(f"{kind} {taken.rate:,.1f} GB/s" for kind, taken in copies.items())
    pinned, pageable = copies.get("pinned"), copies.get("pageable")
    if pinned and pageable and pinned.rate <= pageable.rate:
        return [
            Check(
                str(device),
                CEILINGS,
                "host to device",
                WARN,
                f"{measured}: pinned memory is no faster",
                "Pinned copies go straight to the GPU's DMA engines and should be faster: an IOMMU, a "
                "virtualised GPU or a narrow PCIe link slows them (see the PCIe row).",
            )
        ]
    return [Check(str(device), CEILINGS, "host to device", PASS, measured)]


# A figure NVML read, as a row: (name, measured, low, advice), advice given only when the figure is low
_Reading = tuple[str, str, bool, str]


class _NvidiaGpu:
    """One NVIDIA GPU's clocks, temperature, power limit and PCIe link, each read on its own through NVML; a figure
    NVML does not give is left out. Snapshots keep the highest clock, temperature and link seen under load."""

    def __init__(self, module: ModuleType, handle: Any) -> None:
        self._nvml, self._handle = module, handle
        self._busiest: dict[str, int] = {}  # figure -> the highest reading among the snapshots

    @classmethod
    def open(cls, device: torch.device) -> _NvidiaGpu | None:
        try:
            return cls(*nvml.open_nvml(device))
        except nvml.NvmlUnavailable:  # the software check says why NVML is missing
            return None

    def close(self) -> None:
        nvml.shut_down(self._nvml)

    def read(self, function: str, *arguments: Any) -> int | None:
        try:
            return getattr(self._nvml, function)(self._handle, *arguments)
        except (self._nvml.NVMLError, AttributeError):  # NotSupported, or an nvidia-ml-py without the call
            return None

    def take_snapshot(self) -> None:
        readings = {
            "sm_clock_mhz": self.read("nvmlDeviceGetClockInfo", self._nvml.NVML_CLOCK_SM),
            "temperature_c": self.read("nvmlDeviceGetTemperature", self._nvml.NVML_TEMPERATURE_GPU),
            "pcie_generation": self.read("nvmlDeviceGetCurrPcieLinkGeneration"),  # it drops when idle
            "pcie_width": self.read("nvmlDeviceGetCurrPcieLinkWidth"),
        }
        for figure, value in readings.items():
            if value is not None:
                self._busiest[figure] = max(value, self._busiest.get(figure, value))

    def checks(self, device: torch.device) -> list[Check]:
        """A row for each figure NVML gave: a warn, with its advice, where the figure is low."""
        readings = (self._sm_clock(), self._temperature(), self._power_limit(), self._pcie_link())
        return [
            Check(str(device), CEILINGS, name, WARN if low else PASS, measured, advice if low else None)
            for name, measured, low, advice in filter(None, readings)
        ]

    def _sm_clock(self) -> _Reading | None:
        clock, top_clock = (
            self._busiest.get("sm_clock_mhz"),
            self.read("nvmlDeviceGetMaxClockInfo", self._nvml.NVML_CLOCK_SM),
        )
        if clock is None or not top_clock:
            return None
        return (
            "SM clock",
            f"{clock} MHz under load, of {top_clock} MHz at most",
            clock < top_clock * CLOCK_LOW_FRACTION,
            "The GPU is throttled (temperature, power) or its clocks are locked low (nvidia-smi -q "
            "-d PERFORMANCE says why; nvidia-smi -rgc resets locked clocks).",
        )

    def _temperature(self) -> _Reading | None:
        temperature = self._busiest.get("temperature_c")
        if temperature is None:
            return None
        slowdown = self.read("nvmlDeviceGetTemperatureThreshold", self._nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
        return (
            "temperature",
            f"{temperature} °C under load" + (f", slowdown at {slowdown} °C" if slowdown is not None else ""),
            slowdown is not None and temperature >= slowdown - TEMPERATURE_MARGIN_C,
            "The GPU is about to slow itself down: check its cooling (airflow, fans, the room).",
        )

    def _power_limit(self) -> _Reading | None:
        limit, default = (
            self.read("nvmlDeviceGetEnforcedPowerLimit"),
            self.read("nvmlDeviceGetPowerManagementDefaultLimit"),
        )
        if limit is None or default is None:
            return None
        return (
            "power limit",
            f"{limit / 1000:g} W, default {default / 1000:g} W",
            limit < default,
            f"The power cap was lowered: `nvidia-smi -pl {default / 1000:g}` restores it (root).",
        )

    def _pcie_link(self) -> _Reading | None:
        width, top_width = self._busiest.get("pcie_width"), self.read("nvmlDeviceGetMaxPcieLinkWidth")
        if width is None or top_width is None:
            return None
        generation, top_generation = (
            self._busiest.get("pcie_generation"),
            self.read("nvmlDeviceGetMaxPcieLinkGeneration"),
        )
        generations = f"gen {generation} of {top_generation}, " if generation and top_generation else ""
        return (
            "PCIe link",
            f"{generations}x{width} of x{top_width}",
            width < top_width,
            "The link runs narrower than the card allows: reseat it in a full-width slot, or check "
            "the BIOS's bifurcation setting. Host-to-device copies are slower by as much.",
        )
