"""The CPU checks of `devicebench check`: torch's threads against the cores, the vector ISA its kernels use, bf16,
and other processes' load (which `run` and `calibrate` also warn of before they measure).

    python -c "from devicebench.check import cpu; print(cpu.load_check())"
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil
import torch

from devicebench import devices, host, machine
from devicebench.check.findings import CPU, PASS, WARN, Check

LOAD_BUSY_FRACTION = 0.5  # of the logical cores: more than half kept busy by others leaves the CPU's figures low
VECTOR_ISA_FLAGS = ("avx512f", "avx2")  # widest first: the vector ISAs torch's CPU capability names


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
    capability = machine.snapshot().cpu_capability
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


@dataclass(frozen=True)
class CpuSeconds:
    """CPU seconds counted since boot: the machine's on all its cores (busy, and in all), and this process's own
    (its children's too: loader workers). Two of them apart say what other processes took in between."""

    busy_s: float
    total_s: float
    own_s: float


def cpu_seconds() -> CpuSeconds:
    machine = psutil.cpu_times()
    # Linux counts a guest's time in user time too: left out of the total, as psutil.cpu_percent leaves it
    total_s = sum(machine) - getattr(machine, "guest", 0.0) - getattr(machine, "guest_nice", 0.0)
    idle_s = machine.idle + getattr(machine, "iowait", 0.0)
    own = psutil.Process().cpu_times()
    return CpuSeconds(total_s - idle_s, total_s, own.user + own.system + own.children_user + own.children_system)


def others_busy_cores(before: CpuSeconds, after: CpuSeconds) -> float:
    """How many of the logical cores other processes kept busy, on average, between `before` and `after`: CPU time
    rather than the load average, which counts this process's own threads too."""
    total_s = after.total_s - before.total_s
    if total_s <= 0:
        return 0.0
    others_s = (after.busy_s - before.busy_s) - (after.own_s - before.own_s)
    cores = psutil.cpu_count(logical=True) or 1
    return min(max(others_s, 0.0) / total_s * cores, float(cores))


def busy_warning() -> str | None:
    """`load_check`'s warning as one line, for the commands that measure (`run`, `calibrate`) to say before they
    start; None when other processes leave the cores free, or when the load cannot be read."""
    try:
        found = load_check()
    except OSError:  # a platform whose load psutil cannot read: nothing to warn of, and no reason to stop a run
        return None
    return None if found.status == PASS else f"This machine is busy: {found.measured}. {found.advice}"


CPU_CHECKS = (threads_check, isa_check, bf16_check, load_check)
