"""`devicebench check`: a doctor for one machine. Is the GPU really doing the work, and can its numbers be trusted?

Each check measures one thing and judges it `pass`, `warn` or `fail`, with the figure it measured and, for a warn
or a fail, what to do. Machine-wide: the PyTorch build against the GPUs and drivers present, the driver and toolkit
versions, variables that hide devices, the optional libraries a GPU needs (nvidia-ml-py, XGBoost with CUDA), and
the CPU (threads against cores, the vector ISA torch's kernels use, bf16, other processes' load). Per device: a
short training run while engine.monitor samples (the parameters sit on the device, the device gets busy, the
process appears in its process list), known work timed with and without synchronizing (a clock that does not wait
for an asynchronous device is caught by physics: work cannot finish faster than the datasheet's peak, nor as fast
as it is queued), and a short calibration against the datasheet with, on NVIDIA, clocks, temperature, power limit
and PCIe link. The short calibration is shown, never stored. A check that itself fails (an NVML error, running out
of memory) becomes a row saying so; nothing here raises. Under a minute on any machine (about 10 s on a 2-core CPU).

    devicebench check --devices cpu
"""

from __future__ import annotations

import collections
import dataclasses
import importlib
import importlib.metadata
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import psutil
import torch
from torch import nn

from devicebench import devices, host, nvml
from devicebench.engine.calibrate import (
    CalibrationPlan,
    DeviceCeilings,
    Measurement,
    measure_ceilings,
)
from devicebench.engine.monitor import Monitor, Usage
from devicebench.engine.timing import Stopwatch
from devicebench.environment import format_cudnn_version
from devicebench.results.datasheets import datasheet_for

PASS, WARN, FAIL = "pass", "warn", "fail"
STATUSES = (PASS, WARN, FAIL)
SOFTWARE, WORK, TIMING, CEILINGS, CPU = "software", "work lands on the device", "timing", "ceilings", "cpu"
GROUPS = (SOFTWARE, CPU, WORK, TIMING, CEILINGS)  # the order the checks run and are shown in

# Work lands on the device: a small MLP trained for WORK_S on synthetic tensors made on the device
WORK_S = 1.0  # seconds of training: NVML's polled utilisation covers up to the last second, so no less
WORK_WIDTH = 1024  # features of each hidden layer
WORK_BATCH_CPU = 256  # samples a step: ~3 GFLOP, tens of milliseconds on two cores, so a run has many steps
WORK_BATCH_ACCELERATOR = 4096  # ~50 GFLOP a step, ~1 ms on an H100: kernels, not their launches, fill the run
WORK_CLASSES = 10
GPU_BUSY_MIN_PERCENT = 5.0  # NVML utilisation below this while training: the GPU did not get the work
CPU_IDLE_MAX_PERCENT = 10.0  # of one core: an idle Python process reads 0-2 %, so training below this did not run
CPU_STARVED_PERCENT = 50.0  # of one core: training that gets less than half a core is starved by other processes
LOAD_BUSY_FRACTION = 0.5  # of the logical cores: more than half kept busy by others leaves the CPU's figures low

# Timing: TIMING_PRODUCTS square fp32 products queued at once, timed with and without synchronizing
TIMING_PRODUCTS = 16
TIMING_SIZE_CPU = 512  # ~4 GFLOP in all: tens of milliseconds on two cores
TIMING_SIZE_ACCELERATOR = 4096  # ~2.2 TFLOP in all: milliseconds of kernels on any GPU, microseconds to queue
SYNC_OVER_ENQUEUE_MIN = 2.0  # a synchronized time under this multiple of the time to queue: sync did not wait
PEAK_TOLERANCE = 1.05  # a rate this far above the datasheet's boost-clock peak is not physics: the clock is wrong

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

# The distributions a GPU build of PyTorch brings beside its own: CUDA's (nvidia-*, cuda-*) and Triton's compiler
GPU_LIBRARY_DISTRIBUTIONS = re.compile(r"(nvidia|cuda)[-_.]|triton$|pytorch-triton", re.IGNORECASE)

