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

    python -c "from devicebench.engine.opcount import profile_training_step as p; from devicebench.workloads import get_workload as g; w = g('cifar10-mlp'); print(p(w, dict(w.defaults)).summary()[:5])"
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import flop_counter
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from devicebench.workloads import Workload

# Operators that only reserve memory: no kernel runs (schema names, the same in every overload).
ALLOCATIONS = frozenset(
    {
        "aten::empty",
        "aten::empty_strided",
        "aten::empty_like",
        "aten::empty_permuted",
        "aten::new_empty",
        "aten::new_empty_strided",
    }
)
# FLOP formulas keyed by overload packet (torch.ops.aten.mm), each called as formula(*args, **kwargs, out_val=out)
# Views whose schema declares no alias: _unsafe_view takes over its input's memory, as view does.
UNDECLARED_VIEWS = frozenset({"aten::_unsafe_view"})
FLOP_FORMULAS: dict[Any, Any] = getattr(flop_counter, "flop_registry", {})
# More kernels in one training step than any model the roofline describes: the largest reference model launches
# about 1,400 (bert-large), and a recurrent layer that still runs per time step (a packed sequence, an LSTM with
# projections) about 37 per token, layer and direction. A size no one trains (a depth or a sequence of millions,
# typed or forged in a stored run) would otherwise be recorded for hours into gigabytes; this caps a profile at
# under 1 GB and its recording at a minute or two
MOST_KERNELS_PER_STEP = 100_000
# The functions nn.LSTM, nn.GRU and nn.RNN call with their flat weights, and the gates of each per hidden unit
RECURRENT_GATES = ((torch._VF.lstm, 4), (torch._VF.gru, 3), (torch._VF.rnn_tanh, 1), (torch._VF.rnn_relu, 1))


class ProfileError(ValueError):
    """A training step that could not be run, neither on the meta device nor on the CPU: the message names the
    workload and the error."""


@dataclass(frozen=True)
class Kernel:
    """One operator call of the step: a kernel launch on a GPU."""

    operator: str  # the aten overload, e.g. "aten.addmm.default"
    flops: float  # floating-point operations (0 for element-wise work, as torch's flop counter counts)
    bytes_read: float  # tensor inputs, each distinct storage once
    bytes_written: float  # tensor outputs (for an in-place operator: the tensors it updates)
    dtype: str  # the dtype of its first floating-point tensor input or output, e.g. "float32"
    matrix: bool  # a matmul/convolution/attention kernel (tensor-core eligible): flops > 0


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
    if workload.trainer is not None:
        return None
    batch_size = int(hyperparameters["batch_size"] if batch_size is None else batch_size)
    example = workload.example_batch(hyperparameters)
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
    modes: tuple[bool | None, ...] = (True,) if workload.train_step is not None else (True, False, None)
    for foreach in modes:  # True: the multi-tensor kernels CUDA uses; False: one tensor at a time; None: no optimizer
        model = _model(workload, hyperparameters, device)
        parameter_bytes = sum(parameter.numel() * parameter.element_size() for parameter in model.parameters())
        optimizer = None if foreach is None else workload.build_optimizer(model, hyperparameters)
        try:
            if optimizer is not None:
                _use_foreach(optimizer, foreach)
                _warm_up(model, optimizer)
            with _Recorder(device) as recorder, _fused_recurrence(recorder, fuse_recurrent_layers):
                if workload.train_step is not None:  # a step of the user's own: whatever it runs is recorded
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
    loss_function = workload.build_loss()
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


def _use_foreach(optimizer: torch.optim.Optimizer, foreach: bool) -> None:
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


