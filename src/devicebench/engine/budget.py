"""Keeping a time budget while the runs go: each run is re-sized from what its steps really take (a session that still
ran over is explained by events.BudgetAccount: what took the time and what would shorten it).

A run is sized before it starts from two steps timed on a throwaway model (loop.time_first_steps); a machine that
turns out slower than those steps said (load arriving mid-run, a warm-up that lasts) would overrun by the same
factor. So the loop asks its Pacer, every few steps and before every epoch, how many steps the epoch may have: the
Pacer reads the budget's clock (engine/timing.py: the loop reads none itself), estimates a step from the steps
just taken, and shortens the epochs still to train so that the run ends by its deadline; never below
FEWEST_BUDGETED_STEPS an epoch, and a run ends early only once a warm-up and two steady epochs are measured.

    python -m pytest tests/test_budget.py -q
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from devicebench.engine.loop import FEWEST_BUDGETED_STEPS, StepTimes, steps_within
from devicebench.engine.timing import WARMUP_EPOCHS, Budget
from devicebench.results.schema import EpochRecord, RunRecord

MEASURABLE_EPOCHS = WARMUP_EPOCHS + 2  # a budget ends a run early only after a warm-up and two steady epochs
# Of a budget, the part kept for what follows the last run (tables, the JSON, the interpreter's exit): no plan
# times it, and on a loaded machine exiting torch alone takes seconds
FINISHING_SHARE = 0.05
TINY_S = 1e-9  # a step timed at 0 s (a clock's resolution) is taken as this, never divided by


def next_epoch_steps(
    seconds_left: float, times: StepTimes, epochs_done: int, epochs_left: int, steps: int, eval_most: int
) -> int:
    """Steps for the next epoch, at most `steps`, so that the `epochs_left` epochs end within `seconds_left` at
    `times`; 0: end the run here, which happens only once MEASURABLE_EPOCHS are done and not even one more epoch of
    the fewest steps fits."""
    fewest = min(FEWEST_BUDGETED_STEPS, steps)
    if epochs_done >= MEASURABLE_EPOCHS and times.run_s(1, fewest, min(fewest, eval_most)) > seconds_left:
        return 0
    return steps_within(seconds_left, times, epochs_left, steps, eval_most)


@dataclass
class Pacer:
    """Keeps one run within its deadline (seconds of `budget` spent by which it is to end), asked by the loop before
    every epoch and every few steps within one (loop.Pace). `planned`: what the run's first steps took."""

    budget: Budget
    deadline_s: float
    planned: StepTimes
    resized: list[tuple[int, int]] = field(default_factory=list)  # (epoch, steps) each time the steps went down
    slowdown: float = 1.0  # the largest of the run's measured step times over the planned one
    _epoch_started_s: float | None = None  # budget spent when the epoch under way began
    _latest: StepTimes | None = None  # what the last finished epoch took, a step, an evaluation batch, the rest
    _sized_steps: int | None = None  # the first epoch's steps: a later epoch may grow back to them, never beyond

    def epoch_steps(self, record: RunRecord, steps_done: int, steps: int, eval_steps: int) -> int:
        now = self.budget.spent()
        epochs_done = len(record.epochs)
        if steps_done == 0:  # an epoch is about to start: learn from the one before it
            if epochs_done and self._epoch_started_s is not None:
                self._latest = _epoch_times(record.epochs[-1], eval_steps, now - self._epoch_started_s)
                self._note_speed(self._latest.step_s)
            self._epoch_started_s = now
            # an epoch cut short by a slow moment (a warm-up's first steps, a burst of load) need not shorten the rest
            self._sized_steps = self._sized_steps or steps
            # the first epoch pays the first step's one-time cost, which the planned times hold; the last epoch's none
            sized = next_epoch_steps(
                self.deadline_s - now,
                self._latest or self.planned,
                epochs_done,
                record.settings.epochs - epochs_done,
                self._sized_steps,
                eval_steps,
            )
        else:  # within an epoch: its own steps so far say what a step takes now
            if steps_done < FEWEST_BUDGETED_STEPS:
                return steps
            one_time_s = self.planned.first_step_s - self.planned.step_s if epochs_done == 0 else 0.0
            step_s = max(0.0, now - self._epoch_started_s - one_time_s) / steps_done
            self._note_speed(step_s)
            # no evaluation measured yet: it is taken to be as much slower as the steps are
            known = self._latest or dataclasses.replace(
                self.planned, eval_step_s=self.planned.eval_step_s * step_s / max(self.planned.step_s, TINY_S)
            )
            times = StepTimes(first_step_s=step_s, step_s=step_s, eval_step_s=known.eval_step_s, epoch_s=known.epoch_s)
            # the epochs after this one, and the rest of this one (its steps already taken are spent)
            seconds_left = self.deadline_s - now + steps_done * step_s
            epochs_left = record.settings.epochs - epochs_done
            sized = max(steps_done, steps_within(seconds_left, times, epochs_left, steps, eval_steps))
        if 0 < sized < self._sized_steps:
            self.resized.append((epochs_done + 1, sized))
        return sized

    def _note_speed(self, step_s: float) -> None:
        self.slowdown = max(self.slowdown, step_s / max(self.planned.step_s, TINY_S))


def _epoch_times(epoch: EpochRecord, eval_steps: int, wall_s: float) -> StepTimes:
    """What `epoch` took: a training step, an evaluation batch, and the rest of its `wall_s` (the store, the
    monitor, reading the losses back)."""
    step_s = epoch.train_time_s / epoch.steps
    eval_s = epoch.eval_time_s or 0.0
    return StepTimes(
        first_step_s=step_s,
        step_s=step_s,
        eval_step_s=eval_s / eval_steps if eval_steps else 0.0,
        epoch_s=max(0.0, wall_s - epoch.train_time_s - eval_s),
    )
