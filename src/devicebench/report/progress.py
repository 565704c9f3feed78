"""Live output while training: a progress bar per epoch and a Keras-like line when each epoch ends.

devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 100
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.status import Status
from rich.text import Text

from devicebench.data import Dataset
from devicebench.events import BudgetAccount, RunReporter
from devicebench.report.text import batch_text, duration_text, rate_text
from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.workloads import Workload

LONG_RUN_S = 120.0  # a run expected to take longer is announced before it starts, with how to shorten it


def epoch_fields(record: RunRecord, epoch: EpochRecord, budgeted: int | None = None) -> list[str]:
    """The fields of an epoch's line, each a whole that a narrow screen never splits: `Epoch 3/10`, `1563/1563`,
    `9.1s`, `5.8ms/step`, `1732 samples/s`, `loss 1.62`, `acc 0.43`, `test_acc 0.44`, `eval 0.9s`; `Epoch 3/~5`
    where a time budget ends the run after about `budgeted` of its planned epochs."""
    shown = f"~{budgeted}" if budgeted is not None and budgeted < record.settings.epochs else record.settings.epochs
    fields = [
        f"Epoch {epoch.epoch}/{shown}",
        f"{epoch.steps}/{epoch.steps}",
        f"{epoch.train_time_s:.1f}s",
        f"{epoch.step_time_ms:.1f}ms/step",
        f"{rate_text(epoch.samples_per_s)} samples/s",
        f"loss {epoch.train_loss:.4g}",
    ]
    if epoch.train_accuracy is not None:  # None: outputs that name no classes
        fields.append(f"acc {epoch.train_accuracy:.4f}")
    if epoch.test_accuracy is not None:
        fields.append(f"test_acc {epoch.test_accuracy:.4f}")
    elif epoch.test_loss is not None:  # a regression: its test loss is what there is to read
        fields.append(f"test_loss {epoch.test_loss:.4g}")
    if epoch.eval_time_s is not None:
        # the epoch's wall time mostly not the training measured: said beside it
        slow = " (eval > training: --max-eval-steps caps it)" if epoch.eval_time_s > epoch.train_time_s else ""
        fields.append(f"eval {epoch.eval_time_s:.1f}s{slow}")
    if epoch.phase == "warmup":
        fields.append("(warm-up)")
    return fields


def epoch_line(record: RunRecord, epoch: EpochRecord) -> str:
    """`Epoch 3/10  1563/1563  9.1s  5.8ms/step  1732 samples/s  loss 1.62  acc 0.43  test_acc 0.44  eval 0.9s`"""
    return FIELD_GAP.join(epoch_fields(record, epoch))


FIELD_GAP = "  "
CONTINUATION = "    "  # the indent of an epoch line's second line: it reads as the same epoch's


def folded(fields: list[str], width: int) -> str:
    """`fields` joined by FIELD_GAP into lines of at most `width` columns, broken only between fields (a terminal
    or rich would break `test_acc` or `0.4412` in two), each line after the first indented."""
    lines = [fields[0]]
    for field in fields[1:]:
        if len(lines[-1]) + len(FIELD_GAP) + len(field) <= width:
            lines[-1] += FIELD_GAP + field
        else:
            lines.append(CONTINUATION + field)
    return "\n".join(lines)


def run_header(record: RunRecord, steps: int, budget: tuple[int, float] | None = None) -> Text:
    """`mnist-cnn2 on cpu (AMD EPYC), repeat 1, batch 50, 3 epochs of 60 steps, synthetic data, 2 threads`: what
    runs, read when its first epoch starts (--batch-size auto has chosen by then); `steps`: that epoch's, which are
    boosting rounds for trees (batch 0: every row each round). `budget`: (epochs, seconds) a time budget's share
    leaves it, said as `about 3 of 90 epochs (its 35 s of the budget)`."""
    settings = record.settings
    unit = "rounds" if settings.batch_size == 0 else "steps"
    epochs = f"{settings.epochs} epoch{'s' if settings.epochs != 1 else ''}"
    if budget is not None and budget[0] < settings.epochs:
        epochs = f"about {budget[0]} of {settings.epochs} epochs (its {duration_text(budget[1])} of the budget)"
    return Text.assemble(
        (record.workload, "bold"),
        " on ",
        (record.device, "bold"),
        f" ({record.device_name}), repeat {record.repeat + 1}, {batch_text(settings.batch_size)}"
        + (" (auto)" if settings.batch_size_auto else "")
        + f", {epochs} of {steps:,} {unit}, "
        f"{settings.data_source} data, {settings.threads} threads"
        + (f", {settings.workers} loader workers" if settings.workers else ""),
    )


class RichReporter(RunReporter):
    """Prints to a rich console; quiet=True keeps only warnings and failures."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task: TaskID | None = None  # the bar's one task, added with the bar
        self.announced: set[str] = set()  # datasets whose synthetic stand-in was already announced
        self.record: RunRecord | None = None  # the run whose header waits for its first epoch
        self.budget: tuple[int, float] | None = None  # (epochs, seconds) a time budget leaves the current run
        self.status: Status | None = None  # what is being prepared, with a spinner, until the next thing is shown

    def dataset_loaded(self, workload: Workload, dataset: Dataset) -> None:
        notes = getattr(dataset, "notes", ())  # an image folder's: files left out, empty classes
        if notes and dataset.origin not in self.announced:
            self.announced.add(dataset.origin)
            self._say(Text(f"{dataset.origin}: " + "; ".join(notes), style="yellow"))
        if dataset.source == "synthetic" and dataset.name not in self.announced:
            self.announced.add(dataset.name)
            why = (dataset.fallback_reason or "--data synthetic was asked for").rstrip(". ")
            # one wrapped paragraph, reason and all: a panel's border cut it at 80 columns
            self._say(
                Text.assemble(
                    (f"{workload.name} and every later workload on {dataset.name} train on ", "yellow"),
                    ("SYNTHETIC data", "bold yellow"),
                    (f": {why}. Speeds are real; accuracies cannot be compared with the published ones.", "yellow"),
                )
            )

    def run_started(self, record: RunRecord) -> None:
        self.record = record  # its header waits for the first epoch: the batch and the steps that really run
        self.budget = None

    def run_budgeted(self, record: RunRecord, epochs: int, share_s: float) -> None:
        self.budget = (epochs, share_s)

    def preparing(self, what: str) -> None:
        self._stop_progress()
        if not self.quiet and (self.console.is_terminal or self.console.is_jupyter):  # in a log file only noise
            self.status = Status(Text(f"{what}…"), console=self.console)
            self.status.start()

    def epoch_started(self, epoch: int, steps: int) -> None:
        self._stop_progress()
        if self.quiet:
            return
        if self.record is not None:
            self.console.rule(style="dim")
            # wrapped at its words, even on a console that soft-wraps (a rule's title was cut with "…")
            self._say(run_header(self.record, steps, self.budget))
            self.record = None
        self.progress = Progress(
            TextColumn(f"Epoch {epoch}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=self.console,
            transient=True,
            disable=not (self.console.is_terminal or self.console.is_jupyter),  # in a log file a bar is only noise
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=steps)

    def steps_finished(self, steps_done: int) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, completed=steps_done)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        self._stop_progress()
        if not self.quiet:  # lines already fitted: a soft-wrapping console must not break them again
            fields = epoch_fields(record, epoch, self.budget[0] if self.budget else None)
            self.console.print(folded(fields, self.console.width), highlight=False, soft_wrap=True)

    def run_finished(self, record: RunRecord) -> None:
        self._stop_progress()
        self.record = None  # a run that failed before its first epoch: the failure below names it
        if record.status != "ok":
            # the error is text, not markup: gloo's "[/__w/pytorch/.../pair.cc:553]" would end a tag that never began
            self.console.print(
                f"[bold red]{escape(record.workload)} on {record.device}: {record.status}[/]: "
                f"{escape(record.error or '')}"
            )

    def run_estimated(self, record: RunRecord, seconds: float) -> None:
        if seconds > LONG_RUN_S:  # before long work, say how long and how to shorten it
            self._say(
                f"{record.workload} on {record.device} should take about {duration_text(seconds)} "
                f"({record.settings.epochs} epochs, evaluation included; estimated from its first steps). "
                "Shorten it with --budget (e.g. --budget 10m), --epochs or --max-steps; Ctrl-C stops it and "
                "keeps every finished epoch.",
                "yellow",
            )

    def run_paced(self, record: RunRecord, planned_epochs: int, planned_steps: int, slowdown: float) -> None:
        if self.quiet:
            return
        ran = [epoch.steps for epoch in record.epochs]
        if len(set(ran)) == 1:
            steps = str(ran[0])
        elif len(ran) <= 3:
            steps = ", ".join(map(str, ran[:-1])) + f" and {ran[-1]}"
        else:  # the epoch lines say each
            steps = f"{min(ran)} to {max(ran)}"
        said = [f"its epochs had {steps} of the {planned_steps} steps planned"] if min(ran) < planned_steps else []
        if record.settings.epochs < planned_epochs:
            said.append(f"it ended after {record.settings.epochs} of {planned_epochs} epochs")
        slower = f"; its steps took up to {slowdown:.1f}x what its first steps said" if slowdown >= 1.05 else ""
        self._say(
            f"{record.workload} on {record.device} kept to its share of the budget: {' and '.join(said)}{slower}.",
            "dim",
        )

    def run_shrunk(self, workload: str, device: str, changed: Mapping[str, tuple[int, int]], share_s: float) -> None:
        trained = " and ".join(
            f"{'batch' if name == 'batch_size' else name} {new:,}" for name, (_, new) in changed.items()
        )
        planned = " and ".join(f"{old:,}" for old, _ in changed.values())
        room = f"its {duration_text(share_s)} of the budget" if share_s > 0 else "the budget, already spent"
        self._say(
            f"{workload} on {device} trains at {trained} (planned: {planned}): at the planned sizes even its "
            f"fewest steps would take longer than {room}. Its figures are at these sizes; a longer --budget "
            "(or --batch-size, --set) keeps the planned ones.",
            "yellow",
        )

    def budget_spent(self, account: BudgetAccount) -> None:
        spent, budget = duration_text(account.spent_s), duration_text(account.budget_s)
        if not account.over:
            self._say(f"Trained in {spent}, within the {budget} budget.")
        else:
            cause, lever = account.overrun()
            self._say(f"Trained in {spent}, over the {budget} budget: {cause}. {lever}.", "yellow")

    def _say(self, message: str | Text, style: str = "") -> None:
        """Print `message` wrapped between its words at the console's width, also on a console that soft-wraps
        (the CLI's stderr does, to keep an error's paths whole): a terminal's own wrapping cuts words. A string is
        never read as markup."""
        self._stop_status()  # what was being prepared is done: this says what came of it
        self.console.print(
            Text(message, style=style) if isinstance(message, str) else message, highlight=False, soft_wrap=False
        )

    def close(self) -> None:
        """Take the progress bar off the screen, e.g. after Ctrl-C."""
        self._stop_progress()

    def _stop_progress(self) -> None:
        """Take the bar, and what was being prepared, off the screen."""
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
        self._stop_status()

    def _stop_status(self) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
