"""A per-operator profile of one training step: every kernel the step would launch on a GPU, with its FLOPs and
the bytes it reads and writes, for estimating the step's time on a device one does not have (a roofline per kernel:
the larger of FLOPs over peak FLOP/s and bytes over memory bandwidth, plus a launch overhead).

The step (forward, loss, backward, optimizer step, zero_grad; or a user's own `train_step`) runs on the meta device
under a dispatch mode that records every aten call: no memory, no arithmetic, the same profile on every machine.
Views and pure allocations launch nothing and are left out; everything else, in-place updates included, is a
kernel. FLOPs come from torch's own flop formulas, so forward, loss and backward add up to what `FlopCounterMode`
counts; element-wise work has 0 FLOPs and is bound by its bytes. The optimizer takes one warm-up step first (its
state is created once, not every step) and then steps as PyTorch does on CUDA, through the multi-tensor `_foreach_*`
kernels. Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) are recorded as the fused kernels cuDNN runs them as on a GPU,
a few per layer and direction, not as the per-time-step ops torch breaks them into on the meta device and the CPU.
A step that cannot run on the meta device (one that reads a number back with `.item()`, or branches on its
data) is run on the CPU on random tensors of the batch size instead, and the profile says so in its `notes`: a model
whose branches depend on its data may do other work on real data.

engine/kernel_recorder.py decides which calls are kernels and counts them; engine/fused_recurrence.py records
recurrent layers as cuDNN's kernels.

    python -c "from devicebench.engine.opcount import profile_training_step as p; from devicebench.workloads import get_workload as g; w = g('cifar10-mlp'); print(p(w, dict(w.defaults)).summary()[:5])"
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from devicebench.engine.fused_recurrence import fused_recurrence
from devicebench.engine.kernel_recorder import Kernel, ProfileError, Recorder
from devicebench.workloads import Workload


@dataclass(frozen=True)
class StepProfile:
    """Every kernel of one training step at `batch_size`, in launch order, and what lives or travels beside them."""

    batch_size: int  # samples in the step
    kernels: tuple[Kernel, ...]  # in launch order
    parameter_bytes: float  # the model's parameters
    host_to_device_bytes: float  # one batch of inputs and labels, as the loader hands them to the device
    notes: tuple[str, ...] = ()  # how the profile departs from the plain step: a fallback, and why

    @property
    def flops(self) -> float:
        return sum(kernel.flops for kernel in self.kernels)

    @property
    def bytes_moved(self) -> float:
        return sum(kernel.bytes_read + kernel.bytes_written for kernel in self.kernels)

    @property
    def kernel_count(self) -> int:
        return len(self.kernels)

    def summary(self) -> list[tuple[str, int, float, float]]:
        """Per operator name: (name, calls, flops, bytes read + written), the most bytes first, for display."""
        totals: dict[str, list[float]] = {}
        for kernel in self.kernels:
            row = totals.setdefault(kernel.operator, [0, 0.0, 0.0])  # calls, flops, bytes
            row[0] += 1
            row[1] += kernel.flops
            row[2] += kernel.bytes_read + kernel.bytes_written
        rows = [(name, int(calls), flops, moved) for name, (calls, flops, moved) in totals.items()]
        return sorted(rows, key=lambda row: (-row[3], -row[2], row[0]))


def profile_training_step(
    workload: Workload,
    hyperparameters: dict[str, Any],
    batch_size: int | None = None,
    fuse_recurrent_layers: bool = True,
) -> StepProfile | None:
    """The kernels of one training step of `workload` built with `hyperparameters`, at `batch_size` samples
    (default: hyperparameters["batch_size"]); None for a workload that is not a torch model. ProfileError when the
    step runs neither on the meta device nor on the CPU. `fuse_recurrent_layers`: each call of an nn.LSTM, nn.GRU
    or nn.RNN is recorded as cuDNN's fused kernels (True, as on a GPU) or as the per-time-step ops torch runs it as
    on the meta device (False)."""
    example = workload.example_batch(hyperparameters)
    if example is None:  # a workload with a trainer of its own: not a torch model
        return None
    batch_size = int(hyperparameters["batch_size"] if batch_size is None else batch_size)
    host_to_device_bytes = sum(batch_size * math.prod(part.shape[1:]) * part.element_size() for part in example)
    notes: list[str] = []
    try:
        kernels, parameter_bytes = _recorded(
            workload, hyperparameters, example, batch_size, "meta", notes, fuse_recurrent_layers
        )
    except ProfileError:
        raise  # a step too large to record: on the CPU, with real tensors, it would be larger still
    except Exception as meta_error:  # an op the meta device cannot run, or a user's step that needs real numbers
        notes.append(random_inputs_note(meta_error, f"one step of {batch_size} samples"))
        try:
            kernels, parameter_bytes = _recorded(
                workload, hyperparameters, example, batch_size, "cpu", notes, fuse_recurrent_layers
            )
        except Exception as cpu_error:
            raise ProfileError(
                f"could not profile a training step of {workload.name}: {_described(meta_error)} on "
                f"the meta device, then {_described(cpu_error)} on the CPU"
            ) from cpu_error
    return StepProfile(
        batch_size=batch_size,
        kernels=tuple(kernels),
        parameter_bytes=float(parameter_bytes),
        host_to_device_bytes=float(host_to_device_bytes),
        notes=tuple(notes),
    )


# Why a step may not run on the meta device, which has shapes but no values
READS_ITS_DATA = (
    "as happens when the model reads its data's values (a Python `if` on a tensor, .item(), .tolist(), "
    "nonzero or masked_select, whose shapes depend on the values)"
)


def random_inputs_note(meta_error: BaseException, counted: str) -> str:
    """What a count made on the CPU instead of the meta device is worth: its inputs were random numbers, and a step
    that could not run on meta most often reads its data's values, so real data may take other branches."""
    return (
        f"FLOPs counted on random inputs: {counted} could not run on the meta device ({_described(meta_error)}), "
        f"{READS_ITS_DATA}, so it ran on the CPU on random numbers and its count may differ on real data"
    )


