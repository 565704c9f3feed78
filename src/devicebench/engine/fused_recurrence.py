"""Recurrent layers as cuDNN runs them on a GPU: each call of an nn.LSTM, nn.GRU or nn.RNN recorded as a few fused
kernels per layer and direction (`fused_recurrent_kernels`), not as the per-time-step ops torch breaks it into on the
meta device and the CPU. engine/opcount.py records a step under `fused_recurrence`.

    python -c "import torch; from devicebench.engine.fused_recurrence import RecurrentCall as C, fused_recurrent_kernels as k; print(k(C(4, 1, 1, 35, 20, 650, 650, True, True, torch.float32))[0])"
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
from torch.overrides import TorchFunctionMode

from devicebench.engine.kernel_recorder import Kernel, Recorder

# The functions nn.LSTM, nn.GRU and nn.RNN call with their flat weights, and the gates of each per hidden unit
RECURRENT_GATES = ((torch._VF.lstm, 4), (torch._VF.gru, 3), (torch._VF.rnn_tanh, 1), (torch._VF.rnn_relu, 1))


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
    sizes = _Sizes.of(call)
    forward: list[Kernel] = []
    data: list[Kernel] = []
    weight: list[Kernel] = []
    for layer in range(call.layers):
        width = call.input_width if layer == 0 else call.directions * call.hidden  # I
        for _ in range(call.directions):
            forward += _forward_kernels(sizes, width)
            data[:0] = _backward_data_kernels(sizes, width)  # the backward pass runs from the last layer down
            weight[:0] = [_backward_weight_kernel(sizes, width)]
    return forward, data, weight


@dataclass(frozen=True)
class _Sizes:
    """A call's sizes in elements of its dtype, as `fused_recurrent_kernels`' table names them."""

    positions: int  # T*B
    hidden: int  # H
    gate_width: int  # G
    states: int  # S
    reserve: int  # R
    biases: int  # 2G, or 0 without biases
    element: int  # bytes
    dtype: str

    @classmethod
    def of(cls, call: RecurrentCall) -> _Sizes:
        gate_width = call.gates * call.hidden
        positions = call.steps * call.batch
        return cls(
            positions=positions,
            hidden=call.hidden,
            gate_width=gate_width,
            states=call.batch * call.hidden * call.states,
            reserve=positions * gate_width if call.training else 0,
            biases=2 * gate_width if call.biases else 0,
            element=call.dtype.itemsize,
            dtype=str(call.dtype).removeprefix("torch."),
        )

    def kernel(self, operator: str, flops: int, read: int, written: int) -> Kernel:
        """A matrix kernel of `flops` that reads `read` and writes `written` elements."""
        return Kernel(
            operator=operator,
            flops=float(flops),
            bytes_read=float(read * self.element),
            bytes_written=float(written * self.element),
            dtype=self.dtype,
            matrix=True,
        )


def _forward_kernels(sizes: _Sizes, width: int) -> list[Kernel]:
    """One layer and direction's forward pass, reading `width` (I) features: the input projection, then the
    recurrence."""
    positions, gate_width, hidden = sizes.positions, sizes.gate_width, sizes.hidden
    return [
        sizes.kernel(
            "cudnn_rnn.forward",
            2 * positions * gate_width * width,
            positions * width + gate_width * width + sizes.biases,
            positions * gate_width,
        ),
        sizes.kernel(
            "cudnn_rnn.forward",
            2 * positions * gate_width * hidden,
            positions * gate_width + gate_width * hidden + sizes.states,
            positions * hidden + sizes.states + sizes.reserve,
        ),
    ]


def _backward_data_kernels(sizes: _Sizes, width: int) -> list[Kernel]:
    """One layer and direction's data gradients: the recurrence's, then the input's."""
    positions, gate_width, hidden = sizes.positions, sizes.gate_width, sizes.hidden
    return [
        sizes.kernel(
            "cudnn_rnn.backward_data",
            2 * positions * gate_width * hidden,
            sizes.reserve + positions * hidden + sizes.states + gate_width * hidden,
            positions * gate_width + sizes.states,
        ),
        sizes.kernel(
            "cudnn_rnn.backward_data",
            2 * positions * gate_width * width,
            positions * gate_width + gate_width * width,
            positions * width,
        ),
    ]


