"""FLOPs per training sample, counted on the meta device, and achieved TFLOP/s from them: checked against sums
done by hand for two of the seeds' models."""

from __future__ import annotations

import pytest
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
