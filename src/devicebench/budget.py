"""The time budget: a session's seconds shared among its runs, each run sized to its share, and kept to it as it goes.

`--budget` (or the quick suite's own, config.py) gives the seconds; this module spends them. Before a job runs, a
reference model too large for its share is made smaller (fit_to_share: the batch halved, then the sequence). Before
a run trains, its epochs get the steps that fit its share (sized_plan), from two steps and an evaluation batch timed
on a throwaway model (loop.time_first_steps). While it trains, a Pacer re-sizes its epochs from what its steps really
take: a machine that turns out slower than those first steps said (load arriving mid-run, a warm-up that lasts) would
otherwise overrun by the same factor. A session that still ran over is explained by events.BudgetAccount: what took
the time and what would shorten it. The budget's clock is engine/timing.py's Budget: the only clocks are there.

    python -m pytest tests/test_budget.py -q
"""

from __future__ import annotations

import bisect
import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from devicebench.data.pipeline import Batches, Data, batches_for
from devicebench.engine.distributed import world_size
from devicebench.engine.flops import training_flops_per_sample
from devicebench.engine.loop import StepTimes, TrainingPlan, TrainingSetup, capped, time_first_steps
from devicebench.engine.timing import WARMUP_EPOCHS, Budget, Stopwatch
from devicebench.events import BudgetAccount, RunReporter, RunSpent
from devicebench.results.schema import EpochRecord, RunRecord

if TYPE_CHECKING:  # a job is only read here: the budget sits above the plan and never imports it to run
    from devicebench.planning import Job, Plan

FEWEST_BUDGETED_STEPS = 3  # a budget never cuts an epoch shorter: with fewer, one slow step would be the epoch
MEASURABLE_EPOCHS = WARMUP_EPOCHS + 2  # a budget ends a run early only after a warm-up and two steady epochs
# Of a budget, the part kept for what follows the last run (tables, the JSON, the interpreter's exit): no plan
# times it, and on a loaded machine exiting torch alone takes seconds
FINISHING_SHARE = 0.05
TINY_S = 1e-9  # a step timed at 0 s (a clock's resolution) is taken as this, never divided by
ESTIMATED_FROM_STEPS = 200  # a run of more steps than this (all epochs) is timed first, and its length foretold
# A time budget's sizes (fit_to_share). Before a device has run anything, a step's FLOPs are taken at this speed,
# that of a slow laptop's two cores, to decide whether to time a few steps of the smallest size first: only a
# trigger for that measurement, never a figure shown. The smallest batch is PROBE_BATCH (BatchNorm needs two
# samples), the shortest sequence SHORTEST_BUDGETED_LENGTH tokens (a workload's `budget_lengths`).
ASSUMED_SLOW_FLOP_S = 50e9
PROBE_BATCH = 2
SHORTEST_BUDGETED_LENGTH = 16
PROBE_SPAN = 8  # the second size timed does at most this many times the smallest one's FLOPs a step


# --- the steps that fit: an epoch's length from the seconds it may take -----------------------------------------------


def steps_within(seconds: float, times: StepTimes, epochs: int, most: int, eval_most: int) -> int:
    """The most training steps an epoch may have for `epochs` epochs, each evaluating up to as many batches as it
    trains (at most `eval_most`), to end within `seconds`: at least FEWEST_BUDGETED_STEPS (a run that cannot fit
    still measures something), at most `most` (the epoch's length, or its cap)."""
    fewest = min(FEWEST_BUDGETED_STEPS, most)
    # the time grows with the steps: a bisection, since the loop asks every few steps of an epoch of thousands
    fitting = bisect.bisect_right(
        range(fewest, most + 1), seconds, key=lambda steps: times.run_s(epochs, steps, min(steps, eval_most))
    )
    return max(fewest, fewest + fitting - 1)


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


# --- a session's shares: how many seconds each run may take -----------------------------------------------------------


