"""What a run tells those who watch it: the screen, the database, TensorBoard, the processes of a distributed run.

The runner and the training loop call a `Reporter` (a `RunReporter` hears a session's events too); the watchers
implement it. It sits at the bottom of the package, beside the result schema, so that a watcher never imports the
runner it watches.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from devicebench.results.schema import EpochRecord, Result, RunRecord

if TYPE_CHECKING:  # for annotations only
    from devicebench.data import Dataset
    from devicebench.workloads import Workload


@dataclass(frozen=True)
class Divergence:
    """Where a run's training loss first became NaN or infinite: the run stops there, status `diverged`."""

    step: int  # 1-based, counted over the whole run
    epoch: int
    loss: float
    process: str = ""  # which of several processes training together saw it ("rank 1"); "" for a lone process

    @property
    def reason(self) -> str:
        where = f"{self.process}: " if self.process else ""
        return f"{where}loss became {self.loss} at step {self.step} (epoch {self.epoch})"


# --- what a budgeted session spent, and why it ran over (the runner's account, told when the session ends) ---

SLOWER_WORTH_SAYING = 1.5  # a run whose steps took this many times what its first steps said is said to be slowed


@dataclass(frozen=True)
class RunSpent:
    """What one run of a budgeted session took against the share it was given."""

    label: str  # "catdog-deep on cpu"
    spent_s: float  # from the end of the run before it: its data, set-up, training, evaluation, saving
    share_s: float | None  # what it was given from its sizing on; None: not sized (a trainer of its own)
    set_up_s: float = 0.0  # before its sizing: its data, --batch-size auto, tuning, its first steps timed
    evaluation_s: float = 0.0
    evaluation_share_s: float = 0.0  # what its evaluation was planned to take
    fewest_epochs: int | None = None  # the epochs it ran when every one had the fewest steps, else None
    slowdown: float = 1.0  # its steps took up to this many times what its first steps said
    elsewhere: bool = False  # it trained in a process of its own, whose budget sized its epochs (share_s None here)

    @property
    def over_s(self) -> float:
        return self.spent_s - self.set_up_s - (self.share_s if self.share_s is not None else 0.0)


@dataclass(frozen=True)
class BudgetAccount:
    """A budgeted session's seconds: its start-up, each run, and what came after the last."""

    budget_s: float
    spent_s: float
    start_up_s: float
    runs: tuple[RunSpent, ...]
    workloads: int  # how many workloads ran: naming fewer is a lever only when there were several
    fewest_steps: int  # an epoch's fewest steps under a budget (budget.py's FEWEST_BUDGETED_STEPS)

    @property
    def over(self) -> bool:
        return self.spent_s > self.budget_s

    def overrun(self) -> tuple[str, str]:
        """(what took the time, what would shorten it), for a session over its budget: the start-up, the runs no
        budget sizes, the runs already at their fewest epochs, or the run furthest over its share, whichever took
        the most."""
        fewer = " or name fewer workloads" if self.workloads > 1 else ""
        larger = f"a larger --budget{fewer} fits it"
        if not self.runs or self.start_up_s > self.budget_s / 2:
            return f"starting took {_seconds(self.start_up_s)} before any run", larger.capitalize()
        unsized = _longest_first([run for run in self.runs if run.share_s is None])
        fewest = _longest_first([run for run in self.runs if run.fewest_epochs is not None])
        sized = [run for run in self.runs if run.share_s is not None and run.fewest_epochs is None]
        worst = max(sized, key=lambda run: run.over_s, default=None)
        taken = {
            name: seconds
            for name, seconds, runs in (
                ("unsized", sum(run.spent_s for run in unsized), unsized),
                ("fewest", sum(run.spent_s for run in fewest), fewest),
                ("worst", worst.over_s if worst is not None else 0.0, sized),
            )
            if runs
        }
        cause = max(taken, key=lambda name: taken[name])
        if cause == "unsized":
            return _unsized_overrun(unsized, taken["unsized"], larger)
        if cause == "fewest":
            return self._fewest_overrun(fewest, taken["fewest"], fewer)
        assert worst is not None  # its cause is taken only when some run was sized
        return _worst_overrun(worst, larger)

    def _fewest_overrun(self, fewest: list[RunSpent], seconds: float, fewer: str) -> tuple[str, str]:
        """The runs already at their fewest epochs took the most (`seconds`), longest first in `fewest`."""
        at_least = (
            f"On this machine as loaded now, a --budget of at least {5 * math.ceil(self.spent_s / 5)} s{fewer} fits it"
        )
        if len(fewest) > 1:
            return (
                f"{len(fewest)} runs already at their fewest epochs ({self.fewest_steps} steps each) took "
                f"{_seconds(seconds)} ({_listed(fewest)})",
                at_least,
            )
        run = fewest[0]
        assert run.share_s is not None  # only a sized run is at its fewest epochs
        return (
            f"{run.label} took {_seconds(run.set_up_s)} for its data and first steps, then "
            f"{_seconds(run.spent_s - run.set_up_s)} for its fewest epochs ({run.fewest_epochs} of "
            f"{self.fewest_steps} steps): its share was {_seconds(run.share_s)} after "
            f"{_seconds(self.start_up_s)} of start-up",
            at_least,
        )