def _backward_weight_kernel(sizes: _Sizes, width: int) -> Kernel:
    """One layer and direction's weight gradients, both matrices and the biases in one kernel."""
    positions, gate_width, hidden = sizes.positions, sizes.gate_width, sizes.hidden
    return sizes.kernel(
        "cudnn_rnn.backward_weight",
        2 * positions * gate_width * (width + hidden),
        positions * (gate_width + width + hidden),
        gate_width * width + gate_width * hidden + sizes.biases,
    )


class _FusedRecurrentLayers(torch.autograd.Function):
    """A call of recurrent layers as one autograd node, as `_cudnn_rnn` is on a GPU: its forward and backward record
    cuDNN's kernels and hand back zeros of the shapes the real op returns; no values are computed."""

    @staticmethod
    def forward(ctx, mode: _FusedRecurrence, call: RecurrentCall, inputs: torch.Tensor, *states_and_weights):
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None: zeros for it would be kernels
        recorder = ctx.recorder = mode.recorder
        ctx.call = call
        ctx.like = [(tensor.shape, tensor.dtype, tensor.device) for tensor in (inputs, *states_and_weights)]
        forward, _, _ = fused_recurrent_kernels(call)
        for kernel in forward:
            recorder.record(kernel)
        with recorder.paused():  # zeros stand in for the results: on the CPU the step may read them
            return stand_in_outputs(call, inputs, states_and_weights)

    @staticmethod
    def backward(ctx, *output_gradients):
        _, data, weight = fused_recurrent_kernels(ctx.call)
        needed = ctx.needs_input_grad[2:]  # input, states, weights: none for the mode and the call
        # cuDNN computes the data gradients whatever is needed (the weights' gradients read what they leave in the
        # reserve space), the weights' only when a weight needs one
        for kernel in data + (weight if any(needed[1 + ctx.call.states :]) else []):
            ctx.recorder.record(kernel)
        with ctx.recorder.paused():
            gradients = stand_in_gradients(ctx.like, needed)
        return None, None, *gradients


def stand_in_outputs(call: RecurrentCall, inputs: torch.Tensor, states_and_weights: tuple) -> tuple[torch.Tensor, ...]:
    """Zeros of the shapes a recurrent call returns: its output (in the input's layout, batch first or not), then
    its final states."""
    outputs = (*inputs.shape[:2], call.directions * call.hidden)
    return tuple(
        torch.zeros(shape, dtype=inputs.dtype, device=inputs.device)
        for shape in (outputs, *(state.shape for state in states_and_weights[: call.states]))
    )


def stand_in_gradients(like: list[tuple], needed: tuple[bool, ...]) -> list[torch.Tensor | None]:
    """Zeros for each input of a recurrent call that needs a gradient, of its (shape, dtype, device) in `like`."""
    return [
        torch.zeros(shape, dtype=dtype, device=device) if wanted else None
        for (shape, dtype, device), wanted in zip(like, needed, strict=True)
    ]


class RecurrentCalls(TorchFunctionMode):
    """Runs each call nn.LSTM, nn.GRU or nn.RNN makes as `layers`, an autograd function given this mode, the
    `RecurrentCall` and then the call's input, states and flat weights. A packed sequence (whose batch shrinks step
    by step) or an LSTM with projections runs as torch runs it, per step."""

    layers: type[torch.autograd.Function]

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        gates = next((count for function, count in RECURRENT_GATES if func is function), None)
        call = recurrent_call(gates, args) if gates is not None and not kwargs else None
        if call is None:
            return func(*args, **kwargs)
        inputs, states, weights = args[:3]
        states = tuple(states) if isinstance(states, (tuple, list)) else (states,)
        return self.layers.apply(self, call, inputs, *states, *weights)


class _FusedRecurrence(RecurrentCalls):
    """Each recurrent call recorded as cuDNN's kernels (`_FusedRecurrentLayers`)."""

    layers = _FusedRecurrentLayers

    def __init__(self, recorder: Recorder) -> None:
        super().__init__()
        self.recorder = recorder


def fused_recurrence(recorder: Recorder, fuse: bool) -> contextlib.AbstractContextManager:
    return _FusedRecurrence(recorder) if fuse else contextlib.nullcontext()


def recurrent_call(gates: int, args: tuple) -> RecurrentCall | None:
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
