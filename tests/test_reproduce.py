"""reproduce: the right workloads per seed, and published figures beside measured ones."""

from __future__ import annotations

import pytest
from result_fixtures import machine, run, session

from devicebench.reproduce import (
    ReproduceError,
    reproductions,
    seed_workloads,
    seeds_without_workloads,
)
from devicebench.results.compare import compare


def test_seeds_select_their_workloads():
    assert [w.name for w in seed_workloads(["S1"])] == ["mnist-cnn2", "mnist-cnn4"]
    assert [w.name for w in seed_workloads(["s2", "S4"])] == ["cifar10-mlp", "cifar100-mlp"]
    assert len(seed_workloads(["all"])) >= 4


def test_unknown_or_empty_seeds_are_refused_with_what_exists():
    with pytest.raises(ReproduceError, match="unknown seed experiment S9"):
        seed_workloads(["S9"])
    missing = seeds_without_workloads(["all"])
    if missing:
        with pytest.raises(ReproduceError, match="no workloads in this version"):
            seed_workloads(missing[:1])


def test_measured_figures_sit_beside_the_published_ones():
    result = session(
        machine("laptop", "aaaa1111"),
        [run("cpu", [12, 10, 10], workload="cifar10-mlp"), run("cuda:0", [3, 2, 2], workload="cifar10-mlp")],
    )
    (entry,) = reproductions(compare([result]))
    assert entry.published.speedup == 6.6  # from the workload's own published data
    assert entry.measured_cpu_samples_per_s == pytest.approx(100.0)
    assert entry.measured_gpu_samples_per_s == pytest.approx(500.0)
    assert entry.measured_speedup == pytest.approx(5.0)
    assert entry.measured_end_to_end_ratio == pytest.approx((12 + 10 + 10 + 1) / (3 + 2 + 2 + 1))
    assert entry.measured_accuracy == pytest.approx(0.5)  # S2 quoted *training* accuracy
    assert "cpu model (cpu)" in entry.measured_hardware and entry.data_sources == "synthetic"


def test_without_a_gpu_there_is_no_measured_speedup():
    (entry,) = reproductions(compare([session(machine("laptop", "aaaa1111"), [run("cpu", [12, 10, 10])])]))
    assert entry.measured_speedup is None and entry.measured_gpu_samples_per_s is None
    assert entry.measured_accuracy == pytest.approx(0.8)  # S1 quoted test accuracy: 0.6 + 0.1 x 2
