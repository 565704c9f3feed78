"""A tuning applied to a run: the model, optimizer and forward pass as a `Tuning` says (channels_last, a fused
optimizer step, bf16 autocast, torch.compile, the whole step as a CUDA graph), the process-wide switches set for the run and put back after, and
what torch.compile did recorded on the run. Which tuning to apply is engine/tuning.py's choice.

    python -c "import torch; from devicebench.engine.tuning_applied import TunedForward; from devicebench.engine.tuning_choices import Tuning; print(TunedForward(torch.nn.Linear(2, 1), Tuning(precision='bf16'), 'cpu')(torch.ones(1, 2)))"
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.utils.rnn import PackedSequence

from devicebench.engine.loop import TrainingSetup
from devicebench.engine.step_graph import Capture, CudaCapture, GraphedStep, capturable, step_graph_refusal
from devicebench.engine.tuning_choices import Tuning
from devicebench.results.schema import RunRecord

KEPT_FREED_BYTES = 1 << 29  # glibc's mmap threshold while tuned: freed blocks up to 512 MiB are reused


def tuned_setup(
    setup: TrainingSetup,
    tuning: Tuning,
    device: torch.device,
    capture: Callable[[torch.device], Capture] = CudaCapture,
) -> tuple[TrainingSetup, Tuning]:
    """`setup` run the way `tuning` says, and the tuning as it could really be applied. A graphed step is
    warmed up and captured by `capture(device)` (tests give a fake)."""
    model = setup.model
    if tuning.channels_last:
        # Module.to takes memory_format (documented; nn.Module._parse_to reads it), but torch's overloads omit it
        model = model.to(memory_format=torch.channels_last)  # type: ignore[call-overload]
    optimizer = setup.optimizer
    if tuning.fused_optimizer:
        optimizer = _fused(optimizer)
        tuning = dataclasses.replace(tuning, fused_optimizer=optimizer is not setup.optimizer)
    if tuning.step_graph and step_graph_refusal(setup) is not None:
        tuning = dataclasses.replace(tuning, step_graph=False)
    tuned_forward = TunedForward(model, tuning, device.type)
    forward: Callable[[torch.Tensor], torch.Tensor] = tuned_forward
    if tuning.compiled:
        forward = compiled_afresh(tuned_forward)
    tuned = dataclasses.replace(setup, model=model, optimizer=optimizer, forward=forward)
    if tuning.step_graph:
        capturable(optimizer)  # before its first step makes any state
        tuned.graphed = GraphedStep(tuned.eager_step, capture(device))
    return tuned, tuning


class TunedForward(nn.Module):
    """The model's forward pass with its inputs in the tuned layout and its arithmetic in the tuned precision.

    Outputs come back in fp32, so the loss and the accuracy are computed exactly as in seed mode. In bf16, the
    model's recurrent layers stay out of autocast and compute in fp32: CUDA autocast runs cuDNN's RNN kernel
    in fp16 whatever dtype it was asked for, so a "bf16" LSTM would be unscaled fp16. Under a CUDA graph autocast
    keeps no cache of its casts (torch.cuda.graphs' advice: a cached cast would outlive the graph's memory).
    """

    def __init__(self, model: nn.Module, tuning: Tuning, device_type: str) -> None:
        super().__init__()
        self.model = model
        self.channels_last = tuning.channels_last
        self.bf16 = tuning.precision == "bf16"
        self.device_type = device_type
        self.cache_casts = not tuning.step_graph
        if self.bf16:
            for layer in recurrent_layers(model):
                _outside_autocast(layer, device_type)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if self.channels_last and inputs.dim() == 4:
            inputs = inputs.contiguous(memory_format=torch.channels_last)
        with torch.autocast(self.device_type, dtype=torch.bfloat16, enabled=self.bf16, cache_enabled=self.cache_casts):
            return self.model(inputs).float()


def recurrent_layers(model: nn.Module) -> list[nn.RNNBase]:
    """The model's LSTM, GRU and RNN layers."""
    return [module for module in model.modules() if isinstance(module, nn.RNNBase)]


