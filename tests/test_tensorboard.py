"""TensorBoard logs hold the same per-epoch numbers as the result, and the model's graph."""

from __future__ import annotations

import pytest

pytest.importorskip("tensorboard", reason="the tensorboard extra is not installed")

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator  # noqa: E402

from devicebench import RunConfig, planning, runner  # noqa: E402
from devicebench.report.tensorboard import TensorBoardReporter  # noqa: E402


def test_scalars_equal_the_measured_epochs_and_the_graph_is_logged(tmp_path):
    config = RunConfig(
        workloads=("mnist-cnn2",), devices="cpu", data="synthetic", epochs=2, max_steps=2, max_eval_steps=1
    )
    result = runner.run(planning.plan(config), TensorBoardReporter(tmp_path))
    (run_folder,) = (tmp_path / "mnist-cnn2").iterdir()
    assert run_folder.name.startswith("cpu-repeat1-")
    events = EventAccumulator(str(run_folder))
    events.Reload()
    throughput = events.Scalars("throughput/samples_per_s")
    epochs = result.runs[0].epochs
    assert [point.step for point in throughput] == [1, 2]
    assert [point.value for point in throughput] == pytest.approx([e.samples_per_s for e in epochs], rel=1e-6)
    assert [point.value for point in events.Scalars("accuracy/test")] == pytest.approx(
        [e.test_accuracy for e in epochs], rel=1e-6
    )
    assert events.Graph() is not None  # the model graph, as S1 showed it
