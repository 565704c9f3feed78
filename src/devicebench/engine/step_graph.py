"""Tuned mode's whole training step as one CUDA graph: forward, loss, backward and the optimizer step captured once
and replayed, so that a small model's step costs one launch instead of the host's dispatch of every kernel.

On an H200 the seed models' eager steps took 1.6-2.1 ms whatever their size, the GPU busy 12-30% of the time: each of
their 28-42 kernels cost ~20-25 us of Python, dispatch and launch on the host (issue 40). A replayed graph launches
them all at once. This follows torch.cuda.graphs' "whole network capture": a few eager steps on a side stream first
(lazy initialisation, the optimizer's state and cuDNN's autotuning must not happen inside a capture), then one capture
with static input and label buffers and the gradients set to None, so that the backward pass allocates them from the
graph's own memory pool and every replay overwrites them (the zero-grad is in the graph). Each step then copies its
batch into the static buffers and replays.

A graph has fixed shapes: the shape it was captured at is the first batch's (a trial and an epoch start with full
batches); a batch of any other shape, the epoch's short last one, runs eagerly on the same model and optimizer, so it
costs one eager step an epoch instead of a second warm-up and capture. Whether a model can be captured at all is
measured, not guessed: tuned mode's trial (engine/tuning.py) tries the graph as one of its options on CUDA, and one
whose capture fails (data-dependent control flow, a read back to the host, a layer torch cannot capture) is left out
and named with its reason. `step_graph_refusal` names the cases known before any trial. Nothing here runs on a CPU:
tests/test_step_graph.py checks the logic with a fake graph that replays a Python closure, and on CUDA for real.

    python -m pytest tests/test_step_graph.py -q
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch.nn.parallel import DistributedDataParallel

from devicebench.engine.loop import TrainingSetup

GRAPH_WARMUP_STEPS = 2  # eager steps on a side stream before the capture: allocation, optimizer state, autotuning

Step = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]
Signature = tuple[torch.Size, torch.dtype, torch.Size, torch.dtype]  # the inputs' and the labels' shape and type


class Graph(Protocol):
    """A captured step: `replay()` runs it again, writing into the same `outputs` (loss, model outputs) each time."""

    outputs: tuple[torch.Tensor, torch.Tensor]

    def replay(self) -> None: ...


class Capture(Protocol):
    """How a step is warmed up and captured: on CUDA, `CudaCapture`; in the CPU tests, a fake."""

    def warm_up(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        """Run `step` eagerly, as the capture will need it run before."""

    def capture(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Graph:
        """Record `step` without running it; the graph's outputs hold a result only after its first replay."""


def step_graph_refusal(setup: TrainingSetup) -> str | None:
    """Why `setup`'s training step cannot be captured as one CUDA graph, known before any trial; None when it may
    be tried (whether its capture works is the trial's to find)."""
    if setup.step is not None:
        return "the workload's own train_step runs Python that a graph would not replay"
    if isinstance(setup.forward, DistributedDataParallel):
        return "several processes train together: DDP's gradient exchange is not captured"
    return None


class GraphedStep:
    """A training step that warms up, captures itself on its first batch's shape and replays from then on.

    `step(inputs, labels)` is the eager step (forward, loss, zero-grad as None, backward, optimizer step) returning
    (loss, outputs). Calls 1 to GRAPH_WARMUP_STEPS run it through `capture.warm_up`; the next call of the same shape
    captures it on static buffers, then it and every later one copy their batch in and replay. A call returns that
    step's loss and outputs in tensors of their own: the graph writes into the same two every replay, and the loop
    keeps an epoch's losses and outputs to read after its clock stops. Those two copies and the batch's two are
    the four kernels a graphed step launches besides the graph.
    """

    def __init__(self, step: Step, capture: Capture) -> None:
        self.step = step
        self.capture = capture
        self.signature: Signature | None = None  # the shape captured, from the first batch
        self.warm_steps = 0
        self.graph: Graph | None = None
        self.static_inputs = self.static_labels = torch.empty(0)
        self.eager_steps = 0  # steps of another shape, run eagerly

    def __call__(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        signature = (inputs.shape, inputs.dtype, labels.shape, labels.dtype)
        if self.signature is None:
            self.signature = signature
        if signature != self.signature:
            self.eager_steps += 1
            return self._eager(inputs, labels)
        if self.graph is None:
            if self.warm_steps < GRAPH_WARMUP_STEPS:
                self.warm_steps += 1
                return self.capture.warm_up(lambda: self._eager(inputs, labels))
            self.static_inputs, self.static_labels = torch.empty_like(inputs), torch.empty_like(labels)
            self.graph = self.capture.capture(lambda: self._eager(self.static_inputs, self.static_labels))
        self.static_inputs.copy_(inputs)
        self.static_labels.copy_(labels)
        self.graph.replay()
        loss, outputs = self.graph.outputs
        return loss.clone(), outputs.clone()

    def _eager(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss, outputs = self.step(inputs, labels)
        if outputs is None:  # step_graph_refusal leaves out the only steps that return none: a user's own
            raise TypeError("a graphed step needs the step's outputs")
        return loss.detach(), outputs.detach()


class CudaCapture:
    """Warm-up on a side stream and capture with torch.cuda.graph, as torch.cuda.graphs' whole-network example does."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.side = torch.cuda.Stream(device)

    def warm_up(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
        current = torch.cuda.current_stream(self.device)
        self.side.wait_stream(current)  # the batch was made on the current stream
        with torch.cuda.stream(self.side):
            results = step()
        current.wait_stream(self.side)
        for tensor in results:  # made on the side stream, read on the current one: not to be reused before that
            tensor.record_stream(current)
        return results

    def capture(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> Graph:
        return CudaGraph(step)


class CudaGraph:
    """One captured step on CUDA."""

    def __init__(self, step: Callable[[], tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.graph = torch.cuda.CUDAGraph()
        current = torch.cuda.current_stream()
        try:
            # thread_local: only this thread may not make a call a capture forbids; the monitor's and a loader's
            # threads go on (the default, global, would fail theirs while the capture lasts)
            with torch.cuda.graph(self.graph, capture_error_mode="thread_local"):
                self.outputs = step()
        finally:  # a capture that failed (the trial goes on without it) may leave its own stream the current one
            torch.cuda.set_stream(current)

    def replay(self) -> None:
        self.graph.replay()


def capturable(optimizer: torch.optim.Optimizer) -> None:
    """Ask `optimizer` for the step a graph can capture, before it holds any state: Adam-like optimizers then keep
    their step counts on the device (a fused step does anyway); those without the option (SGD) need none."""
    for group in optimizer.param_groups:
        if "capturable" in group:
            group["capturable"] = True