VECTOR_ISA_FLAGS = ("avx512f", "avx2")  # widest first: the vector ISAs torch's CPU capability names


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


def run_checks(chosen: Iterable[torch.device], *, progress: Callable[[str], None] | None = None) -> list[Check]:
    """Every check: the machine-wide ones, then each device's. `progress` hears what is being checked."""
    announce = progress or (lambda step: None)
    checks: list[Check] = []
    announce("software and CPU")
    for group, check in (*((SOFTWARE, check) for check in SOFTWARE_CHECKS), *((CPU, check) for check in CPU_CHECKS)):
        label = check.__name__.removesuffix("_check").replace("_", " ")
        checks += _guarded(None, group, label, WARN, check)  # a library that cannot say is not the machine failing
    for device in chosen:

        def announce_step(step: str, device: torch.device = device) -> None:
            announce(f"{device}: {step}")

        per_device = (
            (WORK, lambda device=device: work_checks(device)),
            (TIMING, lambda device=device: timing_check(device)),
            (CEILINGS, lambda device=device: ceiling_checks(device, progress=announce_step)),
        )
        for group, check in per_device:  # each runs within this iteration, so `device` is this one
            announce_step(group)
            checks += _guarded(str(device), group, group, FAIL, check)  # a device that cannot do the work fails
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


def _accelerators() -> list[torch.device]:
    return [device for device in devices.local_devices() if device.type != "cpu"]


def _is_nvidia(device: torch.device) -> bool:
    return device.type == "cuda" and not torch.version.hip  # a ROCm build drives AMD GPUs as "cuda"


def _nvidia_gpus() -> list[torch.device]:
    return [device for device in _accelerators() if _is_nvidia(device)]


# --- software -------------------------------------------------------------------------------------------------


def _torch_build() -> str:
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    if torch.version.hip:
        return f"ROCm {torch.version.hip}"
    if getattr(torch.version, "xpu", None):
        return f"XPU {torch.version.xpu}"
    return "MPS" if torch.backends.mps.is_built() else "CPU-only"


def pytorch_build_check() -> Check:
    """The build against the GPUs: a driver present that PyTorch cannot use fails; a CPU machine passes, saying why,
    unless its PyTorch is a GPU build, whose gigabytes of CUDA or ROCm libraries it cannot use: a warn."""
    build = _torch_build()
    measured = f"torch {torch.__version__}, a {build} build"
    seen = _accelerators()
    driver = host.gpu_driver()
    if seen:
        listing = ", ".join(f"{device} ({devices.device_name(device)})" for device in seen)
        return Check(None, SOFTWARE, "PyTorch build", PASS, f"{measured}; it sees {listing}")
    if driver and build == "CPU-only":
        vendor, place = driver
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            FAIL,
            f"{measured}, but an {vendor} GPU driver is present ({place})",
            f"Install a {'ROCm' if vendor == 'AMD' else 'CUDA'} build of PyTorch ({host.INSTALL_URL}): "
            "this one cannot use the GPU, so every 'GPU' figure would be the CPU's.",
        )
    looked = ", ".join(path for paths, tools in host.GPU_DRIVERS.values() for path in (*paths, *tools))
    if build == "CPU-only" and not driver:
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            PASS,
            f"{measured}; no GPU driver either (looked for {looked}): a CPU machine, which this build suits",
        )
    if not driver and (torch.version.cuda or torch.version.hip):
        size = _installed_gigabytes()
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            WARN,
            f"{measured}, {size:.1f} GB on disk with its GPU libraries; no GPU driver either (looked for "
            f"{looked}): nothing here can use them",
            f"A {build.split()[0]} build is gigabytes for nothing on a machine without a GPU. In a new "
            f"virtual environment, `{host.CPU_INSTALL}` before installing devicebench gives the CPU build "
            "(under 1 GB), which trains on the CPU as this one does (uninstalling torch alone would leave "
            "its libraries behind).",
        )
    reason = host.unavailable_reason(host.expected_accelerator_kind()) or "PyTorch reports no GPU"
    if driver:
        return Check(
            None,
            SOFTWARE,
            "PyTorch build",
            FAIL,
            f"{measured}; a {driver[0]} driver is present ({driver[1]}), yet PyTorch sees no GPU",
            f"{reason[:1].upper()}{reason[1:]}.",
        )
    return Check(None, SOFTWARE, "PyTorch build", PASS, f"{measured}; no GPU here: {reason}")


