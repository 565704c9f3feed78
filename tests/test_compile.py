"""torch.compile in tuned mode: every compiled run compiles its own graphs and really runs them, what Dynamo did
is recorded (and a run that fell back to eager is not recorded as compiled), and bf16 leaves recurrent layers in
fp32. Runs compile with a backend that counts graphs and the calls into them and runs each graph as it is, so a
test takes seconds where inductor takes minutes on a small CPU.

    python -m pytest tests/test_compile.py -q
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from training_fixtures import bf16_bilstm_run

from devicebench import RunConfig, planning, runner
from devicebench.data import ArrayDataset
from devicebench.engine import tuning_applied
from devicebench.engine.loop import TrainingSetup
from devicebench.engine.tuning_applied import (
    TunedForward,
    dynamo_counts,
    note_compilation,
    tuned_setup,
)
from devicebench.engine.tuning_choices import Tuning
from devicebench.results.schema import RunRecord, RunSettings
from devicebench.runner import new_record, train_record

CPU = torch.device("cpu")


class CountingBackend:
    """A torch.compile backend that runs each graph Dynamo captured as it is, counting graphs and calls into them."""

    def __init__(self) -> None:
        self.graphs: list[bool] = []  # per graph compiled: whether its shapes are dynamic (a size came as an input)
        self.calls = 0

    def __call__(self, graph: torch.fx.GraphModule, example_inputs: list) -> object:
        self.graphs.append(not all(isinstance(value, torch.Tensor) for value in example_inputs))

        def run(*inputs):
            self.calls += 1
            return graph.forward(*inputs)

        return run


@pytest.fixture
def backend(monkeypatch) -> CountingBackend:
    counting = CountingBackend()
    monkeypatch.setattr(tuning_applied, "COMPILE_BACKEND", counting)
    return counting


def compiled_record() -> RunRecord:
    settings = RunSettings(
        batch_size=10,
        epochs=1,
        max_steps=None,
        max_eval_steps=None,
        seed=0,
        threads=1,
        data_source="synthetic",
        mode="tuned",
        compiled=True,
    )
    return RunRecord(
        workload="w", seed_experiment="", device="cpu", device_name="cpu", repeat=0, settings=settings, started_utc=""
    )


def mlp_setup(width: int) -> TrainingSetup:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, width), nn.ReLU(), nn.Linear(width, 3))
    return TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1))


def train_steps(setup: TrainingSetup, batch_sizes: tuple[int, ...]) -> None:
    setup.model.train()
    for size in batch_sizes:
        setup.train_step(torch.rand(size, 8), torch.randint(0, 3, (size,)))


def evaluate(setup: TrainingSetup, batch_sizes: tuple[int, ...]) -> None:
    setup.model.eval()
    with torch.inference_mode():  # as the loop evaluates
        for size in batch_sizes:
            setup.outputs(torch.rand(size, 8))


# --- defect 1: every compiled run compiles its own graphs, and runs them --------------------------------------


def test_every_compiled_run_of_a_process_compiles_its_own_graph_and_runs_it(backend):
    """Every run's forward is TunedForward.forward: sharing one Dynamo cache, the ninth (model, precision) pair of a
    process hit the recompile limit (8) and ran eagerly, recorded as compiled."""
    for run, (width, precision) in enumerate(
        (width, precision) for width in range(4, 9) for precision in ("fp32", "bf16")
    ):
        graphs_before, calls_before = len(backend.graphs), backend.calls
        before = dynamo_counts()
        setup, applied = tuned_setup(mlp_setup(width), Tuning(precision=precision, compiled=True), CPU)
        train_steps(setup, (10, 10, 10))
        record = compiled_record()
        note_compilation(record, before)
        assert applied.compiled and applied.precision == precision
        assert (len(backend.graphs) - graphs_before, backend.calls - calls_before) == (1, 3), f"run {run + 1}"
        assert (record.settings.compiled, record.compile_recompiles, record.compile_graph_breaks) == (True, 0, 0)
        assert record.tuning_note is None


def test_partial_batches_and_evaluation_get_static_graphs_within_the_recompile_limit(backend):
    """The partial last batch must not switch the run to a dynamic-shape graph, and evaluation (inference mode, its
    own full and partial batch) must not use up the recompile budget: 4 static graphs, then none."""
    before = dynamo_counts()
    setup, _ = tuned_setup(mlp_setup(6), Tuning(compiled=True), CPU)
    for epoch in range(3):
        train_steps(setup, (10, 10, 4))
        evaluate(setup, (10, 4))
        assert backend.graphs == [False] * 4, f"epoch {epoch + 1}"  # each static; all compiled in the first epoch
    assert backend.calls == 3 * (3 + 2)  # every step and every evaluated batch ran a compiled graph
    record = compiled_record()
    note_compilation(record, before)
    assert (record.settings.compiled, record.compile_recompiles, record.compile_graph_breaks) == (True, 3, 0)


class BreaksOnce(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first, self.second = nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        hidden = self.first(inputs)
        print(end="")  # Dynamo cannot trace print: the graph breaks here, and the rest is a graph of its own
        return self.second(hidden)


def test_graph_breaks_are_recorded_as_dynamo_counts_them(backend):
    before = dynamo_counts()
    model = BreaksOnce()
    setup, _ = tuned_setup(
        TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1)),
        Tuning(compiled=True),
        CPU,
    )
    train_steps(setup, (10, 10))
    record = compiled_record()
    note_compilation(record, before)
    # one break, met in both frames it sits in (TunedForward.forward and BreaksOnce.forward), each compiled once
    assert (record.settings.compiled, record.compile_recompiles, record.compile_graph_breaks) == (True, 0, 2)
    assert backend.calls == 2 * len(backend.graphs)  # every piece of the broken graph ran compiled on both steps


def test_a_run_dynamo_left_to_eager_is_recorded_as_not_compiled_and_says_why(backend):
    before = dynamo_counts()
    setup, _ = tuned_setup(mlp_setup(5), Tuning(compiled=True), CPU)
    with torch._dynamo.config.patch(recompile_limit=1):  # any recompile now falls back to eager
        train_steps(setup, (10, 4, 10, 4))
    record = compiled_record()
    note_compilation(record, before)
    assert backend.calls == 2  # the batches of 4 ran eagerly
    assert not record.settings.compiled
    assert record.tuning_note.startswith("torch.compile left 1 function(s) to run eagerly (Dynamo recompile limit")
    assert record.tuning_note.endswith("): recorded as not compiled")


class LastStepClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.recurrent, self.outward = nn.LSTM(8, 6, batch_first=True), nn.Linear(6, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        sequence, _ = self.recurrent(inputs)
        return self.outward(sequence[:, -1])


def test_every_run_of_a_model_dynamo_cannot_compile_is_recorded_as_not_compiled(backend):
    """Dynamo gives up on a function that calls an LSTM, and remembers that: a later run of the same model in the
    process ran it eagerly without trying again, recorded as compiled."""
    for run in (1, 2):
        before = dynamo_counts()
        model = LastStepClassifier()
        setup, _ = tuned_setup(
            TrainingSetup(model, nn.CrossEntropyLoss(), torch.optim.SGD(model.parameters(), lr=0.1)),
            Tuning(compiled=True),
            CPU,
        )
        setup.train_step(torch.rand(4, 5, 8), torch.zeros(4, dtype=torch.int64))
        record = compiled_record()
        note_compilation(record, before)
        assert not record.settings.compiled, f"run {run}"
        assert record.tuning_note.startswith("torch.compile left 1 function(s) to run eagerly (")
        assert "LSTM" in record.tuning_note and record.tuning_note.endswith("): recorded as not compiled")


# --- defect 11: tuned mode with compilation runs, end to end --------------------------------------------------


class NoTruthValue:
    """A forward pass that cannot be truth-tested, as a compiled module cannot (its len() raises)."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model

    def __call__(self, inputs: torch.Tensor) -> torch.Tensor:
        return self.model(inputs)

    def __bool__(self) -> bool:
        raise TypeError("NoTruthValue does not support len()")