def _unsized_overrun(unsized: list[RunSpent], seconds: float, larger: str) -> tuple[str, str]:
    """The runs this process's budget did not size (trainers of their own, runs in processes of their own) took the
    most (`seconds`), longest first in `unsized`."""
    if all(run.elsewhere for run in unsized):  # sized in their own processes, whose start-up came on top
        runs = (
            f"{unsized[0].label} trained in a process of its own"
            if len(unsized) == 1
            else f"{len(unsized)} runs trained in processes of their own ({_listed(unsized)})"
        )
        return f"{runs} and took {_seconds(seconds)}", larger.capitalize()
    what = (
        f"{unsized[0].label} trains on a trainer of its own, which no budget sizes, and took "
        f"{_seconds(unsized[0].spent_s)}"
        if len(unsized) == 1
        else f"{len(unsized)} runs on trainers of their own, which no budget sizes, took "
        f"{_seconds(seconds)} ({_listed(unsized)})"
    )
    return what, "--max-steps caps their rounds; " + larger


def _worst_overrun(worst: RunSpent, larger: str) -> tuple[str, str]:
    """The sized run furthest over its share took the most: whether its evaluation, its set-up or a machine slower
    than its first steps said took the time."""
    assert worst.share_s is not None  # a sized run's
    share = f"its share was {_seconds(worst.share_s)}"
    trained = f"{_seconds(worst.spent_s - worst.set_up_s)} for"
    if worst.evaluation_s - worst.evaluation_share_s > worst.over_s / 2:
        return (
            f"{worst.label}'s evaluation took {_seconds(worst.evaluation_s)}, its share was "
            f"{_seconds(worst.evaluation_share_s)}",
            "--max-eval-steps caps it; " + larger,
        )
    if worst.set_up_s > worst.share_s:
        return (
            f"{worst.label} took {_seconds(worst.set_up_s)} for its data, tuning and first steps before "
            f"it trained, then {trained} training: {share}",
            larger.capitalize(),
        )
    if worst.slowdown >= SLOWER_WORTH_SAYING:
        return (
            f"the machine ran {worst.slowdown:.1f}x slower than {worst.label}'s first steps said: it took "
            f"{trained} training, {share}",
            f"Fewer programs running beside it, or {larger}",
        )
    return (
        f"{worst.label} took {trained} training and evaluation ({_seconds(worst.evaluation_s)}), {share}",
        larger.capitalize(),
    )


def _longest_first(runs: list[RunSpent]) -> list[RunSpent]:
    return sorted(runs, key=lambda run: run.spent_s, reverse=True)


def _listed(runs: list[RunSpent], most: int = 3) -> str:
    """`imdb-bilstm on cpu 200 s, catdog-deep on cpu 114 s and 2 more`"""
    named = ", ".join(f"{run.label} {_seconds(run.spent_s)}" for run in runs[:most])
    return named + (f" and {len(runs) - most} more" if len(runs) > most else "")