def _installed_gigabytes() -> float:
    """What torch and the GPU libraries installed beside it take on disk, in GB, from each distribution's record
    (the first of each name on the path, as import finds it)."""
    sizes: dict[str, int] = {}
    for distribution in importlib.metadata.distributions():
        name = (distribution.metadata["Name"] or "").lower()  # None for a broken install
        if name not in sizes and (name == "torch" or GPU_LIBRARY_DISTRIBUTIONS.match(name)):
            sizes[name] = sum(file.size or 0 for file in distribution.files or ())
    return sum(sizes.values()) / 1e9


def driver_check() -> Check:
    """The driver's and the toolkit's versions: recorded for the reader, a pass whatever they are."""
    found = []
    driver = nvml.driver_version()
    if driver:
        found.append(f"NVIDIA driver {driver}")
    if torch.version.cuda:
        found.append(f"PyTorch's CUDA {torch.version.cuda}")
    if torch.version.hip:
        found.append(f"PyTorch's ROCm {torch.version.hip}")
    library = torch.backends.cudnn.version()  # None without cuDNN or MIOpen
    if library is not None:
        text = format_cudnn_version(library, rocm=bool(torch.version.hip))
        found.append(text if torch.version.hip else f"cuDNN {text}")
    measured = ", ".join(found) or "no NVIDIA driver answers NVML; PyTorch has neither CUDA nor ROCm"
    return Check(None, SOFTWARE, "driver and toolkit", PASS, measured)


def visible_devices_check() -> Check:
    """Variables such as CUDA_VISIBLE_DEVICES hide GPUs from PyTorch: a warn, as the hiding may be deliberate."""
    hiding = ", ".join(filter(None, (host.device_hiding_settings(kind) for kind in ("cuda", "xpu"))))
    if not hiding:
        return Check(None, SOFTWARE, "visible devices", PASS, "no CUDA_VISIBLE_DEVICES or similar: nothing hidden")
    seen = ", ".join(str(device) for device in _accelerators()) or "no GPU"
    return Check(
        None,
        SOFTWARE,
        "visible devices",
        WARN,
        f"{hiding} is set; PyTorch sees {seen}",
        "Unset it to check and benchmark every GPU, unless you meant to give devicebench only these.",
    )


def nvml_module_check() -> Check:
    """nvidia-ml-py where an NVIDIA GPU is: without it there is no utilisation, power or energy."""
    if not _nvidia_gpus():
        return Check(None, SOFTWARE, "nvidia-ml-py", PASS, "not needed: no NVIDIA GPU in use")
    try:
        importlib.import_module("pynvml")
    except ImportError:
        return Check(
            None,
            SOFTWARE,
            "nvidia-ml-py",
            WARN,
            "not installed",
            "pip install nvidia-ml-py (the gpu extra): without it devicebench reports no GPU utilisation, "
            "power or energy, and this check cannot see the GPU's clocks or processes.",
        )
    driver = nvml.driver_version()
    if driver is None:
        return Check(
            None,
            SOFTWARE,
            "nvidia-ml-py",
            WARN,
            "installed, but NVML does not start",
            "NVML comes with the driver (libnvidia-ml.so): check that nvidia-smi works.",
        )
    return Check(None, SOFTWARE, "nvidia-ml-py", PASS, f"installed; NVML answers (driver {driver})")


