"""Live output while training: a progress bar per epoch and a Keras-like line when each epoch ends.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 2 --max-steps 100
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from devicebench.data import ArrayDataset, ImageFolderDataset
from devicebench.events import RunReporter
from devicebench.report.tables import batch_text
from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.workloads import Workload


def epoch_line(record: RunRecord, epoch: EpochRecord) -> str:
    """`Epoch 3/10  1563/1563  9.1s  5.8ms/step  1732 samples/s  loss 1.62  acc 0.43  test_acc 0.44  eval 0.9s`"""
    line = (
        f"Epoch {epoch.epoch}/{record.settings.epochs}  {epoch.steps}/{epoch.steps}  {epoch.train_time_s:.1f}s  "
        f"{epoch.step_time_ms:.1f}ms/step  {epoch.samples_per_s:,.0f} samples/s  "
        f"loss {epoch.train_loss:.4g}"
    )
    if epoch.train_accuracy is not None:  # None: outputs that name no classes
        line += f"  acc {epoch.train_accuracy:.4f}"
    if epoch.test_accuracy is not None:
        line += f"  test_acc {epoch.test_accuracy:.4f}"
    elif epoch.test_loss is not None:  # a regression: its test loss is what there is to read
        line += f"  test_loss {epoch.test_loss:.4g}"
    if epoch.eval_time_s is not None:
        line += f"  eval {epoch.eval_time_s:.1f}s"
    if epoch.phase == "warmup":
        line += "  (warm-up)"
    return line


class RichReporter(RunReporter):
    """Prints to a rich console; quiet=True keeps only warnings and failures."""

    def __init__(self, console: Console | None = None, *, quiet: bool = False) -> None:
        self.console = console or Console(stderr=True)
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task = None
        self.announced: set[str] = set()  # datasets whose synthetic stand-in was already announced

    def dataset_loaded(self, workload: Workload, dataset: ArrayDataset | ImageFolderDataset) -> None:
        notes = getattr(dataset, "notes", ())  # an image folder's: files left out, empty classes
        if notes and dataset.origin not in self.announced:
            self.announced.add(dataset.origin)
            self.console.print(Text(f"{dataset.origin}: " + "; ".join(notes), style="yellow"))
        if dataset.source == "synthetic" and dataset.name not in self.announced:
            self.announced.add(dataset.name)
            why = dataset.fallback_reason or "--data synthetic was asked for"
            self.console.print(
                Panel(
                    f"{workload.name} and every later workload on {dataset.name} train on SYNTHETIC data: {why}\n"
                    "Speeds are real; accuracies cannot be compared with the published ones.",
                    title="synthetic data",
                    border_style="bold yellow",
                )
            )

    def run_started(self, record: RunRecord) -> None:
        if self.quiet:
            return
        settings = record.settings
        steps = f"{settings.max_steps} steps each" if settings.max_steps else "full epochs"
        self.console.rule(
            f"[bold]{record.workload}[/] on [bold]{record.device}[/] ({record.device_name}), "
            f"repeat {record.repeat + 1}, {batch_text(settings.batch_size)}, {settings.epochs} epochs of {steps}, "
            f"{settings.data_source} data, {settings.threads} threads"
            + (f", {settings.workers} loader workers" if settings.workers else "")
        )

    def epoch_started(self, epoch: int, steps: int) -> None:
        if self.quiet:
            return
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
        if self.progress is not None:
            self.progress.update(self.task, completed=steps_done)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        self._stop_progress()
        if not self.quiet:
            self.console.print(epoch_line(record, epoch), highlight=False)

    def run_finished(self, record: RunRecord) -> None:
        self._stop_progress()
        if record.status != "ok":
            # the error is text, not markup: gloo's "[/__w/pytorch/.../pair.cc:553]" would end a tag that never began
            self.console.print(f"[bold red]{escape(record.workload)} on {record.device}: {record.status}[/]: "
                               f"{escape(record.error or '')}")

    def close(self) -> None:
        """Take the progress bar off the screen, e.g. after Ctrl-C."""
        self._stop_progress()

    def _stop_progress(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
