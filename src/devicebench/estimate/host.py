"""The host's side of a training step of devicebench's eager loop on a GPU: what the Python process spends a step on
while the GPU runs the kernels it queued before, fitted on devicebench's own GPU runs.

An eager step is a Python program: each aten call the step makes (an operator of the forward pass, an autograd node
of the backward, a multi-tensor `_foreach_*` of the optimizer: one call, however many tensors) goes through
PyTorch's dispatcher and queues its work; a convolution goes through cuDNN as well, which looks up the plan of its
shapes and sets up its descriptors on every call. Each step also pays for the loop around it whatever the model
(the loss kept on the device, the accuracy counted, the batch taken from the pipeline and copied, zero_grad, the
optimizer's Python), and a batch made by loader worker processes is received from them (unpickled, its tensors'
shared memory handed over a socket and mapped) and page-locked in a thread of the training process, which holds the
interpreter's lock for much of it. So the host's seconds a step are a sum of counts times fitted costs, HOST_TERMS:

- a call (the profile's kernels: engine/opcount.py records one per aten call that launches work; views launch
  nothing and are not counted);
- a convolution's call, on top of a call's (aten's convolution and convolution_backward: cuDNN's);
- a step (one per step);
- a batch received from loader workers (one per step where the run has workers; none where the training process
  makes its batches, or the data is held on the device).

What the committed H200 runs decided (docs/estimate.md, "The model"): a batch's bytes (the copy from pageable
memory, the page-locking) did not help beside the batch's count; a term of cuDNN's recurrent layer would be pinned by
one model only, which it would fit exactly and so never predict; none is kept.
"""

from __future__ import annotations

import math

import numpy as np

from devicebench.estimate.robust import reweighted_fit

HOST_TERMS = ("per call", "per convolution", "per step", "per batch from loader workers")
CALLS, CONVOLUTIONS, STEP, FROM_WORKERS = range(len(HOST_TERMS))
# Where no run of devicebench's pins a term: ~20-25 µs a call, the H200 host's first measure (issue 40), and
# nothing for the rest. A weak pull (PRIOR_WEIGHT, in the fit's relative-error units) that a single run outweighs,
# each term measured in a typical size of its own (SCALE_S) so that the pull is alike on all
HOST_PRIOR_S = np.array([25e-6, 0.0, 0.0, 0.0])
SCALE_S = np.array([25e-6, 100e-6, 500e-6, 1e-3])
PRIOR_WEIGHT = 1e-6
MOST_S = 0.01  # no term above 10 ms: a bound the fit never reaches, which keeps it finite
HUBER_RELATIVE = 0.5  # a run off by more than this weighs less the further it is
MOST_REFITS = 30


def is_convolution(operator: str) -> bool:
    """Whether the aten call `operator` ("aten.convolution.default") is a convolution, forward or backward."""
    return operator.startswith(("aten.convolution.", "aten.convolution_backward."))


def host_work(calls: int, convolutions: int, from_workers: bool = False) -> np.ndarray:
    """A step's counts of HOST_TERMS."""
    return np.array([calls, convolutions, 1.0, 1.0 if from_workers else 0.0])


def with_workers(work: np.ndarray, from_workers: bool) -> np.ndarray:
    """`work` with its batch taken from loader workers or not."""
    changed = work.copy()
    changed[FROM_WORKERS] = 1.0 if from_workers else 0.0
    return changed


def fit_host(work: np.ndarray, observed_s: np.ndarray) -> np.ndarray:
    """The seconds of each HOST_TERMS from runs whose step the host bounds, `work` their counts (runs × terms) and
    `observed_s` their steps: the least squared relative error, non-negative, robust (Huber's loss, iteratively
    reweighted, so that one odd run cannot drag a term after it); HOST_PRIOR_S where no run is."""
    if not len(observed_s):
        return HOST_PRIOR_S.copy()
    terms = work / observed_s[:, None]
    prior_rows = math.sqrt(PRIOR_WEIGHT) * np.eye(len(HOST_TERMS)) / SCALE_S
    weights = np.ones(len(observed_s))
    seconds = HOST_PRIOR_S.copy()
    target = np.ones(len(observed_s))
    for _ in range(MOST_REFITS):
        seconds, reweighted = reweighted_fit(
            terms, target, weights, prior_rows, HOST_PRIOR_S, (0.0, MOST_S), HUBER_RELATIVE
        )
        if np.allclose(reweighted, weights, rtol=0.0, atol=1e-3):
            break
        weights = reweighted
    return seconds
