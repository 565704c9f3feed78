"""Tuned mode's whole training step as one CUDA graph (engine/step_graph.py): its logic on the CPU with a fake graph
that replays a Python closure (tests/fakes.py FakeCapture), and the real thing on CUDA (the tests marked gpu).

    python -m pytest tests/test_step_graph.py -q          # add -m gpu on a machine with CUDA
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from fakes import FakeCapture
from torch import nn

from devicebench import RunConfig, planning, runner, session_choices
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.step_graph import GRAPH_WARMUP_STEPS, GraphedStep, step_graph_refusal
from devicebench.engine.tuning import Tuning, _label, candidates
from devicebench.engine.tuning_applied import tuned_setup
from devicebench.results.speed_settings import setting_text

CPU = torch.device("cpu")
cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")


def small_setup(device: torch.device = CPU, optimizer: str = "adam", dropout: float = 0.25) -> TrainingSetup:
    """A small conv net with dropout and batch norm (random numbers and buffers the graph must carry), seeded."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Dropout(dropout), nn.Linear(4 * 6 * 6, 3)
    ).to(device)
    optimizers = {
        "adam": lambda: torch.optim.Adam(model.parameters(), lr=0.01),
        "sgd": lambda: torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
    }
    return TrainingSetup(model=model, loss_function=nn.CrossEntropyLoss(), optimizer=optimizers[optimizer]())


def batches(sizes: list[int], device: torch.device = CPU) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(1)
    return [
        (
            torch.rand(size, 1, 8, 8, generator=generator).to(device),
            torch.randint(0, 3, (size,), generator=generator).to(device),
        )
        for size in sizes
    ]


def losses_and_predictions(setup: TrainingSetup, stream: list[tuple[torch.Tensor, torch.Tensor]], seed: int = 2):
    """Each step's loss and predicted classes, from the tensors the step returned, all read at the end: as the loop
    keeps an epoch's losses and outputs and reads them once its clock has stopped."""
    torch.manual_seed(seed)  # dropout's masks: the same for both runs
    setup.model.train()
    kept = [setup.train_step(inputs, labels) for inputs, labels in stream]
    return [float(loss.detach()) for loss, _ in kept], [outputs.detach().argmax(dim=1).tolist() for _, outputs in kept]


def graphed(setup: TrainingSetup, events: list[str]) -> TrainingSetup:
    setup.graphed = GraphedStep(setup.eager_step, FakeCapture(events))
    return setup


def test_a_graphed_step_warms_up_captures_once_and_then_trains_exactly_as_the_eager_step():
    stream = batches([5] * 7)
    eager = small_setup()
    events: list[str] = []
    graph = graphed(small_setup(), events)
    assert losses_and_predictions(graph, stream) == losses_and_predictions(eager, stream)  # each step's own loss
    assert events == ["warm-up"] * GRAPH_WARMUP_STEPS + ["capture"] + ["replay"] * (7 - GRAPH_WARMUP_STEPS)
    for trained, reference in zip(graph.model.state_dict().values(), eager.model.state_dict().values()):
        torch.testing.assert_close(trained, reference)  # weights and batch-norm statistics alike


def test_a_batch_of_another_shape_runs_eagerly_between_replays_and_trains_the_same():
    """An epoch's short last batch: the graph holds the full batches' shape; the short one is an eager step of the
    same model and optimizer, and the graph replays on after it."""
    stream = batches([5, 5, 5, 5, 2, 5, 5, 2])
    events: list[str] = []
    graph = graphed(small_setup(), events)
    assert losses_and_predictions(graph, stream) == losses_and_predictions(small_setup(), stream)
    assert events == ["warm-up", "warm-up", "capture"] + ["replay"] * 4
    assert graph.graphed.eager_steps == 2


def test_a_workload_s_own_step_is_refused_the_graph_and_runs_eagerly():
    own = dataclasses.replace(small_setup(), step=lambda model, batch, optimizer: model(batch[0]).sum())
    assert step_graph_refusal(own) == "the workload's own train_step runs Python that a graph would not replay"
    assert step_graph_refusal(small_setup()) is None
    setup, applied = tuned_setup(own, Tuning(step_graph=True), CPU, capture=lambda device: FakeCapture())
    assert not applied.step_graph and setup.graphed is None


