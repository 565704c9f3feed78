"""FLOPs per training sample, counted on the meta device, and achieved TFLOP/s from them: checked against sums
done by hand for two of the seeds' models."""

from __future__ import annotations

import functools

import pytest
import torch
from result_fixtures import machine, run, session

from devicebench.engine.flops import training_flops_per_sample
from devicebench.results.compare import compare
from devicebench.results.store import Store
from devicebench.workloads import get_workload


def flops(name: str, **changes) -> float | None:
    entry = get_workload(name)
    return training_flops_per_sample(entry, {**entry.defaults, **changes})


def test_the_cifar10_mlp_costs_what_its_three_matrix_products_do():
    forward = 2 * (3072 * 3000 + 3000 * 1000 + 1000 * 10)  # multiply-adds of the three Dense layers, x2
    input_gradients = 2 * (3000 * 1000 + 1000 * 10)  # none for the first layer: the data needs no gradient
    assert flops("cifar10-mlp") == forward + forward + input_gradients == 54_924_000


def test_the_mnist_cnn2_costs_what_its_convolutions_and_dense_layers_do():
    forward = [2 * 28 * 28 * 32 * 5 * 5 * 1, 2 * 14 * 14 * 64 * 5 * 5 * 32, 2 * 7 * 7 * 64 * 1024, 2 * 1024 * 10]
    assert flops("mnist-cnn2") == 2 * sum(forward) + sum(forward[1:]) == 82_049_024


def test_the_count_follows_the_parameters_and_skips_what_is_not_a_torch_model():
    assert flops("catdog-deep", depth=8) < flops("catdog-deep", depth=16) < flops("catdog-deep")
    assert flops("gbdt-synthetic") is None


def test_achieved_tflops_are_flops_per_sample_times_samples_per_second(tmp_path):
    record = run("cpu", [2.0, 1.0, 0.5])  # 1,000 samples an epoch: 1,000 and 2,000 samples/s in steady state
    record.flops_per_sample = 1e9
    [row] = compare([session(machine("laptop", "aaa"), [record])])["mnist-cnn2"]
    assert row.tflops.median == pytest.approx(1.5) and (row.tflops.low, row.tflops.high) == pytest.approx((1, 2))
    with Store(tmp_path / "runs.sqlite") as store:  # kept by the store like every other field
        store.import_result(session(machine("laptop", "aaa"), [record]))
        assert store.results()[0].runs[0].flops_per_sample == 1e9


# --- recurrent layers: counted by formula, as their per-step decomposition counts them --------------------------


def decomposed(monkeypatch, count, *arguments):
    """`count(*arguments)` with every recurrent call run as torch breaks it into steps on the meta device (seconds
    for a long sequence), the way the formula's count is checked."""
    import devicebench.engine.flops as counting
    import devicebench.engine.fused_recurrence as recurrence

    with monkeypatch.context() as patched:
        patched.setattr(recurrence, "recurrent_call", lambda gates, args: None)
        counting._counted.cache_clear()
        try:
            return count(*arguments)
        finally:
            counting._counted.cache_clear()


def recurrent_step_flops(kind: str, layers: int, bidirectional: bool, batch_first: bool, needs: str) -> float:
    """FLOPs of a forward and backward pass of a small recurrent stack (5 steps, 3 sequences, 7 features, 4 units),
    counted as engine/flops.py counts a model: `needs` names what needs a gradient besides the weights: the input
    (x), the initial states (h), the first layer's weights frozen (frozen)."""
    from torch.utils.flop_counter import FlopCounterMode

    from devicebench.engine.flops import _CountedRecurrence

    layer = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU, "rnn": torch.nn.RNN}[kind]
    with torch.device("meta"):
        stack = layer(7, 4, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
    if "frozen" in needs:
        for name, weight in stack.named_parameters():
            weight.requires_grad_(not name.removesuffix("_reverse").endswith("_l0"))
    directions = 2 if bidirectional else 1
    inputs = torch.zeros((3, 5, 7) if batch_first else (5, 3, 7), device="meta", requires_grad="x" in needs)
    hidden = torch.zeros(layers * directions, 3, 4, device="meta", requires_grad="h" in needs)
    states = (hidden, torch.zeros_like(hidden)) if kind == "lstm" else hidden
    with FlopCounterMode(display=False) as counter, _CountedRecurrence() as recurrent:
        output, _ = stack(inputs, states)
        output.sum().backward()
    return counter.get_total_flops() + recurrent.flops


@pytest.mark.parametrize(
    "kind, layers, bidirectional, batch_first, needs",
    [
        ("lstm", 1, False, False, ""),
        ("lstm", 2, True, True, "x"),
        (
            "lstm",
            2,
            True,
            False,
            "h",
        ),  # the states need a gradient, the input not: only the first layer's input has none
        ("lstm", 2, False, True, "x,frozen"),
        ("lstm", 2, True, False, "frozen"),  # nothing below the second layer needs a gradient
        ("gru", 2, True, True, "x,h"),
        ("gru", 1, False, False, "h,frozen"),
        ("rnn", 2, False, False, "x"),
        ("rnn", 2, True, True, "h,frozen"),
    ],
)
def test_a_recurrent_stack_counts_what_its_per_step_decomposition_counts(
    monkeypatch, kind, layers, bidirectional, batch_first, needs
):
    arguments = (kind, layers, bidirectional, batch_first, needs)
    by_formula = recurrent_step_flops(*arguments)
    assert by_formula > 0 and by_formula == decomposed(monkeypatch, recurrent_step_flops, *arguments)


def test_the_text_and_translation_models_count_what_they_counted_step_by_step(monkeypatch):
    """imdb-bilstm's 200 steps took 6 s to count step by step on 2 cores, gnmt's 3 s; shorter sequences here."""
    for name, shorter in (("imdb-bilstm", {"sequence_length": 20}), ("gnmt", {"source_length": 6, "target_length": 4})):
        counted = flops(name, **shorter)
        assert counted and counted == decomposed(monkeypatch, functools.partial(flops, name, **shorter))


def test_the_recurrent_layers_are_counted_by_the_formula_not_by_torchs_steps(monkeypatch):
    """The tests above hold the formula equal to torch's per-step count, which a mode that let every call through
    would pass too (both sides would be torch's count): here each of imdb-bilstm's calls must reach the formula.
    Its two BiLSTM layers are two nn.LSTM calls."""
    import devicebench.engine.flops as counting

    calls = []

    def counted_stand_in(call, inputs, states_and_weights):
        calls.append(call)
        return stand_in_outputs(call, inputs, states_and_weights)

    stand_in_outputs = counting.stand_in_outputs
    monkeypatch.setattr(counting, "stand_in_outputs", counted_stand_in)
    counting._counted.cache_clear()
    try:
        assert flops("imdb-bilstm", sequence_length=20)
    finally:
        counting._counted.cache_clear()
    assert [(call.gates, call.directions, call.steps) for call in calls] == [(4, 2, 20)] * 2