def xgboost_check() -> Check:
    """XGBoost built with CUDA where a GPU is: the gbdt workloads train on it, or silently do not."""
    gpus = _nvidia_gpus()
    try:
        xgboost = importlib.import_module("xgboost")
    except ImportError:
        if gpus:
            return Check(
                None,
                SOFTWARE,
                "XGBoost",
                WARN,
                "not installed",
                "pip install 'devicebench[gbdt]' to run the gbdt workloads on the GPU.",
            )
        return Check(None, SOFTWARE, "XGBoost", PASS, "not installed (optional: the gbdt workloads need it)")
    with_cuda = bool(xgboost.build_info().get("USE_CUDA"))
    measured = f"XGBoost {xgboost.__version__}, built {'with' if with_cuda else 'without'} CUDA"
    if gpus and not with_cuda:
        return Check(
            None,
            SOFTWARE,
            "XGBoost",
            WARN,
            measured,
            "Install the xgboost wheel from PyPI (built with CUDA on Linux x86-64), not xgboost-cpu: "
            "this one trains the gbdt workloads on the CPU even on a GPU.",
        )
    return Check(None, SOFTWARE, "XGBoost", PASS, measured)


SOFTWARE_CHECKS = (pytorch_build_check, driver_check, visible_devices_check, nvml_module_check, xgboost_check)


# --- the CPU --------------------------------------------------------------------------------------------------


def _usable_cores() -> tuple[int, str]:
    """The cores torch's threads can have without sharing one, and how they were counted."""
    logical = psutil.cpu_count(logical=True) or 1
    physical = psutil.cpu_count(logical=False) or logical  # None where the OS will not say
    counted = f"{physical} physical cores ({logical} logical)"
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else logical  # Linux only
    if allowed < physical:
        return allowed, f"{counted}, {allowed} of them allowed to this process"
    return physical, counted


def threads_check() -> Check:
    """More torch threads than cores: they take turns on the cores, and matmul-bound training slows down."""
    threads = torch.get_num_threads()
    cores, counted = _usable_cores()
    measured = f"torch uses {threads} threads; {counted}"
    if threads > cores:
        return Check(
            None,
            CPU,
            "threads",
            WARN,
            measured,
            f"Use {cores} threads (devicebench run --threads {cores}, or OMP_NUM_THREADS={cores}): threads "
            "beyond the cores share their vector units and slow the CPU's figures.",
        )
    return Check(None, CPU, "threads", PASS, measured)


def isa_check() -> Check:
    """Torch's CPU kernels against the CPU's vector ISA: narrower kernels leave speed unused (ATEN_CPU_CAPABILITY)."""
    capability = torch.backends.cpu.get_cpu_capability()
    used = host.isa_from_torch_capability(capability)
    present = host.cpu_isa()
    widest = next((flag for flag in VECTOR_ISA_FLAGS if present[flag]), None)
    measured = (
        f"torch's kernels use {capability}; the CPU's widest vector ISA is {widest or 'neither AVX2 nor AVX-512'}"
    )
    if widest is None or used[widest]:
        return Check(None, CPU, "vector ISA", PASS, measured)
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    cause = (
        f"ATEN_CPU_CAPABILITY={forced} lowers it: unset it"
        if forced
        else "this PyTorch chose narrower kernels (its build lacks wider ones, or the CPU lacks a part of AVX-512 "
        "they need): the CPU's figures understate it"
    )
    return Check(None, CPU, "vector ISA", WARN, measured, f"{cause[:1].upper()}{cause[1:]}.")


def bf16_check() -> Check:
    """Whether the CPU computes bf16 in hardware: information, a pass either way."""
    if devices.native_bf16(torch.device("cpu")):
        return Check(None, CPU, "bf16", PASS, "native (AVX-512 BF16 or AMX): bf16 matmuls run in hardware")
    return Check(
        None,
        CPU,
        "bf16",
        PASS,
        "not native (no AVX-512 BF16 or AMX): bf16 would be emulated, slower than "
        "fp32, so tuned runs keep fp32 on this CPU",
    )