def test_a_forward_pass_is_never_truth_tested():
    setup = mlp_setup(4)
    setup.forward = NoTruthValue(setup.model)
    assert setup.outputs(torch.rand(2, 8)).shape == (2, 3)
    handed = []
    setup.step = lambda forward, batch, optimizer: handed.append(forward) or forward(batch[0]).sum()
    setup.train_step(torch.rand(2, 8), torch.zeros(2, dtype=torch.int64))
    assert handed == [setup.forward]  # a user's own step gets the tuned forward pass


def test_tuned_mode_with_compilation_trains_through_the_runner(backend, switches_untried):
    """`devicebench run cifar10-mlp --mode tuned --compile on` failed every run with `TypeError: TunedForward does
    not support len()`."""
    generator = np.random.default_rng(0)
    images = generator.integers(0, 256, (100, 3, 32, 32), dtype=np.uint8)
    labels = generator.integers(0, 10, 100).astype(np.int64)
    dataset = ArrayDataset("cifar10", "synthetic", images[:70], labels[:70], images[70:], labels[70:], num_classes=10)
    config = RunConfig(
        workloads=("cifar10-mlp",),
        devices="cpu",
        data="synthetic",
        epochs=2,
        batch_size=32,
        mode="tuned",
        precision="fp32",
        compile="on",
    )
    (job,) = planning.plan(config).jobs
    record = new_record(job, dataset, 0)
    train_record(record, job, dataset)
    assert record.status == "ok", record.error
    assert record.settings.compiled and record.settings.mode == "tuned"
    assert [epoch.steps for epoch in record.epochs] == [3, 3]  # 70 samples: 32, 32 and a partial batch of 6
    # graphs: training's full and partial batch, and evaluation's one batch of 30; no graph breaks
    assert (record.compile_recompiles, record.compile_graph_breaks) == (2, 0)
    assert backend.graphs == [False] * 3 and backend.calls == 2 * (3 + 1)
    assert record.tuning_note is None