def test_tuned_setup_graphs_the_tuned_step_with_a_capturable_optimizer():
    events: list[str] = []
    fused = Tuning(fused_optimizer=True)
    setup, applied = tuned_setup(
        small_setup(), dataclasses.replace(fused, step_graph=True), CPU, capture=lambda device: FakeCapture(events)
    )
    assert applied.step_graph and isinstance(setup.graphed, GraphedStep)
    assert all(group["capturable"] for group in setup.optimizer.param_groups)  # its step counts on the device
    stream = batches([5] * 4)
    assert losses_and_predictions(setup, stream) == losses_and_predictions(
        tuned_setup(small_setup(), fused, CPU)[0], stream
    )
    assert events == ["warm-up", "warm-up", "capture", "replay", "replay"]


def test_only_cuda_offers_the_graph_each_option_eager_then_graphed():
    base = Tuning(channels_last=True, fused_optimizer=True)
    on_gpu = candidates(base, torch.device("cuda"), "fp32", "auto", step_graph=True)
    assert [_label(option, on_gpu) for option in on_gpu] == [
        "fp32",
        "fp32+graph",
        "fp32+compiled",
        "fp32+compiled+graph",
    ]
    assert not any(option.step_graph for option in candidates(base, CPU, "fp32", "on", step_graph=True))
    refused = candidates(base, torch.device("cuda"), "fp32", "off", step_graph=False)  # step_graph_refusal said why
    assert [option.step_graph for option in refused] == [False]


def test_the_note_says_why_the_graph_was_not_tried_or_how_a_graphed_run_trains_a_short_batch():
    assert session_choices.graph_note(Tuning(), "several processes train together") == (
        "the step as one CUDA graph was not tried: several processes train together"
    )
    assert session_choices.graph_note(Tuning(step_graph=True), None) == (
        "the step replayed as one CUDA graph; a batch of another shape (an epoch's short last one) ran eagerly"
    )
    assert session_choices.graph_note(Tuning(), None) == ""  # tried, not kept: the trial's own words say so
    assert setting_text("step_graph", True) == "CUDA graph"  # a row's label


# --- on CUDA ---------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@cuda_only
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
@pytest.mark.parametrize("fused", [False, True])
def test_on_cuda_the_graphed_step_gives_the_eager_step_s_losses(optimizer, fused):
    cuda = torch.device("cuda")
    stream = batches([16] * 8 + [3] + [16] * 2, cuda)  # a short batch, eager, between replays
    # no dropout: whether a replay draws the very masks the eager step would is torch's RNG bookkeeping, not ours
    eager, _ = tuned_setup(small_setup(cuda, optimizer, dropout=0.0), Tuning(fused_optimizer=fused), cuda)
    graphed = Tuning(fused_optimizer=fused, step_graph=True)
    graph, applied = tuned_setup(small_setup(cuda, optimizer, dropout=0.0), graphed, cuda)
    assert applied.step_graph
    eager_losses, eager_predictions = losses_and_predictions(eager, stream)
    graph_losses, graph_predictions = losses_and_predictions(graph, stream)
    torch.testing.assert_close(graph_losses, eager_losses, rtol=1e-4, atol=1e-5)
    assert graph.graphed.graph is not None and graph.graphed.eager_steps == 1
    assert sum(a != b for a, b in zip(graph_predictions, eager_predictions)) <= 1  # a near tie may flip


@pytest.mark.gpu
@cuda_only
def test_on_cuda_a_graphed_run_trains_and_is_recorded_as_graphed(monkeypatch):
    graph_only = lambda base, device, *arguments, **switches: [dataclasses.replace(base, step_graph=True)]  # noqa: E731
    monkeypatch.setattr(session_choices, "candidates", graph_only)  # one option: no trial, the graph kept
    config = RunConfig(
        workloads=("mnist-cnn2",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_steps=30,
        max_eval_steps=2,
        mode="tuned",
        compile="off",
    )
    (run,) = runner.run(planning.plan(config)).runs
    assert run.status == "ok", run.error
    assert run.settings.step_graph and "the step replayed as one CUDA graph" in run.tuning_note
    assert [epoch.samples for epoch in run.epochs] == [30 * run.settings.batch_size] * 2
    assert all(0 < epoch.train_loss < 10 and epoch.train_accuracy is not None for epoch in run.epochs)