@dataclass
class BudgetShares:
    """A session's time budget, shared among its runs as each is sized: every run is sure of its fewest steps
    (FEWEST_BUDGETED_STEPS an epoch), and what is left beyond the fewest steps of every run still to come is shared
    equally. A run not yet timed has its fewest steps estimated from its FLOPs at the speed the runs so far reached
    on its device (none: a run of its own trainer, or before any was timed there), so that a heavy model late in the
    suite still fits when the light ones before it are sized. Each run then keeps to its share as it goes (a Pacer),
    and what each took is kept for the account of a session that ran over."""

    budget: Budget
    runs: list[Job]  # one per run still to come, the one being sized first
    speeds: dict[str, list[float]] = field(default_factory=dict)  # training FLOP/s reached, by device
    spent: list[RunSpent] = field(default_factory=list)  # the runs finished, in order
    pacer: Pacer | None = None  # the run under way's, once sized
    estimates: dict[int, StepTimes] = field(default_factory=dict)  # by id(job): a job fit_to_share made smaller
    # how many times its share a job's fewest steps may take before fit_to_share makes its batch smaller: 1 for
    # `run`; more where the batch matters more than the budget (the estimate's CPU baseline, of the batch estimated)
    batch_slack: float = 1.0
    _run_started_s: float = 0.0  # budget spent when the run under way began (the one before it ended)
    _share_s: float = 0.0  # the run under way's share, counted from its sizing
    _sized_s: float = 0.0  # budget spent when the run under way was sized

    def __post_init__(self) -> None:
        self._run_started_s = self.budget.spent()

    @classmethod
    def for_plan(cls, plan: Plan, spent_before_s: float = 0.0) -> BudgetShares | None:
        """`plan`'s time budget shared among its runs, `spent_before_s` of it already spent (a command's start-up);
        None without a budget, or when several processes train: they would each size their epochs differently, and
        must agree on every step."""
        if plan.budget_s is None or world_size() > 1:
            return None
        return cls(
            Budget(plan.budget_s, spent_before=spent_before_s),
            [job for job in plan.jobs for _ in range(job.repeats)],
            batch_slack=plan.batch_slack,
        )

    def seconds_for(self, job: Job, times: StepTimes, eval_most: int, flops_per_step: float | None) -> float:
        """Seconds the run of `job` now being sized may take, from its own first steps `times` (of
        `flops_per_step` each: the batch that runs, which --batch-size auto may have grown)."""
        epochs = min(job.training.epochs, MEASURABLE_EPOCHS)  # the pacer may end a run after these
        fewest = times.run_s(epochs, FEWEST_BUDGETED_STEPS, min(FEWEST_BUDGETED_STEPS, eval_most))
        if flops_per_step and times.step_s > 0:
            self.speeds.setdefault(str(job.device), []).append(flops_per_step / times.step_s)
        return self.share_s(fewest)

    def share_s(self, fewest_s: float) -> float:
        """Seconds the run now being sized may take, when its fewest steps take `fewest_s`: those, and an equal
        part of what the fewest steps of every run still to come leave of the budget."""
        later = sum(self._fewest_s(run) for run in self.runs[1:])
        left = self.budget.left() - FINISHING_SHARE * self.budget.seconds  # what follows the last run needs time too
        return fewest_s + max(0.0, left - fewest_s - later) / len(self.runs)

    def even_share_s(self) -> float:
        """What is left of the budget, shared equally among the runs still to come (the one being sized first)."""
        return max(0.0, self.budget.left() - FINISHING_SHARE * self.budget.seconds) / len(self.runs)

    def device_speed(self, device: torch.device) -> float | None:
        """Training FLOP/s the runs so far reached on `device`; None before any was timed there."""
        speeds = self.speeds.get(str(device))
        return statistics.median(speeds) if speeds else None

    def pace(self, times: StepTimes, share_s: float) -> Pacer:
        """The run under way's Pacer, which keeps it within `share_s` from now."""
        self._share_s, self._sized_s = share_s, self.budget.spent()
        self.pacer = Pacer(self.budget, self._sized_s + share_s, times)
        return self.pacer

    def run_done(self, record: RunRecord, elsewhere: bool = False) -> None:
        """Account for `record`'s run; `elsewhere`: it trained in a process of its own, which sized its epochs."""
        now = self.budget.spent()
        pacer, self.pacer = self.pacer, None
        steady = [epoch.samples_per_s for epoch in record.steady_epochs]
        if record.flops_per_sample and steady:  # what this device really did, for the runs to come on it
            self.speeds.setdefault(record.device, []).append(record.flops_per_sample * statistics.median(steady))
        evaluation_s = sum(epoch.eval_time_s or 0.0 for epoch in record.epochs)
        started_s, self._run_started_s = self._run_started_s, now
        spent_s = now - started_s
        if pacer is None:  # not sized here: a trainer of its own, a run that failed before its sizing, or elsewhere
            label = f"{record.workload} on {record.device}"
            self.spent.append(RunSpent(label, spent_s, None, evaluation_s=evaluation_s, elsewhere=elsewhere))
        else:
            settings = record.settings
            at_fewest = record.epochs and all(epoch.steps <= FEWEST_BUDGETED_STEPS for epoch in record.epochs)
            self.spent.append(
                RunSpent(
                    f"{record.workload} on {record.device}",
                    spent_s,
                    self._share_s,
                    set_up_s=self._sized_s - started_s,
                    evaluation_s=evaluation_s,
                    evaluation_share_s=pacer.planned.eval_step_s * settings.epochs * (settings.max_eval_steps or 0),
                    fewest_epochs=len(record.epochs) if at_fewest else None,
                    slowdown=pacer.slowdown,
                )
            )
        self.runs.pop(0)

    def account(self, workloads: int) -> BudgetAccount:
        return BudgetAccount(
            self.budget.seconds,
            self.budget.spent(),
            self.budget.spent_before,
            tuple(self.spent),
            workloads,
            FEWEST_BUDGETED_STEPS,
        )

    def _fewest_s(self, job: Job) -> float:
        flops, speed = _flops_per_step(job), self.device_speed(job.device)
        if not flops or not speed:
            return 0.0
        return min(job.training.epochs, MEASURABLE_EPOCHS) * FEWEST_BUDGETED_STEPS * flops / speed


