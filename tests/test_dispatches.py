"""What the training loop adds to a model's own step, counted in dispatches: the aten operations called from Python
(or from the loop), each ~20 us of Python, dispatch and launch on a GPU whose small model waits on its host. Counted
with torch's profiler on the CPU, where the same host work happens. The loop may add at most two to a step's
forward, loss, backward, optimizer step and zero-grad (issue 40); today it adds none.

    python -m pytest tests/test_dispatches.py -q
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile

from devicebench.data.pipeline import HostBatches
from devicebench.engine.loop import TrainingSetup, _train_epoch
from devicebench.engine.timing import Stopwatch
from devicebench.events import Reporter

CPU = torch.device("cpu")
MOST_ADDED_DISPATCHES = 2  # a step of the loop, beyond the model's own step
BATCH_SIZE = 8
STEPS = 4  # the marginal count compares epochs of STEPS and 2 * STEPS steps


def dispatches(action: Callable[[], object]) -> int:
    """The aten operations `action` calls: those an aten operation calls inside itself are its own work, not
    another dispatch from Python."""
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        action()
    count = 0
    for event in profiled.events():
        if not event.name.startswith("aten::"):
            continue
        parent = event.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        count += parent is None
    return count


def linear_16_16_4() -> TrainingSetup:
    """A model whose compute is negligible, trained with Adam: its step is nearly all dispatch."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 4))
    return TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.Adam(model.parameters()))


def uint8_batches(**options: object) -> HostBatches:
    """4x4 uint8 images (16 features once flattened), four classes: the seeds' in-memory images, scaled per batch."""
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, size=(256, 1, 4, 4), dtype=np.uint8)
    labels = generator.integers(0, 4, size=256).astype(np.int64)
    return HostBatches(images, labels, BATCH_SIZE, CPU, **options)


def loop_dispatches_per_step(setup: TrainingSetup, batches: HostBatches) -> float:
    """The loop's dispatches for one more step: what an epoch's setting up and reading back costs cancels out."""

    def epoch(steps: int) -> int:
        return dispatches(lambda: _train_epoch(setup, batches, 1, steps, Stopwatch(CPU), Reporter()))

    return (epoch(2 * STEPS) - epoch(STEPS)) / STEPS


def bare_dispatches_per_step(setup: TrainingSetup, batches: HostBatches) -> float:
    """The model's own step: forward, loss, zero-grad, backward, optimizer step, on batches made beforehand."""
    made = list(batches.epoch(1, STEPS))
    return dispatches(lambda: [setup.train_step(images, labels) for images, labels in made]) / STEPS


def test_a_step_of_the_loop_adds_at_most_two_dispatches_to_the_models_own():
    setup, batches = linear_16_16_4(), uint8_batches()
    _train_epoch(setup, batches, 1, 2, Stopwatch(CPU), Reporter())  # Adam's state made: every later step the same
    bare = bare_dispatches_per_step(setup, batches)
    in_loop = loop_dispatches_per_step(setup, batches)
    assert bare > 20  # forward, loss, backward and Adam: a step really was counted
    assert in_loop - bare <= MOST_ADDED_DISPATCHES, f"the loop adds {in_loop - bare} dispatches a step to {bare}"


def test_the_host_path_gathers_with_numpy_not_with_torch():
    """The staged path (data that does not fit on a GPU) gathers each batch with numpy's take, on one thread:
    torch's CPU gather would run on every intra-op thread, whose OpenMP workers then spin between a GPU's steps."""
    staged = uint8_batches(resident=False)
    with profile(activities=[ProfilerActivity.CPU]) as profiled:
        list(staged.epoch(1, STEPS))
    names = {event.name for event in profiled.events()}
    assert not names & {"aten::index", "aten::index_select", "aten::take", "aten::gather"}, names
    assert "aten::div_" in names  # the batches really were made: each one scaled (on the CPU, its device here)