# --- defect 6: bf16 autocast leaves recurrent layers in fp32 ---------------------------------------------------


def spied(layer_class: type[nn.Module], seen: list, device_type: str) -> type[nn.Module]:
    """`layer_class`, noting how its forward pass computed: autocast on or off, the input's and the output's dtype."""

    class Spy(layer_class):
        def forward(self, inputs, *rest):
            autocast = torch.is_autocast_enabled(device_type)
            outputs = super().forward(inputs, *rest)
            first_output = outputs[0] if isinstance(outputs, tuple) else outputs
            seen.append((type(self).__name__, autocast, inputs.dtype, first_output.dtype))
            return outputs

    Spy.__name__ = layer_class.__name__
    return Spy


class Recurrent(nn.Module):
    """Linear → recurrent layer → Linear: under bf16 autocast the first Linear hands the recurrent layer bf16."""

    def __init__(self, recurrent: type[nn.RNNBase], seen: list, device_type: str) -> None:
        super().__init__()
        self.inward = spied(nn.Linear, seen, device_type)(4, 8)
        self.recurrent = spied(recurrent, seen, device_type)(8, 6, batch_first=True)
        self.outward = spied(nn.Linear, seen, device_type)(6, 3)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        sequence, _ = self.recurrent(self.inward(inputs))
        return self.outward(sequence[:, -1])


def computed_in_fp32_between_bf16_layers(recurrent: type[nn.RNNBase]) -> list[tuple]:
    """What `Recurrent` saw when its recurrent layer stayed out of bf16 autocast."""
    return [
        ("Linear", True, torch.float32, torch.bfloat16),  # in autocast: computed in bf16
        (recurrent.__name__, False, torch.float32, torch.float32),  # handed the Linear's bf16, computed in fp32
        ("Linear", True, torch.float32, torch.bfloat16),
    ]  # back in autocast


@pytest.mark.parametrize("recurrent", [nn.LSTM, nn.GRU, nn.RNN])
def test_in_a_bf16_run_recurrent_layers_compute_in_fp32_outside_autocast(recurrent):
    seen = []
    setup = TrainingSetup(Recurrent(recurrent, seen, "cpu"), nn.CrossEntropyLoss(), None)
    tuned, _ = tuned_setup(setup, Tuning(precision="bf16"), CPU)
    outputs = tuned.outputs(torch.rand(2, 5, 4))
    assert seen == computed_in_fp32_between_bf16_layers(recurrent)
    assert outputs.dtype == torch.float32


def test_on_cuda_recurrent_layers_run_with_cuda_autocast_off(monkeypatch):
    """CUDA autocast runs cuDNN's RNN kernel in fp16 whatever dtype it was asked for: the layer must not see it on.
    Without a GPU: CUDA's autocast state is switched on the CPU (it only marks which ops to cast on CUDA tensors)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    seen = []
    forward = TunedForward(Recurrent(nn.LSTM, seen, "cuda"), Tuning(precision="bf16"), "cuda")
    forward(torch.rand(2, 5, 4))
    assert [(name, autocast) for name, autocast, *_ in seen] == [("Linear", True), ("LSTM", False), ("Linear", True)]


def test_a_bf16_run_of_a_recurrent_workload_says_its_recurrent_layers_ran_in_fp32(switches_untried):
    record = bf16_bilstm_run()
    assert record.status == "ok", record.error
    assert record.settings.precision == "bf16"
    assert record.tuning_note == "bf16 autocast left out the recurrent layers (2 LSTM): they ran in fp32"


# --- on a GPU (skipped without one): the same, with inductor and cuDNN ------------------------------------------

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device; this PyTorch sees none")


@pytest.mark.gpu
@needs_cuda
def test_on_a_gpu_a_compiled_tuned_run_runs_compiled():
    config = RunConfig(
        workloads=("cifar10-mlp",),
        devices="cuda",
        data="synthetic",
        epochs=2,
        max_steps=20,
        max_eval_steps=2,
        mode="tuned",
        precision="fp32",
        compile="on",
    )
    (record,) = runner.run(planning.plan(config)).runs
    assert record.status == "ok", record.error
    assert record.settings.compiled and "the fused optimizer step applied without" in record.tuning_note
    assert record.tuning_note.startswith("trial samples/s: fp32+compiled ")  # and fp32+compiled+graph (step_graph)
    assert "to run eagerly" not in record.tuning_note  # nothing was left to eager
    assert (record.compile_recompiles, record.compile_graph_breaks) == (1, 0)  # training's graph, evaluation's


@pytest.mark.gpu
@needs_cuda
def test_on_a_gpu_a_bf16_lstm_computes_in_fp32():
    """The defect itself: under bf16 autocast cuDNN's LSTM computed in fp16."""
    seen = []
    device = torch.device("cuda")
    forward = TunedForward(Recurrent(nn.LSTM, seen, "cuda").to(device), Tuning(precision="bf16"), "cuda")
    forward(torch.rand(2, 5, 4, device=device))
    assert seen == computed_in_fp32_between_bf16_layers(nn.LSTM)
