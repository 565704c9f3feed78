"""FLOPs per training sample: the work one sample costs, so throughput can be read as TFLOP/s.

`torch.utils.flop_counter` counts the floating-point operations of the matrix products and convolutions (and
attention) of one forward pass, the loss and the backward pass, on the meta device: no memory, no arithmetic,
the same count on every machine. Element-wise work (activations, normalisation, the optimizer step) is left
out, as in every MFU figure. A backward pass costs about twice its forward pass, except where no gradient is
needed (the input layer's gradient with respect to the data). A user's own `train_step` is counted as it runs,
whatever it computes. Recurrent layers (nn.LSTM, nn.GRU, nn.RNN) are counted by formula: the count of the
per-time-step products torch breaks them into, without running thousands of them on the meta device.

    python -c "from devicebench.engine.flops import training_flops_per_sample as f; from devicebench.workloads import get_workload as g; w = g('cifar10-mlp'); print(f(w, dict(w.defaults)))"
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from devicebench.engine.fused_recurrence import RecurrentCall, RecurrentCalls, stand_in_gradients, stand_in_outputs
from devicebench.engine.opcount import READS_ITS_DATA
from devicebench.workloads import Workload

COUNTED_BATCH = 2  # samples in the counted step: more than one, so per-sample costs cannot hide in batch-1 shortcuts


def training_flops_per_sample(workload: Workload, hyperparameters: dict[str, Any]) -> float | None:
    """FLOPs of one training step per sample for `workload` built with `hyperparameters`; None for a workload that
    is not a torch model, or when a layer cannot be counted."""
    if workload.trainer is not None:
        return None
    # the count is of COUNTED_BATCH samples whatever the batch: a budget trying batch after batch counts once
    counted = {**hyperparameters, "batch_size": COUNTED_BATCH} if "batch_size" in hyperparameters else hyperparameters
    return _counted(workload, json.dumps(counted, sort_keys=True, default=str))


@functools.lru_cache(maxsize=64)  # a big model takes a second to count: once per process, workload and setting
def _counted(workload: Workload, hyperparameters_json: str) -> float | None:
    hyperparameters = json.loads(hyperparameters_json)
    # a torch model (training_flops_per_sample returned None for the others) has an example batch, an optimizer and,
    # without a step of its own, a loss: register() and own() refuse it without
    build_optimizer, build_loss = workload.build_optimizer, workload.build_loss
    try:
        example = workload.example_batch(hyperparameters)
        assert example is not None
        inputs, labels = (part.to("meta").expand(COUNTED_BATCH, *part.shape[1:]) for part in example)
        with torch.device("meta"):
            model = workload.build_model(hyperparameters).to("meta")  # a user's model instance is copied for real
        with FlopCounterMode(display=False) as counter, _CountedRecurrence() as recurrent:
            if workload.train_step is not None:  # a step of the user's own: whatever it computes is counted
                assert build_optimizer is not None
                workload.train_step(model, (inputs, labels), build_optimizer(model, hyperparameters))
            else:
                assert build_loss is not None
                loss_function = build_loss()
                assert loss_function is not None  # only a model with a train_step of its own builds no loss: own()
                loss_function(model(inputs), labels).backward()
    except Exception as error:  # an op the meta device cannot run, or a user's step that needs real numbers
        # no count on random numbers instead: a model whose branches follow its data would get a figure that its
        # real data may not take, stored beside measured throughput as if it were as sure
        logging.getLogger(__name__).warning(
            "FLOPs per sample of %s not counted, so its runs show no TFLOP/s: one step could not run on the meta "
            "device (%s: %s), %s",
            workload.name,
            type(error).__name__,
            error,
            READS_ITS_DATA,
        )
        return None
    return (counter.get_total_flops() + recurrent.flops) / COUNTED_BATCH


class _RecurrentLayers(torch.autograd.Function):
    """One call of recurrent layers as one autograd node that adds the FLOPs of the matrix products torch's
    per-step decomposition runs, and hands back zeros of the shapes the real op returns. Per layer and direction,
    with T steps, B sequences, H units, G = gates x H and I the layer's input width:

        forward                  2*T*B*G*(I + H)     each step's input and state products
        input-to-hidden weights  2*T*B*G*I           when they need a gradient
        hidden-to-hidden weights 2*T*B*G*H           when they need a gradient
        the states' gradients    2*(T - 1)*B*G*H     back through time, when anything here or below needs a gradient
                                 + 2*B*G*H           into the initial hidden state, when it needs one
        the input's gradient     2*T*B*G*I           when the layer's input needs one"""

    @staticmethod
    def forward(ctx, tally: _CountedRecurrence, call: RecurrentCall, inputs: torch.Tensor, *states_and_weights):
        ctx.set_materialize_grads(False)
        ctx.tally, ctx.call = tally, call
        ctx.like = [(tensor.shape, tensor.dtype, tensor.device) for tensor in (inputs, *states_and_weights)]
        positions, gate_width = call.steps * call.batch, _gate_width(call)
        tally.flops += sum(2 * positions * gate_width * (width + call.hidden) for width in _widths(call))
        return stand_in_outputs(call, inputs, states_and_weights)

    @staticmethod
    def backward(ctx, *output_gradients):
        call, needed = ctx.call, ctx.needs_input_grad[2:]  # input, states, weights: none for the tally and the call
        input_needs, states_need = needed[0], needed[1 : 1 + call.states]
        per_direction = len(needed[1 + call.states :]) // (call.layers * call.directions)  # w_ih, w_hh (b_ih, b_hh)
        weights_need = [
            needed[1 + call.states + per_direction * index : 1 + call.states + per_direction * (index + 1)]
            for index in range(call.layers * call.directions)
        ]
        positions, gate_width, hidden = call.steps * call.batch, _gate_width(call), call.hidden
        flops = 0
        for index, width in enumerate(_widths(call)):  # each layer and direction
            first_layer, below = index < call.directions, weights_need[: index - index % call.directions]
            its_input_needs = input_needs or (not first_layer and (any(states_need) or any(map(any, below))))
            own = weights_need[index]
            flops += 2 * positions * gate_width * (width * own[0] + hidden * own[1])
            if any(own) or its_input_needs or any(states_need):
                flops += 2 * (positions - call.batch) * gate_width * hidden
                flops += 2 * call.batch * gate_width * hidden * states_need[0]
            flops += 2 * positions * gate_width * width * its_input_needs
        ctx.tally.flops += flops
        return None, None, *stand_in_gradients(ctx.like, needed)


class _CountedRecurrence(RecurrentCalls):
    """Counts each call of an nn.LSTM, nn.GRU or nn.RNN by formula (`_RecurrentLayers`) instead of running the
    per-time-step ops torch breaks it into on the meta device: the same count, in milliseconds instead of the 6 s
    that imdb-bilstm's 200 steps took on 2 cores (tests/test_flops.py holds the two equal). A packed sequence or an
    LSTM with projections runs as torch runs it, and is counted as it runs."""

    layers = _RecurrentLayers

    def __init__(self) -> None:
        super().__init__()
        self.flops = 0


def _gate_width(call: RecurrentCall) -> int:
    return call.gates * call.hidden


def _widths(call: RecurrentCall) -> list[int]:
    """The input width of each layer and direction, in the order of the flat weights: the call's features for the
    first layer, directions x hidden for every later one."""
    return [
        call.input_width if layer == 0 else call.directions * call.hidden
        for layer in range(call.layers)
        for _ in range(call.directions)
    ]
