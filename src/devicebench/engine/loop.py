"""Train and evaluate, epoch by epoch, timing each phase at synchronized boundaries.

The loop is the same for every device: it never asks what kind of device it runs on. Inside a timed epoch
nothing reads a value back to the host, and a step adds no tensor operation to the model's own: each step's loss
and outputs stay on the device as the step left them, and the epoch's losses and correct predictions are read once
when its clock has stopped. A NaN or infinite loss is therefore found at the end of its epoch, and the run stops
there with status `diverged` and the step it first happened at.

Each epoch also adds up the time the loop spent waiting for its next batch, on the host clock and without
synchronizing the device (a synchronize there would stall the very overlap being measured). On a CPU that wait
is time not spent computing; on a GPU the device may still be busy with queued steps meanwhile, which is why
the diagnosis (results/diagnosis.py) reads it together with the device's own utilisation.

    python -m pytest tests/test_loop.py -q
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Protocol, cast

import torch
from torch import nn

from devicebench.data.pipeline import Batches
from devicebench.devices import peak_memory_mib, reset_peak_memory
from devicebench.engine.monitor import Monitor, Usage
from devicebench.engine.timing import Stopwatch, is_warmup_epoch
from devicebench.events import Divergence, Reporter
from devicebench.results.schema import LARGEST_WHOLE_NUMBER, EpochRecord, RunRecord
from devicebench.workloads import TrainStep

PROGRESS_UPDATES_PER_EPOCH = 100  # the reporter hears about steps this often, not on every step


@dataclass
class TrainingSetup:
    """What a workload builds for one run: a fresh model, its loss and its optimizer, all on the run's device."""

    model: nn.Module
    loss_function: nn.Module | None  # None only beside a `step` of the user's own: then nothing is evaluated
    optimizer: torch.optim.Optimizer
    # outputs → classes; None when the outputs name no classes (a regression): no accuracy is counted
    predict: Callable[[torch.Tensor], torch.Tensor] | None = lambda outputs: outputs.argmax(dim=1)
    forward: Callable[[torch.Tensor], torch.Tensor] | None = None  # the model's tuned forward pass, if not the model
    step: TrainStep | None = None  # a user's own training step, instead of forward, loss, backward, step
    # tuned mode on CUDA: the eager step captured as one CUDA graph and replayed (engine/step_graph.GraphedStep)
    graphed: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def forward_pass(self) -> Callable[[torch.Tensor], torch.Tensor]:
        # `is None`, never `or`: truth-testing a compiled module calls its len(), which raises
        return self.model if self.forward is None else self.forward

    def outputs(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.forward_pass(inputs)

    def train_step(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One training step: (the loss on the device, the outputs or None when a user's step gave none). The
        outputs of a graphed step are overwritten by the next step: read them before calling again."""
        if self.graphed is not None:
            return self.graphed(inputs, labels)
        return self.eager_step(inputs, labels)

    def eager_step(self, inputs: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One training step as PyTorch runs it, op by op."""
        if self.step is not None:
            # the forward pass is the model or a module around it (TunedForward, torch.compile's, DDP's): a Module,
            # which TrainStep (workloads) names, though `forward`'s annotation only says callable
            returned = self.step(cast(nn.Module, self.forward_pass), (inputs, labels), self.optimizer)
            loss, outputs = returned if isinstance(returned, tuple) else (returned, None)
            if not isinstance(loss, (torch.Tensor, float, int)):
                raise TypeError(
                    f"train_step must return the loss (a tensor), or (loss, outputs); it returned "
                    f"{type(returned).__name__}"
                )
            return loss, outputs
        assert self.loss_function is not None  # None only beside a `step` of the user's own (the field says)
        outputs = self.outputs(inputs)
        loss = self.loss_function(outputs, labels)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        return loss, outputs


@dataclass(frozen=True)
class TrainingPlan:
    epochs: int
    max_steps: int | None = None  # cap on training steps per epoch
    max_eval_steps: int | None = None  # cap on evaluation batches per epoch
    target_accuracy: float | None = None  # test accuracy whose first reaching is timed


def capped(available: int, cap: int | None) -> int:
    return available if cap is None else min(available, cap)


# --- timing a run's first steps: for its time budget (devicebench/budget.py), or to foretell a long run ---


@dataclass(frozen=True)
class StepTimes:
    """What the first training steps and one evaluation batch took on a model built only to time them."""

    first_step_s: float  # carries one-time costs: allocation, kernel selection, starting loader workers
    step_s: float  # the step after it, close to a steady one (the first again when an epoch has one step)
    eval_step_s: float  # one evaluation batch; 0 when nothing is evaluated
    epoch_s: float = 0.0  # an epoch's time beyond its steps (the store, the monitor): known once one has run

    def run_s(self, epochs: int, steps: int, eval_steps: int) -> float:
        """Seconds `epochs` epochs of `steps` training steps and `eval_steps` evaluation batches should take."""
        return (
            self.first_step_s
            - self.step_s
            + epochs * (self.epoch_s + steps * self.step_s + eval_steps * self.eval_step_s)
        )


def time_first_steps(
    build: Callable[[], TrainingSetup], train_batches: Batches, test_batches: Batches, watch: Stopwatch
) -> StepTimes:
    """Time two training steps (fetching their batches included) and one evaluation batch of a model built for
    that alone, then let it go. The run builds its own with the same seed, so the same initial weights: these
    steps change nothing it measures."""
    setup = build()
    setup.model.train()
    seconds = []
    started = watch.now()
    for inputs, labels in train_batches.epoch(0, min(2, len(train_batches))):  # drawn to its end: no worker is left
        setup.train_step(inputs, labels)
        finished = watch.now()
        seconds.append(finished - started)  # the batch's fetch included, as an epoch's step has it
        started = finished
    evaluates = len(test_batches) > 0 and (setup.loss_function is not None or setup.predict is not None)
    eval_step_s = _evaluate(setup, test_batches, 1, watch)[3] if evaluates else 0.0
    return StepTimes(first_step_s=seconds[0], step_s=seconds[-1], eval_step_s=eval_step_s)


class Pace(Protocol):
    """Sizes a run's epochs as it goes (devicebench/budget.py's Pacer, for a time budget)."""

    def epoch_steps(self, record: RunRecord, steps_done: int, steps: int, eval_steps: int) -> int:
        """The steps the epoch under way may have: within it, at least `steps_done` and at most its `steps`; about
        to start (`steps_done` 0), at most the first epoch's, and 0 back ends the run before it. `record` holds
        every epoch finished so far."""


def train(
    record: RunRecord,
    build: Callable[[], TrainingSetup],
    train_batches: Batches,
    test_batches: Batches,
    plan: TrainingPlan,
    watch: Stopwatch,
    reporter: Reporter | None = None,
    pace: Pace | None = None,
) -> nn.Module:
    """Build a model and train it per `plan`, appending each finished epoch to `record` as it finishes.

    Because epochs land in `record` one by one, an interruption keeps every finished epoch. Returns the trained
    model (on its device), for a checkpoint. `pace` (a time budget's) may shorten epochs as they go and end the run
    before its last: `record`'s settings then hold the epochs that ran, and each epoch its own steps.
    """
    reporter = reporter or Reporter()
    reset_peak_memory(watch.device)
    with Monitor(watch.device) as monitor:
        started = watch.now()
        setup = build()  # inside end-to-end time: the seeds timed model creation too
        record.model_build_s = watch.now() - started
        steps = capped(len(train_batches), plan.max_steps)
        evaluation_steps = capped(len(test_batches), plan.max_eval_steps)
        for epoch in range(1, plan.epochs + 1):
            if pace is not None:
                steps = pace.epoch_steps(record, 0, steps, evaluation_steps)
                if steps == 0:  # the budget ends the run here: its record says how many epochs ran
                    record.settings = dataclasses.replace(record.settings, epochs=len(record.epochs))
                    break
            reporter.epoch_started(epoch, steps)  # processes training together wait here for each other: nothing
            # slow may come between it and the clock's start in _train_epoch
            monitor.window()  # closes the window of model building or the last evaluation: not this epoch's
            steps_for = None if pace is None else partial(pace.epoch_steps, record, eval_steps=evaluation_steps)
            step_losses, train_accuracy, (train_time_s, thread_cpu_s), wait_s = _train_epoch(
                setup, train_batches, epoch, steps, watch, reporter, steps_for
            )
            usage = monitor.window()  # exactly this epoch's training, outside its timed region
            steps = len(step_losses)  # a pace may have ended the epoch early: the epochs after it are as long
            entry, divergence = _trained_epoch(
                record, epoch, step_losses, train_batches, train_accuracy, train_time_s, wait_s, usage, reporter
            )
            entry.train_thread_cpu_s = thread_cpu_s
            evaluation_steps = min(evaluation_steps, steps) if pace is not None else evaluation_steps
            if divergence is None:  # evaluating a diverged model would only time arithmetic on NaNs
                _evaluate_into(entry, setup, test_batches, evaluation_steps, watch)
            record.epochs.append(entry)
            reporter.epoch_finished(record, entry)
            if divergence is not None:
                record.status, record.diverged_at_step, record.error = "diverged", divergence.step, divergence.reason
                break
            note_time_to_target(record, plan.target_accuracy, watch.now() - started)
        record.end_to_end_s = watch.now() - started
        record.peak_device_memory_mib = peak_memory_mib(watch.device)
    record.energy_j = total_energy_j(record)
    return setup.model


def _trained_epoch(
    record: RunRecord,
    epoch: int,
    step_losses: torch.Tensor,
    batches: Batches,
    train_accuracy: float | None,
    train_time_s: float,
    wait_s: float,
    usage: Usage,
    reporter: Reporter,
) -> tuple[EpochRecord, Divergence | None]:
    """The record of an epoch just trained (its evaluation still to come), and the step its loss diverged at, if
    it did, as the reporter takes it."""
    steps = len(step_losses)
    batch_sizes = batches.batch_sizes(steps)  # every epoch draws the same sizes, in a new order
    samples = sum(batch_sizes)
    losses = step_losses.tolist()  # the epoch's one read-back, after its clock stopped
    divergence = reporter.divergence(_first_divergence(losses, epoch, steps))
    entry = timed_epoch(
        record,
        epoch,
        steps,
        samples,
        train_time_s,
        usage,
        train_loss=sum(loss * size for loss, size in zip(losses, batch_sizes)) / samples,
        train_accuracy=train_accuracy,
        input_wait_s=wait_s,
    )
    return entry, divergence


def _evaluate_into(entry: EpochRecord, setup: TrainingSetup, batches: Batches, steps: int, watch: Stopwatch) -> None:
    """`entry`'s test loss, test accuracy, samples evaluated and seconds, over the first `steps` test batches; left
    empty when there is nothing to evaluate (no steps, or neither a loss nor classes)."""
    if steps > 0 and (setup.loss_function is not None or setup.predict is not None):
        entry.test_loss, entry.test_accuracy, entry.eval_samples, entry.eval_time_s = _evaluate(
            setup, batches, steps, watch
        )


# Shared with the trainers of models that are not torch models (engine/boosting.py), so every epoch reads the same.


def timed_epoch(
    record: RunRecord,
    epoch: int,
    steps: int,
    samples: int,
    train_time_s: float,
    usage: Usage,
    *,
    train_loss: float,
    train_accuracy: float | None,
    input_wait_s: float | None = None,
) -> EpochRecord:
    """The record of a timed epoch, with what the monitor saw over it (whose device note lands in `record`)."""
    record.monitor_note = usage.device_note
    return EpochRecord(
        epoch=epoch,
        phase="warmup" if is_warmup_epoch(epoch) else "steady",
        steps=steps,
        samples=samples,
        train_time_s=train_time_s,
        samples_per_s=samples / train_time_s,
        step_time_ms=train_time_s / steps * 1000,
        train_loss=train_loss,
        train_accuracy=train_accuracy,
        input_wait_s=input_wait_s,
        process_cpu_percent=usage.process_cpu_percent,
        device_utilization_percent=usage.device_utilization_percent,
        device_power_mean_w=usage.device_power_mean_w,
        device_energy_j=usage.device_energy_j,
    )


def note_time_to_target(record: RunRecord, target: float | None, elapsed_s: float) -> None:
    """When the latest epoch first reaches `target` test accuracy: training time so far, and `elapsed_s` since
    model creation (evaluation included)."""
    latest = record.epochs[-1]
    reached = target is not None and latest.test_accuracy is not None and latest.test_accuracy >= target
    if reached and record.time_to_target_train_s is None:
        record.time_to_target_train_s = sum(epoch.train_time_s for epoch in record.epochs)
        record.time_to_target_wall_s = elapsed_s


def measurable(loss: float) -> bool:
    """Whether a loss is a figure a run can hold: finite and no larger than any figure stored (a loss of 1e29, from
    a model whose batch-2 BatchNorm statistics blew up, is as diverged as an infinite one, and no store can sum it)."""
    return math.isfinite(loss) and abs(loss) <= LARGEST_WHOLE_NUMBER


def _first_divergence(losses: list[float], epoch: int, steps: int) -> Divergence | None:
    """The first of an epoch's step losses that is NaN, infinite or beyond any stored figure, if any is."""
    first_bad = next((index for index, loss in enumerate(losses) if not measurable(loss)), None)
    return None if first_bad is None else Divergence((epoch - 1) * steps + first_bad + 1, epoch, losses[first_bad])


def total_energy_j(record: RunRecord) -> float | None:
    """Energy over every epoch's training, or None when any epoch's is unknown."""
    energies = [epoch.device_energy_j for epoch in record.epochs]
    known = [energy for energy in energies if energy is not None]
    return sum(known) if energies and len(known) == len(energies) else None


def _train_epoch(
    setup: TrainingSetup,
    batches: Batches,
    epoch: int,
    steps: int,
    watch: Stopwatch,
    reporter: Reporter,
    steps_for: Callable[..., int] | None = None,
) -> tuple[torch.Tensor, float | None, tuple[float, float], float]:
    """One epoch of `steps` training steps: (per-step losses on the device, one per step taken, the share of correct
    predictions or None when they cannot be told, (seconds, the loop's thread's CPU seconds over them), seconds of
    those spent waiting for batches).
    `steps_for(steps_done, steps)`, asked as often as the reporter hears of steps, may end the epoch sooner
    (Pace.epoch_steps).

    A step adds no tensor operation to the model's own (tests/test_dispatches.py counts them): each step's loss and
    outputs are kept as they are and read after the clock stops (`_EpochAccuracy` says when outputs are counted
    sooner). On a GPU whose small model waits on the host, every operation is ~20 us of launch the step pays."""
    setup.model.train()
    losses: list[torch.Tensor | float] = []
    accuracy = _EpochAccuracy(setup.predict)
    report_every = max(1, steps // PROGRESS_UPDATES_PER_EPOCH)
    waited = 0.0
    start = watch.now()
    start_cpu = watch.thread_cpu_now()  # at the same boundary, after the synchronized reading
    batch_stream = batches.epoch(epoch, steps)
    done = 0
    while done < steps:
        asked = watch.host_now()
        images, labels = next(batch_stream)
        waited += watch.host_now() - asked
        loss, outputs = setup.train_step(images, labels)
        losses.append(_kept(loss, losses[-1] if losses else None, "loss"))
        accuracy.add(outputs, labels)
        done += 1
        if done % report_every == 0:
            reporter.steps_finished(done)
            if steps_for is not None:  # reads the host's clock without synchronizing: bookkeeping only
                steps = steps_for(done, steps)
    seconds = watch.now() - start
    cpu_s = watch.thread_cpu_now() - start_cpu
    batch_stream.close()  # an epoch ended early leaves no batch in flight
    return _stacked(losses, watch.device), accuracy.share(), (seconds, cpu_s), waited


KEPT_OUTPUTS_BYTES = 64 * 2**20  # the most of an epoch's outputs kept at once for its accuracy


def _kept(value: torch.Tensor | float, previous: torch.Tensor | float | None, what: str) -> torch.Tensor | float:
    """A step's loss or outputs, kept for reading after the clock stops without an operation of its own: `.data` is
    the tensor without its autograd history, made without a dispatch (`detach()` is one). The step must hand back
    tensors of its own: one in the memory of the step before's (a captured step's static output, rewritten by every
    replay) would make every kept value the last one, so it is refused. A kept tensor's memory is never handed out
    again, so only such a buffer can share it."""
    if not isinstance(value, torch.Tensor):
        return value
    if isinstance(previous, torch.Tensor) and previous.data_ptr() == value.data_ptr():
        raise ValueError(
            f"the training step returned its {what} in the same memory as the step before's; return a tensor of "
            f"each step's own (clone a static buffer)"
        )
    return value.data


def _stacked(losses: list[torch.Tensor | float], device: torch.device) -> torch.Tensor:
    """An epoch's step losses as one tensor, by a few operations for them all (after the clock stopped)."""
    if not losses:
        return torch.zeros(0, device=device)
    tensors = [loss if isinstance(loss, torch.Tensor) else torch.tensor(loss, device=device) for loss in losses]
    return torch.stack(tensors).float().reshape(len(losses))


class _EpochAccuracy:
    """Correct predictions over an epoch. Each step's outputs are kept as they are, and predicted from and compared
    in one go when the epoch ends, or sooner when those kept pass KEPT_OUTPUTS_BYTES: every few steps for a model
    with ImageNet's thousand classes, every step for a language model's vocabulary, whose steps are far longer than
    those few operations. The share is what counting step by step gives: correct predictions over all made."""

    def __init__(self, predict: Callable[[torch.Tensor], torch.Tensor] | None) -> None:
        self.predict = predict
        self.counted = predict is not None  # and, with a user's own step, only if it hands back its outputs
        self.kept: list[tuple[torch.Tensor, torch.Tensor]] = []  # (outputs, labels) of steps not yet counted
        self.kept_bytes = 0
        self.correct: torch.Tensor | int = 0  # on the device once anything is counted
        self.predictions = 0  # a sample's label may be a sequence (a class at each position): each is a prediction

    def add(self, outputs: torch.Tensor | None, labels: torch.Tensor) -> None:
        if not self.counted:
            return
        if outputs is None:
            self.counted = False
            return
        previous = self.kept[-1][0] if self.kept else None
        self.kept.append((cast(torch.Tensor, _kept(outputs, previous, "outputs")), labels))
        self.kept_bytes += outputs.nbytes
        self.predictions += labels.numel()  # its shape: known on the host, nothing is read back
        if self.kept_bytes > KEPT_OUTPUTS_BYTES:
            self._count_kept()

    def share(self) -> float | None:
        if not self.counted:
            return None
        self._count_kept()
        return int(self.correct) / max(self.predictions, 1)

    def _count_kept(self) -> None:
        """Adds the kept steps' correct predictions to the count, and lets their outputs go."""
        assert self.predict is not None  # nothing is kept without it
        if len({(outputs.shape[1:], labels.shape[1:]) for outputs, labels in self.kept}) == 1:
            pairs = [(torch.cat([outputs for outputs, _ in self.kept]), torch.cat([labels for _, labels in self.kept]))]
        else:  # sequences of different lengths from step to step: compared step by step
            pairs = self.kept
        for outputs, labels in pairs:
            self.correct = self.correct + (self.predict(outputs) == labels).sum()
        self.kept, self.kept_bytes = [], 0


def _evaluate(
    setup: TrainingSetup, batches: Batches, steps: int, watch: Stopwatch
) -> tuple[float | None, float | None, int, float]:
    """Test loss, test accuracy (each None when there is no loss function, or no classes), samples evaluated and
    seconds taken, over the first `steps` test batches."""
    model, loss_function = setup.model, setup.loss_function
    model.eval()
    loss_sum = torch.zeros((), device=watch.device)
    correct = torch.zeros((), dtype=torch.int64, device=watch.device)
    predictions = 0  # positions predicted: samples, or samples times their sequence's positions
    start = watch.now()
    with torch.inference_mode():
        for images, labels in batches.epoch(0, steps):
            outputs = setup.outputs(images)
            if loss_function is not None:
                loss_sum += loss_function(outputs, labels) * len(labels)
            if setup.predict is not None:
                correct += (setup.predict(outputs) == labels).sum()
                predictions += labels.numel()
    seconds = watch.now() - start
    samples = sum(batches.batch_sizes(steps))
    test_loss = float(loss_sum) / samples if loss_function is not None else None
    if test_loss is not None and not measurable(test_loss):
        test_loss = math.nan  # as a NaN loss is: stored and written as null (schema.finite_or_none)
    test_accuracy = int(correct) / max(predictions, 1) if setup.predict is not None else None
    return test_loss, test_accuracy, samples, seconds