def _flops_per_step(job: Job) -> float | None:
    """FLOPs of one training step of `job` (engine/flops.py, counted once per process); None when uncountable."""
    per_sample = training_flops_per_sample(job.workload, job.hyperparameters)
    return None if per_sample is None else per_sample * job.batch_size


# --- before a job runs: sizes small enough for its share --------------------------------------------------------------


def fit_to_share(
    job: Job, shares: BudgetShares, probe: Callable[[Job], StepTimes | None], reporter: RunReporter
) -> Job:
    """`job`, or a smaller one whose fewest steps end within its share of a time budget: a reference model on a
    laptop (a step of ResNet-50 at batch 256 takes half a minute on two cores, one of GPT-2 at 12 x 1,024 tokens
    longer). The batch is halved first, down to PROBE_BATCH; then the sequence (the workload's `budget_lengths`),
    down to SHORTEST_BUDGETED_LENGTH tokens. Whether the planned sizes fit is told from a step's FLOPs at the speed
    reached on this device so far; where that says they may not, the smallest sizes and a few times larger ones are
    trained for two steps each, and a step of any other size is taken to cost a fixed part and a part per FLOP
    through those two (`_step_times_model`; a larger size runs no slower per FLOP: the sizes kept are not too
    large). The share is an equal part of what is left, since a run not yet timed on a device counts for nothing in
    the budget's shares. The smaller job's runs keep its sizes, in their settings (a shorter sequence
    among their overrides, so they are never pooled with full-length runs), said on the screen; `shares.batch_slack`
    lets the fewest steps take that many times the share before any size is made smaller; the step times
    estimated for it size its epochs (`shares.estimates`), without timing its first steps again. `probe` times a
    job's first steps (time_probe), None when it has no data. A run of a trainer of its own, or whose batch size
    --batch-size auto grows, keeps its sizes."""
    if job.sized or job.workload.trainer is not None or job.batch_size_auto:
        return job
    planned_flops = _flops_per_step(job)
    candidates = _smaller_jobs(job)
    if not planned_flops or len(candidates) == 1:
        return job
    share_s = shares.even_share_s()
    allowed_s = share_s * shares.batch_slack  # what the fewest steps may take before the batch is halved
    step_s = planned_flops / (shares.device_speed(job.device) or ASSUMED_SLOW_FLOP_S)
    if _fewest_run_s(job, StepTimes(step_s, step_s, step_s / 3)) <= allowed_s:
        return job
    smallest = candidates[-1]
    smallest_flops = _flops_per_step(smallest) or planned_flops
    # a second size, a few times the smallest's work but far below the planned one's, tells a step's fixed cost
    # (the optimizer's, a kernel launch's) from its cost per FLOP: at the smallest sizes the fixed cost is most
    # of a step, and a step taken to grow in proportion to its FLOPs alone would keep far too small a size
    larger = next(
        (
            candidate
            for candidate in candidates[1:-1]
            if (_flops_per_step(candidate) or 0) <= PROBE_SPAN * smallest_flops
        ),
        None,
    )
    timed = []
    for probe_job in (smallest, larger) if larger is not None else (smallest,):
        times = probe(probe_job)
        if times is None:
            return job  # no data: its runs fail with the problem, at whatever size
        timed.append((_flops_per_step(probe_job) or planned_flops, times))
    at = _step_times_model(timed)
    chosen = next((candidate for candidate in candidates if _fewest_run_s(job, at(candidate)) <= allowed_s), smallest)
    if chosen is job:
        return job
    shares.estimates[id(chosen)] = at(chosen)
    shares.runs = [chosen if run is job else run for run in shares.runs]
    changed = {
        name: (job.hyperparameters[name], chosen.hyperparameters[name])
        for name in ("batch_size", *job.workload.budget_lengths)
        if chosen.hyperparameters[name] != job.hyperparameters[name]
    }
    reporter.run_shrunk(job.workload.name, str(job.device), changed, share_s)
    return chosen


