"""Tuned mode: each device runs the same model, data and samples as well as it can, and every choice is recorded.

Seed mode trains as the seeds did (fp32, eager, default settings). Tuned mode changes only *how* a step runs,
never what it computes: the same model, initial weights, batches and optimizer, so accuracy must stay the same
within noise (tests/test_tuning.py proves it on the real MNIST digits).

Always on where they apply, because they never make a step slower:
- a fused optimizer step (one kernel over all parameters instead of a loop over tensors);
- `channels_last` activations for convolutional nets (the layout oneDNN and cuDNN convolutions prefer);
- on CUDA, TF32 matmuls for fp32 and cuDNN autotuning; the dataset held on the device as uint8 when it fits;
- on Linux CPUs, a memory allocator that keeps freed memory: glibc returns every block above 128 KiB-32 MiB to
  the kernel when it is freed and page-faults it back in on the next step, which costs up to half of a step
  for a 12M-parameter MLP on 2 cores (jemalloc and tcmalloc, the usual advice, avoid it the same way).

Measured and kept only when faster, on a short trial of the real batches before training (`choose_tuning`):
bf16 autocast, offered only where the device computes bf16 natively (AVX-512 BF16 or AMX on a CPU, a GPU that
supports it), and `torch.compile` (offered on CUDA; on a CPU only when asked for, because on the CPUs we
measured inductor was slower for every seed model and takes 10-30 s to compile).

    devicebench run mnist-cnn2 --mode tuned --devices cpu --max-steps 100
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import itertools
import platform
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

import psutil
import torch
from torch import nn

from devicebench.data.pipeline import Batches, usable_cores
from devicebench.devices import is_out_of_memory, native_bf16
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.timing import Stopwatch

Precision = Literal["fp32", "bf16"]
TRIAL_WARMUP_STEPS = 3  # untimed: allocation, kernel selection, compilation
TRIAL_MIN_STEPS = 4  # timed steps per candidate, at least ...
TRIAL_SECONDS = 1.0  # ... and until this much time has passed
TRIAL_MAX_STEPS = 50
CLEARLY_FASTER = 1.03  # a riskier choice (bf16, compile) is kept only when this much faster than the plain one
GROWTH_WORTH = 1.05  # --batch-size auto doubles the batch while each doubling gains at least 5%
SLOWEST_AUTO_STEP_S = 2.0  # ... and while a step takes no longer than this
KEPT_FREED_BYTES = 1 << 29  # glibc's mmap threshold while tuned: freed blocks up to 512 MiB are reused


@dataclass(frozen=True)
class Tuning:
    """How a model runs on its device. The defaults are seed mode: nothing changed."""

    precision: Precision = "fp32"  # bf16: autocast; weights, gradients and optimizer state stay fp32
    channels_last: bool = False
    fused_optimizer: bool = False
    compiled: bool = False  # torch.compile; its compile time lands in the warm-up epoch
    tf32_matmul: bool = False  # CUDA fp32 matmuls on TF32 tensor cores
    tf32_cudnn: bool = False  # CUDA fp32 convolutions and RNNs on TF32 tensor cores (cuDNN's own switch)
    cudnn_benchmark: bool = False
    device_resident: bool = False  # the dataset lives on the device as uint8; batches are gathered there
    allocator_keeps_memory: bool = False


# --- choosing ------------------------------------------------------------------------------------------------


def tuned_threads() -> int:
    """One torch thread per physical core this process may use: a second hardware thread on the same core only
    competes for its vector units."""
    usable = usable_cores()
    physical = psutil.cpu_count(logical=False) or usable
    logical = psutil.cpu_count(logical=True) or usable
    return max(1, min(usable, round(usable * physical / logical)))


def base_tuning(device: torch.device, model: nn.Module, *, resident_possible: bool) -> Tuning:
    """The choices that apply to `model` on `device` without measuring."""
    cuda = device.type == "cuda"
    return Tuning(
        channels_last=any(isinstance(module, nn.Conv2d) for module in model.modules()),
        fused_optimizer=True,  # dropped by `tuned_setup` for an optimizer that has no fused step on this device
        tf32_matmul=cuda,
        tf32_cudnn=cuda,
        cudnn_benchmark=cuda,
        device_resident=cuda and resident_possible,
        allocator_keeps_memory=device.type == "cpu" and platform.libc_ver()[0] == "glibc",
    )


def candidates(base: Tuning, device: torch.device, precision: str, compile_choice: str) -> list[Tuning]:
    """The tunings worth a trial: the plainest first, so that it wins ties."""
    precisions = [precision] if precision != "auto" else ["fp32"] + (["bf16"] if native_bf16(device) else [])
    compiles = {"on": [True], "off": [False], "auto": [False, True] if device.type == "cuda" else [False]}
    return [dataclasses.replace(base, precision=p, compiled=c) for p, c in itertools.product(precisions,
                                                                                           compiles[compile_choice])]


def choose_tuning(
    options: list[Tuning],
    build: Callable[[Tuning], TrainingSetup],
    batches: Batches,
    watch: Stopwatch,
) -> tuple[Tuning, str]:
    """The fastest of `options` on the first steps of `batches`, and a sentence saying what each one measured.

    Each option trains a fresh model for a few steps; the run itself then starts again from its seeded weights.
    An option that fails (an op with no bf16 kernel, a compile error) is left out and named in the sentence.
    """
    if len(options) == 1:
        return options[0], ""
    rates: dict[Tuning, float] = {}
    failures: list[str] = []
    for option in options:
        try:
            rates[option] = _trial(build(option), batches, watch)[0]
        except (RuntimeError, NotImplementedError, torch.OutOfMemoryError) as error:
            failures.append(f"{_label(option)} failed ({type(error).__name__})")
    if not rates:
        raise RuntimeError(f"every tuned option failed in the trial: {'; '.join(failures)}")
    plainest = next(iter(rates))
    best = max(rates, key=rates.get)
    if rates[best] < rates[plainest] * CLEARLY_FASTER:
        best = plainest
    measured = ", ".join(f"{_label(option)} {rate:,.0f}" for option, rate in rates.items())
    note = f"trial samples/s: {measured}" + (f"; {'; '.join(failures)}" if failures else "")
    return best, f"{note}; kept {_label(best)}"


def choose_batch_size(
    first: int,
    largest: int,
    build: Callable[[], TrainingSetup],
    batches_of: Callable[[int], Batches],
    watch: Stopwatch,
) -> tuple[int, str]:
    """`--batch-size auto`: the fastest batch size, growing from `first` by doubling, and a sentence saying what
    each size measured and why the growing stopped.

    It stops when a doubling gains less than GROWTH_WORTH, when a step takes longer than SLOWEST_AUTO_STEP_S
    (the trial would take minutes, and a batch that slow has long stopped paying), at `largest` (the training
    set), or at the first size that runs out of memory, which is caught and backed off from.
    """
    rates: dict[int, float] = {}
    size, reason = first, f"{first} is the whole training set"
    while size <= largest:
        batches = batches_of(size)
        try:
            rates[size], step_s = _trial(build(), batches, watch)
        except RuntimeError as error:  # torch.OutOfMemoryError is one
            if not is_out_of_memory(error) or not rates:
                raise
            reason = f"{size} ran out of memory"
            break
        finally:
            batches.close()
            _release_cached_memory(watch.device)
        best_before = max((rate for tried, rate in rates.items() if tried != size), default=None)
        if best_before is not None and rates[size] < best_before * GROWTH_WORTH:
            reason = f"{size} gained less than {GROWTH_WORTH - 1:.0%}"
            break
        if step_s > SLOWEST_AUTO_STEP_S:
            reason = f"a step of {size} took {step_s:.1f} s"
            break
        size, reason = size * 2, f"{size} is the most that fits the training set"
    best = max(rates, key=rates.get)
    measured = ", ".join(f"{tried} {rate:,.0f}" for tried, rate in rates.items())
    return best, f"batch sizes tried, samples/s: {measured} (stopped: {reason}); kept {best}"


def _release_cached_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()  # a failed or finished trial's blocks, so the next size starts clean


def _label(option: Tuning) -> str:
    return option.precision + ("+compiled" if option.compiled else "")


def _trial(setup: TrainingSetup, batches: Batches, watch: Stopwatch) -> tuple[float, float]:
    """A few untimed steps, then timed ones for about TRIAL_SECONDS: (samples/s, seconds per step)."""
    setup.model.train()
    steps = min(len(batches), TRIAL_WARMUP_STEPS + TRIAL_MAX_STEPS)
    stream = batches.epoch(1, steps)
    samples, timed, start = 0, 0, None
    for step in range(steps):
        if step == TRIAL_WARMUP_STEPS:
            start = watch.now()
        inputs, labels = next(stream)
        loss = setup.loss_function(setup.outputs(inputs), labels)
        setup.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        setup.optimizer.step()
        if start is not None:
            samples, timed = samples + len(labels), timed + 1
            if timed >= TRIAL_MIN_STEPS and watch.now() - start >= TRIAL_SECONDS:
                break
    if start is None:
        raise RuntimeError("too few batches for a trial")
    seconds = watch.now() - start
    return samples / seconds, seconds / timed


# --- applying ------------------------------------------------------------------------------------------------


def tuned_setup(setup: TrainingSetup, tuning: Tuning, device: torch.device) -> tuple[TrainingSetup, Tuning]:
    """`setup` run the way `tuning` says, and the tuning as it could really be applied."""
    model = setup.model
    if tuning.channels_last:
        model = model.to(memory_format=torch.channels_last)
    optimizer = setup.optimizer
    if tuning.fused_optimizer:
        optimizer = _fused(optimizer)
        tuning = dataclasses.replace(tuning, fused_optimizer=optimizer is not setup.optimizer)
    forward: Callable[[torch.Tensor], torch.Tensor] = TunedForward(model, tuning, device.type)
    if tuning.compiled:
        forward = torch.compile(forward)
    return dataclasses.replace(setup, model=model, optimizer=optimizer, forward=forward), tuning


class TunedForward(nn.Module):
    """The model's forward pass with its inputs in the tuned layout and its arithmetic in the tuned precision.

    Outputs come back in fp32, so the loss and the accuracy are computed exactly as in seed mode.
    """

    def __init__(self, model: nn.Module, tuning: Tuning, device_type: str) -> None:
        super().__init__()
        self.model = model
        self.channels_last = tuning.channels_last
        self.bf16 = tuning.precision == "bf16"
        self.device_type = device_type

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16):
            return self.model(inputs).float()


def _fused(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The same optimizer with a fused step, or `optimizer` itself when its class or device has none."""
    groups = [{**group, "fused": True, "foreach": None} for group in optimizer.param_groups]
    try:
        fused = type(optimizer)(groups, **{**optimizer.defaults, "fused": True, "foreach": None})
    except (TypeError, RuntimeError, ValueError):  # no `fused` argument, or not for these tensors
        return optimizer
    return fused