def load_check() -> Check:
    """Other processes' load: cores they keep busy are missing from every CPU figure, and vary it."""
    load = psutil.getloadavg()[0]  # runnable threads, averaged over the last minute
    cores = psutil.cpu_count(logical=True) or 1
    measured = f"1-minute load average {load:.2f} on {cores} logical cores"
    if load > cores * LOAD_BUSY_FRACTION:
        return Check(
            None,
            CPU,
            "load from other processes",
            WARN,
            f"{measured}: other processes keep about {min(round(load), cores)} of them busy",
            "Stop other work (top shows it) before benchmarking the CPU: its figures will be low and vary.",
        )
    return Check(None, CPU, "load from other processes", PASS, measured)


def busy_warning() -> str | None:
    """`load_check`'s warning as one line, for the commands that measure (`run`, `calibrate`) to say before they
    start; None when other processes leave the cores free, or when the load cannot be read."""
    try:
        found = load_check()
    except OSError:  # a platform whose load psutil cannot read: nothing to warn of, and no reason to stop a run
        return None
    return None if found.status == PASS else f"This machine is busy: {found.measured}. {found.advice}"


CPU_CHECKS = (threads_check, isa_check, bf16_check, load_check)


# --- work lands on the device ---------------------------------------------------------------------------------


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
    if _is_nvidia(device):  # the CUDA context outlives the run, so the process is still listed
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
        note = "devicebench samples no AMD GPU" if torch.version.hip else usage.device_note
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


# --- ceilings -------------------------------------------------------------------------------------------------


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
    gpu = _NvidiaGpu.open(device) if _is_nvidia(device) else None
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
        def row(name: str, measured: str, low: bool, advice: str) -> Check:  # warns with `advice` when `low`
            return Check(str(device), CEILINGS, name, WARN if low else PASS, measured, advice if low else None)

        found = []
        clock, top_clock = (
            self._busiest.get("sm_clock_mhz"),
            self.read("nvmlDeviceGetMaxClockInfo", self._nvml.NVML_CLOCK_SM),
        )
        if clock is not None and top_clock:
            measured = f"{clock} MHz under load, of {top_clock} MHz at most"
            found.append(
                row(
                    "SM clock",
                    measured,
                    clock < top_clock * CLOCK_LOW_FRACTION,
                    "The GPU is throttled (temperature, power) or its clocks are locked low (nvidia-smi -q "
                    "-d PERFORMANCE says why; nvidia-smi -rgc resets locked clocks).",
                )
            )
        temperature = self._busiest.get("temperature_c")
        if temperature is not None:
            slowdown = self.read("nvmlDeviceGetTemperatureThreshold", self._nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN)
            hot = slowdown is not None and temperature >= slowdown - TEMPERATURE_MARGIN_C
            found.append(
                row(
                    "temperature",
                    f"{temperature} °C under load" + (f", slowdown at {slowdown} °C" if slowdown is not None else ""),
                    hot,
                    "The GPU is about to slow itself down: check its cooling (airflow, fans, the room).",
                )
            )
        limit, default = (
            self.read("nvmlDeviceGetEnforcedPowerLimit"),
            self.read("nvmlDeviceGetPowerManagementDefaultLimit"),
        )
        if limit is not None and default is not None:
            found.append(
                row(
                    "power limit",
                    f"{limit / 1000:g} W, default {default / 1000:g} W",
                    limit < default,
                    f"The power cap was lowered: `nvidia-smi -pl {default / 1000:g}` restores it (root).",
                )
            )
        width, top_width = self._busiest.get("pcie_width"), self.read("nvmlDeviceGetMaxPcieLinkWidth")
        if width is not None and top_width is not None:
            generation, top_generation = (
                self._busiest.get("pcie_generation"),
                self.read("nvmlDeviceGetMaxPcieLinkGeneration"),
            )
            generations = f"gen {generation} of {top_generation}, " if generation and top_generation else ""
            found.append(
                row(
                    "PCIe link",
                    f"{generations}x{width} of x{top_width}",
                    width < top_width,
                    "The link runs narrower than the card allows: reseat it in a full-width slot, or check "
                    "the BIOS's bifurcation setting. Host-to-device copies are slower by as much.",
                )
            )
        return found