def _outside_autocast(layer: nn.Module, device_type: str) -> None:
    """Make `layer` compute in fp32 with autocast off, whatever precision the layers around it compute in."""
    forward = layer.forward

    def float32_forward(*args, **kwargs):
        with torch.autocast(device_type, enabled=False):
            return forward(*_float32(args), **{name: _float32(value) for name, value in kwargs.items()})

    layer.forward = float32_forward


def _float32(value):
    """`value` (a layer's argument: a tensor, a packed sequence, or a tuple or list of them) in fp32 where floating."""
    if isinstance(value, (torch.Tensor, PackedSequence)):
        return value.float() if value.data.is_floating_point() else value
    if isinstance(value, (tuple, list)):
        return type(value)(_float32(item) for item in value)
    return value


COMPILE_BACKEND = "inductor"  # torch.compile's own default; tests put "eager" here to compile in milliseconds


def compiled_afresh(forward: TunedForward) -> Callable[[torch.Tensor], torch.Tensor]:
    """`forward` under torch.compile, compiled for this run alone.

    Dynamo keeps its compiled graphs, its recompile count and what it gave up on per code object, and every
    run's forward is TunedForward.forward: without the reset, a process's first few (model, precision) pairs
    use up its recompile limit and every later run runs eagerly while recorded as compiled; and a function it
    gave up on in one run (an LSTM's) would run eagerly in every later one without being tried, so unseen by
    `note_compilation`.

    Static shapes: the partial last batch gets a graph of its own instead of switching every later step to a
    slower dynamic-shape graph (dropping the batch instead would change what the run trains on), so a run
    compiles at most 4 graphs (training and evaluation, full and partial batch), within the limit of 8.
    """
    torch.compiler.reset()  # all of Dynamo's in-memory state, so other compiled code in the process recompiles too
    return torch.compile(forward, backend=COMPILE_BACKEND, dynamic=False)


@dataclass(frozen=True)
class DynamoCounts:
    """Dynamo's running totals in this process (torch.compiler.reset leaves them alone)."""

    frames_tried: int
    frames_compiled: int  # the others Dynamo gave up on: they ran eagerly
    graph_breaks: int
    gave_up: Counter[str]  # why it gave up on a frame: the first line of the reason, by frames


def dynamo_counts() -> DynamoCounts:
    """Dynamo's totals now (importing Dynamo takes seconds: only for compiled runs)."""
    counters = torch._dynamo.utils.counters  # the counters PyTorch's own compile tests read
    reasons: Counter[str] = Counter()
    for reason, frames in counters["unimplemented"].items():
        reasons[reason.splitlines()[0]] += frames
    return DynamoCounts(
        counters["frames"]["total"], counters["frames"]["ok"], sum(counters["graph_break"].values()), reasons
    )


def note_compilation(record: RunRecord, before: DynamoCounts) -> None:
    """Record what torch.compile did in the run that started at `before`; a run in which Dynamo gave up on any
    function is recorded as not compiled, and the note says why (an LSTM, which Dynamo cannot trace, is one)."""
    after = dynamo_counts()
    # the graphs Dynamo holds for the forward pass since `compiled_afresh` reset it (a debugging hook, since 2.1)
    forward_graphs = len(torch._C._dynamo.eval_frame._debug_get_cache_entry_list(TunedForward.forward.__code__))
    record.compile_recompiles = max(forward_graphs - 1, 0)  # new shapes, evaluation: each a graph of its own
    # as Dynamo counts them: a break counts in each frame it sits in, each time that frame compiles
    record.compile_graph_breaks = after.graph_breaks - before.graph_breaks
    eager_frames = (after.frames_tried - after.frames_compiled) - (before.frames_tried - before.frames_compiled)
    if eager_frames:
        reasons = ", ".join(after.gave_up - before.gave_up) or "reason not given"
        record.settings = dataclasses.replace(record.settings, compiled=False)
        add_tuning_note(
            record,
            f"torch.compile left {eager_frames} function(s) to run eagerly ({reasons}): recorded as not compiled",
        )


def add_tuning_note(record: RunRecord, note: str) -> None:
    record.tuning_note = "; ".join(filter(None, [record.tuning_note, note]))


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
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = (
            switches
        )
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