class _OptimizerFailed(Exception):
    """The optimizer's step failed after the forward and backward passes ran: worth a retry with a simpler step."""


def _recorded(
    workload: Workload,
    hyperparameters: dict[str, Any],
    example: tuple[torch.Tensor, torch.Tensor],
    batch_size: int,
    device: str,
    notes: list[str],
    fuse_recurrent_layers: bool,
) -> tuple[list[Kernel], int]:
    """The kernels of one step on `device` ("meta" or "cpu") and the model's parameter bytes, recurrent layers as
    cuDNN's fused kernels if `fuse_recurrent_layers`. A failing optimizer step is retried one tensor at a time, then
    left out (noted); any other failure is raised."""
    inputs, labels = (_full_batch(part, batch_size, device) for part in example)
    build_optimizer = workload.build_optimizer
    assert build_optimizer is not None  # register() and own() refuse a torch model without one
    modes: tuple[bool | None, ...] = (True,) if workload.train_step is not None else (True, False, None)
    for foreach in modes:  # True: the multi-tensor kernels CUDA uses; False: one tensor at a time; None: no optimizer
        model = _model(workload, hyperparameters, device)
        parameter_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
        optimizer = None if foreach is None else build_optimizer(model, hyperparameters)
        try:
            if optimizer is not None:
                _use_foreach(optimizer, foreach)
                _warm_up(model, optimizer)
            with Recorder(device) as recorder, fused_recurrence(recorder, fuse_recurrent_layers):
                if workload.train_step is not None:  # a step of the user's own: whatever it runs is recorded
                    assert optimizer is not None  # its one mode, True, builds the optimizer
                    workload.train_step(model, (inputs, labels), optimizer)
                else:
                    _plain_step(workload, model, inputs, labels, optimizer)
        except _OptimizerFailed as failure:
            if isinstance(failure.__cause__, ProfileError):
                raise failure.__cause__ from None  # the step was too large, not the optimizer broken
            cause = _described(failure.__cause__ or failure)
            notes.append(
                f"the optimizer's {'multi-tensor ' if foreach else ''}step failed on {device} ({cause}): "
                + ("profiled one tensor at a time" if foreach else "profiled without the optimizer")
            )
            continue
        return recorder.kernels, parameter_bytes
    raise AssertionError("unreachable: the last mode has no optimizer to fail")


def _plain_step(
    workload: Workload,
    model: torch.nn.Module,
    inputs: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer | None,
) -> None:
    """Forward, loss, backward, optimizer step and zero_grad, as engine/loop.py trains."""
    assert workload.build_loss is not None  # a torch model without a step of its own has a loss: register(), own()
    loss_function = workload.build_loss()
    assert loss_function is not None  # only a model with a train_step of its own builds no loss: own() refuses it
    loss_function(model(inputs), labels).backward()
    if optimizer is None:
        return
    try:
        optimizer.step()
    except Exception as error:
        raise _OptimizerFailed() from error
    optimizer.zero_grad(set_to_none=True)  # no kernel: the gradients are let go


def _model(workload: Workload, hyperparameters: dict[str, Any], device: str) -> torch.nn.Module:
    with torch.device(device):
        return workload.build_model(hyperparameters).to(device)  # a user's model instance is copied for real


def _full_batch(part: torch.Tensor, batch_size: int, device: str) -> torch.Tensor:
    """`batch_size` samples shaped like the one-sample `part`. On meta a full-size tensor costs no memory, so the
    first layer reads the whole batch as on a GPU; on the CPU random numbers (floating point) or zeros (integers:
    class labels and token ids are valid at 0)."""
    shape = (batch_size, *part.shape[1:])
    if device == "meta":
        return torch.empty(shape, dtype=part.dtype, device="meta")
    if part.dtype.is_floating_point:
        return torch.randn(shape, dtype=part.dtype)
    return torch.zeros(shape, dtype=part.dtype)


def _use_foreach(optimizer: torch.optim.Optimizer, foreach: bool | None) -> None:
    for group in optimizer.param_groups:
        if "foreach" in group:  # Adam, SGD and most others: on CUDA None means True
            group["foreach"] = foreach


def _warm_up(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """One step on zero gradients before recording: the optimizer creates its state (moments, momentum buffers)
    on its first step only, and a profile is of the steps that follow."""
    try:
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.requires_grad:
                    parameter.grad = torch.zeros_like(parameter)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    except Exception as error:
        raise _OptimizerFailed() from error


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