def time_probe(job: Job, dataset: Data, build: Callable[[], TrainingSetup]) -> StepTimes:
    """Two training steps and an evaluation batch of `job` on `dataset`, on a model `build` makes for them alone."""
    train_batches, test_batches = batches_for(
        dataset,
        job.workload.image_shape,
        job.workload.build_preprocessing(job.hyperparameters),
        job.batch_size,
        job.device,
        workers=0,
        seed=job.seed,
        device_augment=job.mode == "tuned",  # as the run will make its batches (runner._batches_of)
    )
    try:
        return time_first_steps(build, train_batches, test_batches, Stopwatch(job.device))
    finally:
        train_batches.close()
        test_batches.close()


def _step_times_model(timed: list[tuple[float, StepTimes]]) -> Callable[[Job], StepTimes]:
    """What a step of any job is estimated to take from the steps timed at one or two sizes ((FLOPs a step, times)
    each): a fixed cost plus a cost per FLOP through two points, never below the larger one's rate where the line
    would fall below it (noise); in proportion to its FLOPs from one. An evaluation batch, which runs no optimizer,
    in proportion to its FLOPs from the larger size's."""
    flops_big, big = timed[-1]
    per_flop, fixed = big.step_s / flops_big, 0.0
    if len(timed) == 2:
        flops_small, small = timed[0]
        slope = (big.step_s - small.step_s) / (flops_big - flops_small) if flops_big > flops_small else 0.0
        if 0 < slope < per_flop:  # a fixed cost that is positive
            per_flop, fixed = slope, big.step_s - slope * flops_big

    def at(candidate: Job) -> StepTimes:
        flops = _flops_per_step(candidate) or flops_big
        step_s = fixed + per_flop * flops
        return StepTimes(big.first_step_s - big.step_s + step_s, step_s, big.eval_step_s * flops / flops_big)

    return at