def _seconds(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"


class Reporter:
    """Hears what a run is doing, to show it; every method does nothing unless a subclass says otherwise.

    Processes training together (engine/distributed.py) also keep in step through it: `epoch_started` comes right
    before each epoch's clock starts, and `divergence` decides whether the run stops after an epoch."""

    def run_started(self, record: RunRecord) -> None: ...

    def epoch_started(self, epoch: int, steps: int) -> None: ...

    def divergence(self, own: Divergence | None) -> Divergence | None:
        """Whether the run stops after this epoch's training, given this process's own divergence (None: its
        losses were all finite): a lone process stops on its own."""
        return own

    def steps_finished(self, steps_done: int) -> None: ...

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None: ...

    def run_finished(self, record: RunRecord) -> None: ...


class RunReporter(Reporter):
    """A Reporter that also hears when a session starts and which dataset each workload got."""

    def session_started(self, result: Result) -> None: ...

    def dataset_loaded(self, workload: Workload, dataset: Dataset) -> None: ...

    def run_estimated(self, record: RunRecord, seconds: float) -> None:
        """How long the run about to train is expected to take (its epochs, evaluation included), from its first
        steps timed: said before long work, and for each run a time budget sized."""

    def preparing(self, what: str) -> None:
        """Work before training that may take seconds (`making synthetic imagenet data for resnet50`): said while it
        lasts, so that a screen never sits still without saying why."""

    def run_budgeted(self, record: RunRecord, epochs: int, share_s: float) -> None:
        """A time budget gives the run about to train `share_s` seconds: about `epochs` of its planned epochs fit
        in them (its pacer ends it there), so that the screen shows what will run, not the plan's 90 epochs."""

    def run_paced(self, record: RunRecord, planned_epochs: int, planned_steps: int, slowdown: float) -> None:
        """A time budget shortened the run as it went: its epochs (in `record`) had fewer steps than the
        `planned_steps` it was sized to, or fewer epochs ran than `planned_epochs`; its steps took up to `slowdown`
        times what its first steps said."""

    def run_shrunk(self, workload: str, device: str, changed: Mapping[str, tuple[int, int]], share_s: float) -> None:
        """A time budget trains `workload` on `device` at smaller sizes: `changed` maps each setting (batch_size,
        a sequence length) to (planned, trained); at the planned ones even its fewest steps would not end within
        its `share_s` of the budget."""

    def budget_spent(self, account: BudgetAccount) -> None:
        """The session ran within a time budget (--budget, the quick suite's): what it took of it, and why."""


class ReporterGroup(RunReporter):
    """Tells every one of several reporters everything: the screen, the database, TensorBoard."""

    def __init__(self, *reporters: RunReporter) -> None:
        self.reporters = reporters

    def _tell_all(self, event: str, *details: object) -> None:
        for reporter in self.reporters:
            getattr(reporter, event)(*details)

    def session_started(self, result):
        self._tell_all("session_started", result)

    def dataset_loaded(self, workload, dataset):
        self._tell_all("dataset_loaded", workload, dataset)

    def run_started(self, record):
        self._tell_all("run_started", record)

    def epoch_started(self, epoch, steps):
        self._tell_all("epoch_started", epoch, steps)

    def steps_finished(self, steps_done):
        self._tell_all("steps_finished", steps_done)

    def epoch_finished(self, record, epoch):
        self._tell_all("epoch_finished", record, epoch)

    def run_finished(self, record):
        self._tell_all("run_finished", record)

    def run_estimated(self, record, seconds):
        self._tell_all("run_estimated", record, seconds)

    def preparing(self, what):
        self._tell_all("preparing", what)

    def run_budgeted(self, record, epochs, share_s):
        self._tell_all("run_budgeted", record, epochs, share_s)

    def run_paced(self, record, planned_epochs, planned_steps, slowdown):
        self._tell_all("run_paced", record, planned_epochs, planned_steps, slowdown)

    def run_shrunk(self, workload, device, changed, share_s):
        self._tell_all("run_shrunk", workload, device, changed, share_s)

    def budget_spent(self, account):
        self._tell_all("budget_spent", account)
