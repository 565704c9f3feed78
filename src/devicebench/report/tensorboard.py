"""TensorBoard logs of a run: per-epoch loss, accuracy and throughput, and the model's graph (S1 showed its
graphs in TensorBoard). Needs the optional extra: `pip install 'devicebench[tensorboard]'`.

    devicebench run mnist-cnn2 --devices cpu --data synthetic --epochs 3 --max-steps 50 --tensorboard runs/
    tensorboard --logdir runs/
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from devicebench.errors import DevicebenchError
from devicebench.events import RunReporter
from devicebench.files import UnusableFile
from devicebench.results.schema import EpochRecord, RunRecord
from devicebench.workloads import get_workload

if TYPE_CHECKING:  # the optional extra: imported when a reporter is made
    from torch.utils.tensorboard import SummaryWriter


class TensorBoardUnavailable(DevicebenchError, RuntimeError):
    """The tensorboard package is missing; the message says how to install it."""


class TensorBoardReporter(RunReporter):
    """Writes one TensorBoard run per (workload, device, repeat) under `log_dir`."""

    def __init__(self, log_dir: Path) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise TensorBoardUnavailable(
                "--tensorboard needs the tensorboard package: pip install 'devicebench[tensorboard]'"
            ) from None
        self.writer_class = SummaryWriter
        self.log_dir = Path(log_dir)
        try:  # now, before the session is stored: a folder that cannot be made must not cut its first run short
            self.log_dir.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise UnusableFile(
                f"cannot write TensorBoard logs into --tensorboard {log_dir}: {error.strerror or error}; name "
                "another folder"
            ) from None
        self.writer: SummaryWriter | None = None  # the run's, from run_started to run_finished

    def run_started(self, record: RunRecord) -> None:
        device = record.device.replace(":", "")
        writer = self.writer_class(
            str(self.log_dir / record.workload / f"{device}-repeat{record.repeat + 1}-{record.run_id[:8]}")
        )
        self.writer = writer
        settings = ", ".join(f"{key}={value}" for key, value in vars(record.settings).items())
        writer.add_text("settings", f"{record.device} ({record.device_name}): {settings}")
        self._add_graph(writer, record)

    def epoch_finished(self, record: RunRecord, epoch: EpochRecord) -> None:
        assert self.writer is not None  # a run's epochs finish between its run_started and its run_finished
        scalars = {
            "loss/train": epoch.train_loss,
            "accuracy/train": epoch.train_accuracy,
            "accuracy/test": epoch.test_accuracy,
            "throughput/samples_per_s": epoch.samples_per_s,
            "time/epoch_s": epoch.train_time_s,
            "time/step_ms": epoch.step_time_ms,
            "time/eval_s": epoch.eval_time_s,
        }
        for tag, value in scalars.items():
            if value is not None:
                self.writer.add_scalar(tag, value, global_step=epoch.epoch)
        self.writer.flush()  # an interrupted run keeps what it logged

    def run_finished(self, record: RunRecord) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None

    def _add_graph(self, writer: SummaryWriter, record: RunRecord) -> None:
        """The graph of a CPU copy of the model, traced on one blank input: the run's own model stays untouched."""
        workload = get_workload(record.workload)
        example = workload.example_batch(record.settings.hyperparameters)
        if example is None:  # not a torch model: no graph to draw
            return
        model = workload.build_model(record.settings.hyperparameters).cpu().eval()
        with warnings.catch_warnings():  # add_graph traces with torch.jit, which warns of its own deprecation
            warnings.simplefilter("ignore", DeprecationWarning)
            writer.add_graph(model, example[0])
