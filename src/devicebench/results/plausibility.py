"""Numbers that break physics are flagged, never shown as plain numbers.

A benchmark tool that times a GPU without waiting for it prints petaflops; one whose "GPU" run kept the model on the
CPU prints a GPU 0% busy. Each run's figures are set against what its device can do at all, and each flag keeps the
numbers that raised it and what to do:
- `above-peak`: the achieved TFLOP/s of each device above its calibrated matmul peak at the precision the run used
  (the datasheet's where it is not calibrated). No device computes faster than its peak: the clock did not wait for
  the device, or the peak was understated.
- `above-bandwidth`: a training step reads every weight and writes it back at least once. Where the weights are too
  large for any chip's cache, steps/s x that traffic above the device's memory bandwidth (its datasheet's) cannot be.
- `implausible-peak`: a calibrated matmul peak no device reaches (above LARGEST_DEVICE_TFLOPS, or more than twice
  its datasheet's): a hand-edited or imported figure. The MFU against it would read 0% and mean nothing, so it is
  left out, and the datasheet's peak stands in for the checks above. A calibration file holding one is not read.
- `device-idle`: an accelerator under 5% busy while it trained. From the numbers, which: the loop waited for its
  batches (input-bound), a step's work is too small to hide the launching of its kernels (launch-bound), or real work
  left the device idle (the work ran elsewhere).
A row compared with a CPU row (results/compare.py) is also flagged `slower-than-baseline` when the accelerator lost,
with the reason its numbers give.

    python -c "from devicebench.results.plausibility import DEVICE_IDLE_PERCENT; print(DEVICE_IDLE_PERCENT)"
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from devicebench.results.datasheets import datasheet_for
from devicebench.results.diagnosis import INPUT_BOUND_WAIT_SHARE
from devicebench.results.schema import RunRecord, RunSettings

TERA = 1e12  # FLOP/s per TFLOP/s
BYTES_PER_GB = 1e9  # datasheets count bandwidth in decimal gigabytes
DEVICE_IDLE_PERCENT = 5.0  # an accelerator less busy than this while training did next to none of the work
# Weights larger than this cannot stay on chip from one step to the next: more than any GPU's L2 cache (H100 50 MB,
# RTX 4090 72 MB), so every step must fetch them from device memory
LARGEST_ON_CHIP_CACHE_BYTES = 256 * 2**20
FP32_BYTES = 4  # the weights and the optimizer's update stay fp32, under bf16 autocast too
BYTES_PER_WEIGHT_PER_STEP = 2 * FP32_BYTES  # each weight read at least once (forward) and written once (the update)
# More matmul TFLOP/s than any single device computes at fp32, tf32 or bf16 (a B200: about 2,250 dense bf16), with
# room for a decade of growth: a calibrated figure above it was typed or forged, not measured
LARGEST_DEVICE_TFLOPS = 10_000.0
# A calibration measures what the datasheet promises or less (boost clocks are the datasheet's); twice as much is a
# figure that was not measured on that device
MOST_OVER_DATASHEET = 2.0
# A GPU launches a training step's tens to hundreds of kernels at 5-10 us each: a step whose matmul work the device
# would finish in less than this at its peak leaves it waiting for Python to launch the next kernel
LAUNCH_HIDING_S = 1e-3
SMALL_BATCH_BUSY_PERCENT = 50.0  # below this, a GPU that lost to the CPU was not given enough work per step


@dataclass(frozen=True)
class Flag:
    code: str  # "implausible-peak", "above-peak", "above-bandwidth", "device-idle", "slower-than-baseline"
    text: str  # the numbers that raised it and what to do


def peak_precision(device: str, settings: RunSettings) -> str | None:
    """Which matmul peak a run's MFU divides by: "bf16" under bf16 autocast; on a CUDA device "tf32" when both
    TF32 switches were on (matmuls and cuDNN) and "fp32" when both were off; None when only one was, because its
    matmuls and its convolutions then ran on different units and no single peak describes them."""
    if settings.precision != "fp32":
        return settings.precision
    if not device.startswith("cuda"):
        return "fp32"  # TF32 is NVIDIA's alone
    if settings.tf32_matmul != settings.tf32_cudnn:
        return None
    return "tf32" if settings.tf32_matmul else "fp32"


def peak_doubt(device_name: str, precision: str | None, tflops: float) -> str | None:
    """Why a calibrated matmul peak of `tflops` on `device_name` at `precision` cannot have been measured, or None
    when it can: the one rule for a calibration file's figures and a stored run's."""
    if not (math.isfinite(tflops) and tflops > 0):
        return f"{tflops!r} TFLOP/s is not a rate"
    datasheet = datasheet_for(device_name)
    promised = None if datasheet is None or precision is None else datasheet.tflops(precision)
    if datasheet is not None and promised is not None and tflops > MOST_OVER_DATASHEET * promised:
        return (
            f"{tflops:.3g} TFLOP/s is {tflops / promised:,.3g}x the {datasheet.product} datasheet's {precision} "
            f"peak ({promised:.3g} TFLOP/s)"
        )
    if tflops > LARGEST_DEVICE_TFLOPS:
        return f"{tflops:.3g} TFLOP/s is more than any device computes (under {LARGEST_DEVICE_TFLOPS:,.0f} TFLOP/s)"
    return None


def calibrated_peak(record: RunRecord) -> float | None:
    """The calibrated matmul peak stored with `record` (the MFU's divisor), None when there is none or it cannot
    have been measured (peak_doubt)."""
    if not record.peak_tflops:
        return None
    doubt = peak_doubt(record.device_name, peak_precision(record.device, record.settings), record.peak_tflops)
    return None if doubt else record.peak_tflops


def device_peak(record: RunRecord) -> tuple[float, str] | None:
    """The matmul TFLOP/s one of the run's devices reaches at most at the precision the run used, and where that
    figure comes from: the calibration (`devicebench calibrate`) when it can be believed, else the device's
    datasheet; None when neither."""
    calibrated = calibrated_peak(record)
    if calibrated:
        return calibrated, "calibrated"
    precision = peak_precision(record.device, record.settings)
    datasheet = datasheet_for(record.device_name)
    promised = None if datasheet is None or precision is None else datasheet.tflops(precision)
    return None if datasheet is None or promised is None else (promised, f"{datasheet.product} datasheet's")


def flag_run(record: RunRecord) -> None:
    """Set `record`'s plausibility flags and their reasons from its steady epochs (None when nothing is wrong)."""
    flags = run_flags(record)
    record.plausibility_flags = ", ".join(flag.code for flag in flags) or None
    record.plausibility_note = "; ".join(flag.text for flag in flags) or None


def run_flags(record: RunRecord) -> list[Flag]:
    """What in `record`'s steady-state figures breaks physics or needs explaining; empty when nothing does."""
    steady = record.steady_epochs
    if not steady:
        return []
    samples_per_s = statistics.median(epoch.samples_per_s for epoch in steady)
    checks = (
        _implausible_peak(record),
        _above_peak(record, samples_per_s),
        _above_bandwidth(record, samples_per_s),
        _device_idle(record),
    )
    return [flag for flag in checks if flag is not None]


def slower_than_baseline(record_runs: list[RunRecord], ratio: float, baseline: str) -> Flag:
    """An accelerator's runs that trained `ratio` (< 1) times as fast as the `baseline` CPU on the same work: why,
    from the numbers."""
    first = record_runs[0]
    wait = _median(
        [
            epoch.input_wait_s / epoch.train_time_s
            for run in record_runs
            for epoch in run.steady_epochs
            if epoch.input_wait_s is not None and epoch.train_time_s > 0
        ]
    )
    busy = _median(
        [
            epoch.device_utilization_percent
            for run in record_runs
            for epoch in run.steady_epochs
            if epoch.device_utilization_percent is not None
        ]
    )
    lost = f"{first.device} trained at {ratio:.2f}x the speed of {baseline}"
    step_s = _step_compute_at_peak_s(first)
    if wait is not None and wait >= INPUT_BOUND_WAIT_SHARE:
        why = (
            f"input-bound: it waited for batches {wait:.0%} of training, which the faster device cannot shorten; "
            "more --workers or a larger --batch-size"
        )
    elif step_s is not None and step_s < LAUNCH_HIDING_S:
        why = (
            f"launch-bound: {_step_text(first, step_s)}, too little to hide launching its kernels "
            f"(~{LAUNCH_HIDING_S * 1e3:g} ms), which the CPU does not pay; a larger --batch-size or --mode tuned "
            "(CUDA graphs through torch.compile)"
        )
    elif busy is not None and busy < SMALL_BATCH_BUSY_PERCENT:
        why = (
            f"too small a batch: batch {first.settings.batch_size} kept it {busy:.0f}% busy; a larger "
            "--batch-size (or --batch-size auto)"
        )
    else:
        why = "no cause shows in its numbers: `devicebench check` tests that the work lands on the device"
    return Flag("slower-than-baseline", f"{lost}: {why}")


def _implausible_peak(record: RunRecord) -> Flag | None:
    if not record.peak_tflops or calibrated_peak(record) is not None:
        return None
    precision = peak_precision(record.device, record.settings)
    doubt = peak_doubt(record.device_name, precision, record.peak_tflops)
    return Flag(
        "implausible-peak",
        (
            f"the calibrated {precision or ''} peak stored with the run cannot have been measured: {doubt}; its MFU is "
            "left out. Run `devicebench calibrate` again on that machine (a hand-edited or imported calibration?)"
        ),
    )


def _above_peak(record: RunRecord, samples_per_s: float) -> Flag | None:
    peak = device_peak(record)
    if record.flops_per_sample is None or peak is None:
        return None
    peak_tflops, basis = peak
    achieved = record.flops_per_sample * samples_per_s / TERA / record.settings.world_size  # each device's share
    if achieved <= peak_tflops:
        return None
    precision = peak_precision(record.device, record.settings)
    return Flag(
        "above-peak",
        (
            f"{achieved:.3g} TFLOP/s per device is {achieved / peak_tflops:.0%} of the {basis} {precision} peak "
            f"({peak_tflops:.3g} TFLOP/s), which no device exceeds: either the peak is understated (calibrated under "
            "load: run `devicebench calibrate` again) or the clock did not wait for the device (`devicebench check`)"
        ),
    )


def _above_bandwidth(record: RunRecord, samples_per_s: float) -> Flag | None:
    datasheet = datasheet_for(record.device_name)
    parameters, batch_size = record.parameter_count, record.settings.batch_size
    if datasheet is None or not parameters or not batch_size:
        return None
    if parameters * FP32_BYTES <= LARGEST_ON_CHIP_CACHE_BYTES:
        return None  # they may stay on chip: no lower bound on traffic
    steps_per_s = samples_per_s / batch_size  # every device takes every step, on its share of the global batch
    traffic_gb_s = parameters * BYTES_PER_WEIGHT_PER_STEP * steps_per_s / BYTES_PER_GB
    if traffic_gb_s <= datasheet.memory_gb_s:
        return None
    return Flag(
        "above-bandwidth",
        (
            f"{steps_per_s:,.1f} steps/s would move at least {traffic_gb_s:,.0f} GB/s (each of {parameters:,} fp32 weights "
            f"read and written once a step), above the {datasheet.product}'s {datasheet.memory_gb_s:,.0f} GB/s: the "
            "clock did not wait for the device (`devicebench check`)"
        ),
    )


def _device_idle(record: RunRecord) -> Flag | None:
    if record.device == "cpu":
        return None
    busy = _median(
        [
            epoch.device_utilization_percent
            for epoch in record.steady_epochs
            if epoch.device_utilization_percent is not None
        ]
    )
    if busy is None or busy >= DEVICE_IDLE_PERCENT:
        return None
    epochs = record.steady_epochs
    wait = sum(epoch.input_wait_s or 0.0 for epoch in epochs) / sum(epoch.train_time_s for epoch in epochs)
    step_s = _step_compute_at_peak_s(record)
    idle = f"{record.device} was {busy:.1f}% busy while training"
    if wait >= INPUT_BOUND_WAIT_SHARE:
        why = f"input-bound: the loop waited for batches {wait:.0%} of training; more --workers"
    elif step_s is None:
        why = (
            "the work ran elsewhere, or each step is too small to keep it busy (no peak known to tell which): "
            "`devicebench check` tests that the work lands on the device"
        )
    elif step_s < LAUNCH_HIDING_S:
        why = f"launch-bound: {_step_text(record, step_s)}; a larger --batch-size"
    else:
        why = (
            f"the work ran elsewhere: {_step_text(record, step_s)}, enough to keep it busy, yet it idled; is the "
            "model on the device? `devicebench check` tests that the work lands there"
        )
    return Flag("device-idle", f"{idle}: {why}")


def _step_compute_at_peak_s(record: RunRecord) -> float | None:
    """How long one step's matrix work would keep one of the run's devices busy at its peak; None when unknown."""
    peak = device_peak(record)
    if record.flops_per_sample is None or peak is None or not record.settings.batch_size:
        return None
    return record.flops_per_sample * record.settings.batch_size / record.settings.world_size / (peak[0] * TERA)


def _step_text(record: RunRecord, step_s: float) -> str:
    assert record.flops_per_sample is not None  # step_s, which the callers have, is computed from it
    gflop = record.flops_per_sample * record.settings.batch_size / record.settings.world_size / 1e9
    amount = f"{gflop:,.0f}" if gflop >= 100 else f"{gflop:.3g}"  # 1,000 GFLOP, not 1e+03
    return f"a step's {amount} GFLOP take it {step_s * 1e6:,.0f} us at its peak"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None