def _smaller_jobs(job: Job) -> list[Job]:
    """`job`, then each smaller one a budget may train instead, in the order it prefers them: the batch halved
    down to PROBE_BATCH, then, at that batch, the sequence halved down to SHORTEST_BUDGETED_LENGTH tokens."""
    jobs, batch = [job], job.batch_size
    while batch > PROBE_BATCH:
        batch = max(batch // 2, PROBE_BATCH)
        jobs.append(_resized(job, batch, 1))
    lengths = job.workload.budget_lengths
    halvings = 1
    while any(job.hyperparameters[name] >> halvings >= SHORTEST_BUDGETED_LENGTH for name in lengths):
        jobs.append(_resized(job, batch, 2**halvings))
        halvings += 1
    return jobs


def _resized(job: Job, batch: int, shorter: int) -> Job:
    """`job` at `batch`, its `budget_lengths` divided by `shorter` (none below SHORTEST_BUDGETED_LENGTH)."""
    lengths = {
        name: max(job.hyperparameters[name] // shorter, min(job.hyperparameters[name], SHORTEST_BUDGETED_LENGTH))
        for name in job.workload.budget_lengths
        if shorter > 1
    }
    hyperparameters = {**job.hyperparameters, "batch_size": batch, **lengths}
    shape = tuple(sorted(job.workload.data_request(hyperparameters).items()))
    return dataclasses.replace(
        job,
        hyperparameters=hyperparameters,
        overrides={**job.overrides, **lengths},
        data=dataclasses.replace(job.data, shape=shape),
    )


def _fewest_run_s(job: Job, times: StepTimes) -> float:
    """What a budgeted run of `job` takes at least, at `times`: its steps timed first, then the fewest epochs a
    budget keeps (a warm-up and two steady ones of FEWEST_BUDGETED_STEPS steps, evaluation included)."""
    eval_most = job.training.max_eval_steps or FEWEST_BUDGETED_STEPS
    return (
        times.first_step_s
        + times.step_s
        + times.eval_step_s
        + times.run_s(
            min(job.training.epochs, MEASURABLE_EPOCHS), FEWEST_BUDGETED_STEPS, min(FEWEST_BUDGETED_STEPS, eval_most)
        )
    )


# --- before a run trains: its epochs sized to its share ---------------------------------------------------------------


def sized_plan(
    job: Job,
    record: RunRecord,
    build: Callable[[], TrainingSetup],
    batches: tuple[Batches, Batches],
    reporter: RunReporter,
    shares: BudgetShares | None,
) -> TrainingPlan:
    """`job`'s plan, its epochs sized to the run's share of a time budget (their steps recorded in the settings),
    from two steps and an evaluation batch timed first (a batch the budget shrank: the times fit_to_share estimated
    from a tiny batch's); a long run is timed the same way, to say how long it takes."""
    plan, (train_batches, test_batches) = job.training, batches
    steps, eval_steps = capped(len(train_batches), plan.max_steps), capped(len(test_batches), plan.max_eval_steps)
    if world_size() > 1 or (shares is None and plan.epochs * steps <= ESTIMATED_FROM_STEPS):
        return plan  # several processes would each time their own steps, and must agree on every step
    estimated = None if shares is None else shares.estimates.get(id(job))
    times = estimated or time_first_steps(build, train_batches, test_batches, Stopwatch(job.device))
    if shares is None:
        reporter.run_estimated(record, times.run_s(plan.epochs, steps, eval_steps))
        return plan
    flops = (record.flops_per_sample or 0) * record.settings.batch_size
    share_s = shares.seconds_for(job, times, eval_steps, flops)
    steps = steps_within(share_s, times, plan.epochs, steps, eval_steps)
    shares.pace(times, share_s)
    eval_steps = min(steps, eval_steps)
    plan = dataclasses.replace(plan, max_steps=steps, max_eval_steps=eval_steps)
    record.settings = dataclasses.replace(record.settings, max_steps=steps, max_eval_steps=eval_steps)
    # the run ends by its share, however many epochs it was planned: its pacer sees to it
    reporter.run_estimated(record, min(times.run_s(plan.epochs, steps, eval_steps), share_s))
    fitting = sum(times.run_s(epochs, steps, eval_steps) <= share_s for epochs in range(1, plan.epochs + 1))
    reporter.run_budgeted(record, min(plan.epochs, max(fitting, MEASURABLE_EPOCHS)), share_s)
    return plan


def note_pacing(record: RunRecord, job: Job, pacer: Pacer, reporter: RunReporter) -> None:
    """A run its budget shortened as it went: its settings say the longest epoch that ran, and the screen how."""
    ran, settings = [epoch.steps for epoch in record.epochs], record.settings
    if ran and (pacer.resized or settings.epochs < job.training.epochs):
        assert settings.max_steps is not None  # sized_plan set the steps it sized when it made the pacer
        reporter.run_paced(record, job.training.epochs, settings.max_steps, pacer.slowdown)
        record.settings = dataclasses.replace(
            settings, max_steps=max(ran), max_eval_steps=min(settings.max_eval_steps or 0, max(ran))
        )


# --- while a run trains: its epochs re-sized from what its steps really take ------------------------------------------


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
            # the loop asks before every epoch (steps_done 0) before it asks within one: its start is known
            assert self._epoch_started_s is not None
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
        if self._sized_steps is not None and 0 < sized < self._sized_steps:  # None only before the first epoch
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