@contextlib.contextmanager
def process_settings(tuning: Tuning) -> Iterator[None]:
    """Set the process-wide switches exactly as `tuning` says for the duration of a run, and restore them after.

    Exactly, not "at least": seed mode is strict fp32 on every GPU even where the user's process (or PyTorch's own
    default, for cuDNN) allows TF32. cuDNN runs fp32 convolutions and RNNs on TF32 tensor cores by default, whatever
    the matmul switch says, so a seed-mode conv net would otherwise be TF32 while recorded as fp32.
    """
    switches = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    torch.backends.cuda.matmul.allow_tf32 = tuning.tf32_matmul
    torch.backends.cudnn.allow_tf32 = tuning.tf32_cudnn
    torch.backends.cudnn.benchmark = tuning.cudnn_benchmark
    if tuning.allocator_keeps_memory:
        _set_glibc_thresholds(KEPT_FREED_BYTES)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = switches
        if tuning.allocator_keeps_memory:
            _set_glibc_thresholds(GLIBC_SETTLED_MMAP_BYTES)


# glibc starts at 128 KiB and raises the threshold to the largest block freed so far, up to 32 MiB on 64-bit
# systems (trim: twice that). Once set, it no longer moves, so it is put back where it settles in a training
# process. That is as close as a process can come to undoing it: the freed blocks the heap kept while tuned are
# still there to be reused, so a seed-mode run later in the same process can run faster than in a fresh one.
# `sweep --mode seed,tuned` therefore runs every seed point first, and benchmarks/ runs tuned mode in its own process.
GLIBC_SETTLED_MMAP_BYTES = 32 * 2**20
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt's parameter numbers (malloc.h)


def _set_glibc_thresholds(mmap_bytes: int) -> None:
    libc = ctypes.CDLL(None)  # the C library the interpreter already uses
    libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_bytes))
    libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(2 * mmap_bytes))
    if mmap_bytes == GLIBC_SETTLED_MMAP_BYTES:
        libc.malloc_trim(0)  # give the memory kept while tuned back to the system