class _Recorder(TorchDispatchMode):
    """Records each aten call that would launch a kernel on `device`, in call order."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device  # "meta" or "cpu": a call with no tensor there is host work (Adam's step count)
        self.kernels: list[Kernel] = []
        self.recording = True  # False while paused()

    def record(self, kernel: Kernel) -> None:
        """Adds `kernel`, the next launch of the step; ProfileError past MOST_KERNELS_PER_STEP."""
        if len(self.kernels) == MOST_KERNELS_PER_STEP:
            raise ProfileError(
                f"one training step launches more than {MOST_KERNELS_PER_STEP:,} kernels: a "
                "model that large is no benchmark (check its sizes: depth, sequence length)"
            )
        self.kernels.append(kernel)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Lets calls through unrecorded: the zeros that stand in for a fused kernel's results launch nothing."""
        self.recording = False
        try:
            yield
        finally:
            self.recording = True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.recording:
            return func(*args, **kwargs)
        if func._overloadpacket not in FLOP_FORMULAS and func is not torch.ops.prim.device.default:
            with self:  # an op torch can break into smaller ones runs as those, as FlopCounterMode counts them
                decomposed = func.decompose(*args, **kwargs)
            if decomposed is not NotImplemented:
                return decomposed
        out = func(*args, **kwargs)
        kernel = _kernel(func, args, kwargs, out, self.device)
        if kernel is not None:
            self.record(kernel)
        return out


@dataclass(frozen=True)
class RecurrentCall:
    """One call of a stack of recurrent layers (one forward of an nn.LSTM, nn.GRU or nn.RNN), in cuDNN's terms."""

    gates: int  # per hidden unit: 4 for an LSTM, 3 for a GRU, 1 for a plain RNN
    layers: int
    directions: int  # 2 bidirectional, 1 not
    steps: int  # time steps, T
    batch: int  # sequences, B
    input_width: int  # features of the first layer's input; every later layer reads directions x hidden
    hidden: int  # units, H
    biases: bool  # two bias vectors per layer and direction (input-to-hidden and hidden-to-hidden)
    training: bool  # cuDNN keeps its reserve space for the backward pass in training mode only
    dtype: torch.dtype

    @property
    def states(self) -> int:
        return 2 if self.gates == 4 else 1  # an LSTM carries a hidden state and a cell state; the others one


def fused_recurrent_kernels(call: RecurrentCall) -> tuple[list[Kernel], list[Kernel], list[Kernel]]:
    """cuDNN's kernels for `call`, per layer and direction: the forward pass's, then the backward pass's data
    gradients and its weight gradients, each of these from the last layer to the first. With T steps, B sequences,
    H units, G = gates x H, I the layer's input width (the call's features, then directions x H) and S = B x H x
    states the elements of the initial (or final) states, in elements of the input's dtype:

        forward          input projection   2*T*B*G*I FLOPs       reads T*B*I + G*I + 2G       writes T*B*G
                         recurrence         2*T*B*G*H             reads T*B*G + G*H + S        writes T*B*H + S + R
        backward_data    recurrence         2*T*B*G*H             reads R + T*B*H + S + G*H    writes T*B*G + S
                         input gradient     2*T*B*G*I             reads T*B*G + G*I            writes T*B*I
        backward_weight                     2*T*B*G*(I + H)       reads T*B*G + T*B*I + T*B*H  writes G*I + G*H + 2G

    The input projection is one GEMM over all T steps; its T*B*G pre-activations are what the recurrence (a
    persistent kernel: one GEMM of the previous state per step, then the gates) reads. R = T*B*G is the reserve
    space cuDNN keeps for the backward pass in training (the gates' activations of every step; the cell states it
    also keeps are left out); the backward recurrence writes the gates' gradients over it. The gates' element-wise
    work counts 0 FLOPs, as torch's flop counter counts it, and 2G is the two bias vectors (none without biases).
    The dropout cuDNN applies between layers (dropout > 0, in training) is element-wise work left out."""
    element = call.dtype.itemsize  # bytes
    positions, hidden = call.steps * call.batch, call.hidden  # T*B, H
    gate_width = call.gates * hidden  # G
    states = call.batch * hidden * call.states  # S
    reserve = positions * gate_width if call.training else 0  # R
    biases = 2 * gate_width if call.biases else 0

    def kernel(operator: str, flops: int, read: int, written: int) -> Kernel:
        return Kernel(
            operator=operator,
            flops=float(flops),
            bytes_read=float(read * element),
            bytes_written=float(written * element),
            dtype=str(call.dtype).removeprefix("torch."),
            matrix=True,
        )

    forward: list[Kernel] = []
    data: list[Kernel] = []
    weight: list[Kernel] = []
    for layer in range(call.layers):
        width = call.input_width if layer == 0 else call.directions * hidden  # I
        for _ in range(call.directions):
            forward += [
                kernel(
                    "cudnn_rnn.forward",
                    2 * positions * gate_width * width,
                    positions * width + gate_width * width + biases,
                    positions * gate_width,
                ),
                kernel(
                    "cudnn_rnn.forward",
                    2 * positions * gate_width * hidden,
                    positions * gate_width + gate_width * hidden + states,
                    positions * hidden + states + reserve,
                ),
            ]
            data[:0] = [  # the backward pass runs from the last layer down
                kernel(
                    "cudnn_rnn.backward_data",
                    2 * positions * gate_width * hidden,
                    reserve + positions * hidden + states + gate_width * hidden,
                    positions * gate_width + states,
                ),
                kernel(
                    "cudnn_rnn.backward_data",
                    2 * positions * gate_width * width,
                    positions * gate_width + gate_width * width,
                    positions * width,
                ),
            ]
            weight[:0] = [
                kernel(
                    "cudnn_rnn.backward_weight",
                    2 * positions * gate_width * (width + hidden),
                    positions * (gate_width + width + hidden),
                    gate_width * width + gate_width * hidden + biases,
                )
            ]
    return forward, data, weight


