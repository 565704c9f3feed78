"""FLOPs per training sample: the work one sample costs, so throughput can be read as TFLOP/s.

`torch.utils.flop_counter` counts the floating-point operations of the matrix products and convolutions (and
attention) of one forward pass, the loss and the backward pass, on the meta device: no memory, no arithmetic,
the same count on every machine. Element-wise work (activations, normalisation, the optimizer step) is left
out, as in every MFU figure. A backward pass costs about twice its forward pass, except where no gradient is
needed (the input layer's gradient with respect to the data). A user's own `train_step` is counted as it runs,
whatever it computes.

    python -c "from devicebench.engine.flops import training_flops_per_sample as f; from devicebench.workloads import get_workload as g; w = g('cifar10-mlp'); print(f(w, dict(w.defaults)))"
"""

from __future__ import annotations

import functools
import json
import logging
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

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


@functools.lru_cache(maxsize=64)  # the LSTM takes seconds to count: once per process, workload and setting
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
        with FlopCounterMode(display=False) as counter:
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
    return counter.get_total_flops() / COUNTED_BATCH
