"""What a run tells those who watch it: the screen, the database, TensorBoard, the processes of a distributed run.

The runner and the training loop call a `Reporter` (a `RunReporter` hears a session's events too); the watchers
implement it. It sits at the bottom of the package, beside the result schema, so that a watcher never imports the
runner it watches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from devicebench.results.schema import EpochRecord, Result, RunRecord

if TYPE_CHECKING:  # for annotations only
    from devicebench.data import Dataset
    from devicebench.engine.budget import BudgetAccount
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

    def run_paced(self, record: RunRecord, planned_epochs: int, planned_steps: int, slowdown: float) -> None:
        """A time budget shortened the run as it went: its epochs (in `record`) had fewer steps than the
        `planned_steps` it was sized to, or fewer epochs ran than `planned_epochs`; its steps took up to `slowdown`
        times what its first steps said."""

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

    def run_paced(self, record, planned_epochs, planned_steps, slowdown):
        self._tell_all("run_paced", record, planned_epochs, planned_steps, slowdown)

    def budget_spent(self, account):
        self._tell_all("budget_spent", account)