class _FusedRecurrentLayers(torch.autograd.Function):
    """A call of recurrent layers as one autograd node, as `_cudnn_rnn` is on a GPU: its forward and backward record
    cuDNN's kernels and hand back zeros of the shapes the real op returns; no values are computed."""

    @staticmethod
    def forward(ctx, recorder: _Recorder, call: RecurrentCall, inputs: torch.Tensor, *states_and_weights):
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None: zeros for it would be kernels
        ctx.recorder, ctx.call = recorder, call
        ctx.like = [(tensor.shape, tensor.dtype, tensor.device) for tensor in (inputs, *states_and_weights)]
        forward, _, _ = fused_recurrent_kernels(call)
        for kernel in forward:
            recorder.record(kernel)
        outputs = (*inputs.shape[:2], call.directions * call.hidden)  # the input's layout, batch first or not
        with recorder.paused():  # zeros stand in for the results: on the CPU the step may read them
            return tuple(
                torch.zeros(shape, dtype=inputs.dtype, device=inputs.device)
                for shape in (outputs, *(state.shape for state in states_and_weights[: call.states]))
            )

    @staticmethod
    def backward(ctx, *output_gradients):
        _, data, weight = fused_recurrent_kernels(ctx.call)
        needed = ctx.needs_input_grad[2:]  # input, states, weights: none for the recorder and the call
        # cuDNN computes the data gradients whatever is needed (the weights' gradients read what they leave in the
        # reserve space), the weights' only when a weight needs one
        for kernel in data + (weight if any(needed[1 + ctx.call.states :]) else []):
            ctx.recorder.record(kernel)
        with ctx.recorder.paused():
            gradients = [
                torch.zeros(shape, dtype=dtype, device=device) if wanted else None
                for (shape, dtype, device), wanted in zip(ctx.like, needed, strict=True)
            ]
        return None, None, *gradients


class _FusedRecurrence(TorchFunctionMode):
    """Runs each call nn.LSTM, nn.GRU or nn.RNN makes as `_FusedRecurrentLayers`, recorded as cuDNN's kernels. A
    packed sequence (whose batch shrinks step by step) or an LSTM with projections runs as torch runs it, per step."""

    def __init__(self, recorder: _Recorder) -> None:
        super().__init__()
        self.recorder = recorder

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        gates = next((count for function, count in RECURRENT_GATES if func is function), None)
        call = _recurrent_call(gates, args) if gates is not None and not kwargs else None
        if call is None:
            return func(*args, **kwargs)
        inputs, states, weights = args[:3]
        states = tuple(states) if isinstance(states, (tuple, list)) else (states,)
        return _FusedRecurrentLayers.apply(self.recorder, call, inputs, *states, *weights)


