"""The per-device work checks of `devicebench check`: a short training run while engine.monitor samples (the
parameters sit on the device, the device gets busy, the process appears in its process list), and known work timed
with and without synchronizing (a clock that does not wait for an asynchronous device is caught by physics).

    python -c "import torch; from devicebench.check import work; print(work.timing_check(torch.device('cpu')))"
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from devicebench import devices, machine, nvml
from devicebench.check.findings import FAIL, PASS, PEAK_TOLERANCE, TIMING, WARN, WORK, Check, is_nvidia
from devicebench.engine.monitor import Monitor, Usage
from devicebench.engine.timing import Stopwatch
from devicebench.results.datasheets import datasheet_for

# Work lands on the device: a small MLP trained for WORK_S on synthetic tensors made on the device
WORK_S = 1.0  # seconds of training: NVML's polled utilisation covers up to the last second, so no less
WORK_WIDTH = 1024  # features of each hidden layer
WORK_BATCH_CPU = 256  # samples a step: ~3 GFLOP, tens of milliseconds on two cores, so a run has many steps
WORK_BATCH_ACCELERATOR = 4096  # ~50 GFLOP a step, ~1 ms on an H100: kernels, not their launches, fill the run
WORK_CLASSES = 10
GPU_BUSY_MIN_PERCENT = 5.0  # NVML utilisation below this while training: the GPU did not get the work
CPU_IDLE_MAX_PERCENT = 10.0  # of one core: an idle Python process reads 0-2 %, so training below this did not run
CPU_STARVED_PERCENT = 50.0  # of one core: training that gets less than half a core is starved by other processes

# Timing: TIMING_PRODUCTS square fp32 products queued at once, timed with and without synchronizing
TIMING_PRODUCTS = 16
TIMING_SIZE_CPU = 512  # ~4 GFLOP in all: tens of milliseconds on two cores
TIMING_SIZE_ACCELERATOR = 4096  # ~2.2 TFLOP in all: milliseconds of kernels on any GPU, microseconds to queue
SYNC_OVER_ENQUEUE_MIN = 2.0  # a synchronized time under this multiple of the time to queue: sync did not wait


@dataclass(frozen=True)
class TrainingRun:
    parameter_device: torch.device  # where the model's parameters were when training ended
    steps: int
    seconds: float  # synchronized: until the device finished the last step


def train_briefly(device: torch.device, seconds: float = WORK_S, watch: Stopwatch | None = None) -> TrainingRun:
    """Train a small MLP on `device` for at least `seconds`, its data made on the device, so nothing waits on the
    host but the launches."""
    watch = watch or Stopwatch(device)
    model = nn.Sequential(
        nn.Linear(WORK_WIDTH, WORK_WIDTH),
        nn.ReLU(),
        nn.Linear(WORK_WIDTH, WORK_WIDTH),
        nn.ReLU(),
        nn.Linear(WORK_WIDTH, WORK_CLASSES),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = WORK_BATCH_CPU if device.type == "cpu" else WORK_BATCH_ACCELERATOR
    inputs = torch.randn(batch, WORK_WIDTH, device=device)
    labels = torch.randint(0, WORK_CLASSES, (batch,), device=device)
    steps, start = 0, watch.now()
    while True:
        loss = nn.functional.cross_entropy(model(inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        steps += 1
        elapsed = watch.now() - start
        if elapsed >= seconds:
            return TrainingRun(next(model.parameters()).device, steps, elapsed)


def compute_process_ids(device: torch.device) -> frozenset[int]:
    """The PIDs NVML lists as computing on CUDA `device`; NvmlUnavailable says why it cannot tell."""
    module, handle = nvml.open_nvml(device)
    try:
        return frozenset(process.pid for process in module.nvmlDeviceGetComputeRunningProcesses(handle))
    except module.NVMLError as error:
        raise nvml.NvmlUnavailable(f"NVML cannot list its processes: {error}") from None
    finally:
        nvml.shut_down(module)


def work_checks(
    device: torch.device,
    *,
    train: Callable[[torch.device], TrainingRun] = train_briefly,
    monitor: Callable[[torch.device], Monitor] = Monitor,
    process_ids: Callable[[torch.device], frozenset[int]] = compute_process_ids,
) -> list[Check]:
    """Train briefly while the monitor samples: the parameters must be on the device and the device busy (on a
    CUDA device its utilisation, and on NVIDIA this process in its process list; on the CPU this process's CPU use)."""
    with monitor(device) as watching:
        run = train(device)
    usage = watching.stop()  # the same Usage the with-block's exit took
    where = run.parameter_device
    on_device = (where.type, where.index or 0) == (device.type, device.index or 0)  # "mps" is "mps:0"
    checks = [
        Check(
            str(device),
            WORK,
            "model on the device",
            PASS if on_device else FAIL,
            f"the parameters are on {where} after {run.steps} steps in {run.seconds:.2f} s",
            None
            if on_device
            else f"The model was asked for {device} but trained on {where}: report this as a devicebench bug.",
        )
    ]
    if device.type == "cpu":
        return [*checks, _cpu_busy(device, usage)]
    checks.append(_device_busy(device, usage))
    if is_nvidia(device):  # the CUDA context outlives the run, so the process is still listed
        checks.append(_process_listed(device, process_ids, usage.device_utilization_percent))
    return checks


def _cpu_busy(device: torch.device, usage: Usage) -> Check:
    percent = usage.process_cpu_percent
    if percent is None:
        return Check(
            str(device),
            WORK,
            "CPU busy",
            WARN,
            "the run was too short to tell",
            "Check again; if it repeats, the machine is too loaded to measure.",
        )
    measured = f"this process used {percent:.0f}% of a core (100% = one core) while training"
    if percent < CPU_IDLE_MAX_PERCENT:
        return Check(
            str(device),
            WORK,
            "CPU busy",
            FAIL,
            f"{measured}: the CPU stayed idle",
            "The training did not run on the CPU: report this as a devicebench bug.",
        )
    if percent < CPU_STARVED_PERCENT:
        return Check(
            str(device),
            WORK,
            "CPU busy",
            WARN,
            f"{measured}: less than half a core",
            "Other processes or a CPU quota (a container's) starve this one: the CPU's figures will be low.",
        )
    return Check(str(device), WORK, "CPU busy", PASS, measured)


def _device_busy(device: torch.device, usage: Usage) -> Check:
    percent = usage.device_utilization_percent
    if percent is None:
        note = "devicebench samples no AMD GPU" if machine.snapshot().hip_build else usage.device_note
        return Check(
            str(device),
            WORK,
            "device busy",
            WARN,
            f"cannot tell: {note}",
            "Without utilisation, only the parameters' device and the timing checks show the work landed.",
        )
    measured = f"{percent:.0f}% busy while training"
    if percent < GPU_BUSY_MIN_PERCENT:
        return Check(
            str(device),
            WORK,
            "device busy",
            FAIL,
            f"{measured}: the work stayed off the GPU",
            "Check that CUDA_VISIBLE_DEVICES names this GPU and that NVML and PyTorch see the same one.",
        )
    return Check(str(device), WORK, "device busy", PASS, measured)


def _process_listed(
    device: torch.device, process_ids: Callable[[torch.device], frozenset[int]], busy_percent: float | None
) -> Check:
    """This process in the device's list of computing processes; a container may hide it (a warn), but absent
    while the device stayed idle, the work did not reach it (a fail)."""
    try:
        listed = process_ids(device)
    except nvml.NvmlUnavailable as reason:
        return Check(
            str(device),
            WORK,
            "process on the device",
            WARN,
            f"cannot tell: {reason}",
            "Without NVML's process list, the utilisation above tells whether the work landed.",
        )
    own = os.getpid()
    others = sorted(listed - {own})
    shown = ", ".join(map(str, others))
    if own in listed:
        if others:
            return Check(
                str(device),
                WORK,
                "process on the device",
                WARN,
                f"this process ({own}) and {len(others)} other(s) compute on it: {shown}",
                "Another process shares the GPU: its figures will be low and vary. nvidia-smi names them.",
            )
        return Check(str(device), WORK, "process on the device", PASS, f"this process ({own}), alone")
    absent = f"this process ({own}) is not in the device's list ({shown or 'empty'})"
    if busy_percent is not None and busy_percent < GPU_BUSY_MIN_PERCENT:
        return Check(
            str(device),
            WORK,
            "process on the device",
            FAIL,
            f"{absent} and the GPU stayed idle",
            "The work did not reach this GPU: check the PyTorch build and CUDA_VISIBLE_DEVICES.",
        )
    return Check(
        str(device),
        WORK,
        "process on the device",
        WARN,
        absent,
        "A container's own process IDs hide it from NVML (docker --pid=host shows it); the utilisation "
        "above tells whether the work landed.",
    )


# --- timing ---------------------------------------------------------------------------------------------------


def timing_check(
    device: torch.device,
    *,
    watch: Stopwatch | None = None,
    product: Callable[[], object] | None = None,
) -> Check:
    """Queue TIMING_PRODUCTS square products and time them with and without synchronizing. On an asynchronous
    device the synchronized time must exceed the time to queue them, and imply no more than the datasheet's peak;
    on the CPU, whose kernels finish before they return, the two agree. `product` queues one (tests fake it)."""
    watch = watch or Stopwatch(device)
    size = TIMING_SIZE_CPU if device.type == "cpu" else TIMING_SIZE_ACCELERATOR
    product = product or _square_product(device, size)
    product()  # untimed: the library's handle, its kernel choice and the allocation come first
    start = watch.now()
    for _ in range(TIMING_PRODUCTS):
        product()
    queued_s = watch.host_now() - start  # the host's time to queue the work
    synchronized_s = watch.now() - start  # until the device finished it
    tflops = TIMING_PRODUCTS * 2 * size**3 / synchronized_s / 1e12  # each n^2 outputs costs n multiplies and n adds
    measured = (
        f"{TIMING_PRODUCTS} fp32 products of {size}x{size}: synchronized {synchronized_s * 1e3:.1f} ms, "
        f"unsynchronized {queued_s * 1e3:.1f} ms ({tflops:.2f} TFLOP/s)"
    )
    if device.type == "cpu":
        return Check(
            str(device),
            TIMING,
            "synchronized clock",
            PASS,
            f"{measured}: CPU kernels finish before they return, so the two agree",
        )
    return _judge_accelerator_timing(device, measured, tflops, synchronized_s, queued_s)


def _judge_accelerator_timing(
    device: torch.device, measured: str, tflops: float, synchronized_s: float, queued_s: float
) -> Check:
    """An asynchronous device's timing: no faster than its datasheet's peak, and longer than queueing the work."""
    sheet = datasheet_for(devices.device_name(device))
    peak = max(filter(None, (sheet.fp32_tflops, sheet.tf32_tflops))) if sheet else None  # whatever TF32's setting
    broken = (
        "The clock did not wait for the device: synchronize() returned before the work finished, so every "
        "timing on this device is too fast. Report it with this PyTorch version and device."
    )
    if peak is not None and tflops > peak * PEAK_TOLERANCE:
        return Check(
            str(device),
            TIMING,
            "synchronized clock",
            FAIL,
            f"{measured}: above the datasheet's {peak:g} TFLOP/s",
            broken,
        )
    if synchronized_s < queued_s * SYNC_OVER_ENQUEUE_MIN:
        if peak is None:
            return Check(
                str(device), TIMING, "synchronized clock", FAIL, f"{measured}: no longer than queueing the work", broken
            )
        return Check(
            str(device),
            TIMING,
            "synchronized clock",
            WARN,
            f"{measured}: the host waited for the work while queueing it",
            "The timings hold, but each launch waits for the last (CUDA_LAUNCH_BLOCKING=1?): the device "
            "idles between kernels. Unset it for benchmarks.",
        )
    return Check(
        str(device),
        TIMING,
        "synchronized clock",
        PASS,
        f"{measured}: the device's work outlasts its queueing"
        + (f", within the datasheet's {peak:g} TFLOP/s" if peak else ""),
    )


def _square_product(device: torch.device, size: int) -> Callable[[], object]:
    left, right = (torch.randn(size, size, device=device) for _ in range(2))
    result = torch.empty(size, size, device=device)
    return lambda: torch.matmul(left, right, out=result)