def _fused_recurrence(recorder: _Recorder, fuse: bool) -> contextlib.AbstractContextManager:
    return _FusedRecurrence(recorder) if fuse else contextlib.nullcontext()


def _recurrent_call(gates: int, args: tuple) -> RecurrentCall | None:
    """The call `args` of a recurrent function of `gates` gates, as (input, states, flat weights, biases, layers,
    dropout, training, bidirectional, batch_first); None for a call of another form: a packed sequence's
    (data, batch sizes, states, weights, ...) or an LSTM with projections (a third weight per layer and direction)."""
    if len(args) != 9 or not isinstance(args[3], bool):
        return None
    inputs, _, weights, biases, layers, _, training, bidirectional, batch_first = args
    directions = 2 if bidirectional else 1
    if inputs.dim() != 3 or len(weights) != layers * directions * (4 if biases else 2):
        return None
    steps, batch = (inputs.shape[1], inputs.shape[0]) if batch_first else (inputs.shape[0], inputs.shape[1])
    return RecurrentCall(
        gates=gates,
        layers=layers,
        directions=directions,
        steps=steps,
        batch=batch,
        input_width=inputs.shape[2],
        hidden=weights[1].shape[1],
        biases=biases,
        training=bool(training),
        dtype=inputs.dtype,
    )


def _kernel(func, args: tuple, kwargs: dict, out: Any, device: str) -> Kernel | None:
    """The kernel that the call `func(*args, **kwargs) -> out` launches, or None when it launches none."""
    schema = func._schema
    if schema.name in ALLOCATIONS or schema.name in UNDECLARED_VIEWS:
        return None
    if schema.returns and all(
        result.alias_info is not None and not result.alias_info.is_write for result in schema.returns
    ):
        return None  # a view or alias: new sizes and strides over the same memory
    inputs = _tensors((args, kwargs))
    outputs = _tensors(out) or list(_written_arguments(schema, args, kwargs))  # `-> ()`: in-place _foreach_*
    if not outputs:
        return None  # a query of sizes, or a number read back to the host (.item()): no kernel of its own
    if not any(tensor.device.type == device for tensor in inputs + outputs):
        return None  # work on host tensors only, such as the CPU step counts of Adam on CUDA
    formula = FLOP_FORMULAS.get(func._overloadpacket)
    flops = float(formula(*args, **kwargs, out_val=out)) if formula is not None else 0.0
    floating = [tensor.dtype for tensor in inputs + outputs if tensor.dtype.is_floating_point]
    dtype = (floating or [tensor.dtype for tensor in inputs + outputs])[0]
    return Kernel(
        operator=str(func),
        flops=flops,
        bytes_read=float(_distinct_bytes(inputs)),
        bytes_written=float(sum(_logical_bytes(tensor) for tensor in outputs)),
        dtype=str(dtype).removeprefix("torch."),
        matrix=flops > 0,
    )


def _tensors(tree: Any) -> list[torch.Tensor]:
    """The tensors in nested lists, tuples and dicts (the tensor lists of _foreach_* flattened)."""
    return [leaf for leaf in tree_flatten(tree)[0] if isinstance(leaf, torch.Tensor)]


def _written_arguments(schema, args: tuple, kwargs: dict) -> Iterator[torch.Tensor]:
    """The tensors an operator updates in place: its arguments marked `(a!)` in the schema."""
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is None or not argument.alias_info.is_write:
            continue
        value = args[position] if position < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
        yield from _tensors(value)


def _logical_bytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()  # bytes of its elements as the kernel sees them


def _distinct_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes read from `tensors`, each storage once; no more than the storage holds (a stride-0 broadcast reads
    its few real elements)."""
    by_storage: dict[int, int] = {}
    for tensor in tensors:
        try:
            storage = tensor.untyped_storage()
            key, held = storage._cdata, storage.nbytes()  # _cdata: the storage's identity, also on meta
        except (RuntimeError, NotImplementedError):  # a tensor without a plain storage (sparse, nested)
            key, held = id(tensor), _logical_bytes(tensor)
        by_storage[key] = max(by_storage.get(key, 0), min(_logical_bytes(tensor), held))
    return sum(by_storage.values())


def _described(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
