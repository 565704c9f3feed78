"""What `devicebench run` is asked for: suites, precedence of flags, and clear refusals."""

from __future__ import annotations

import pytest

from devicebench.config import ConfigError, RunConfig
from devicebench.workloads import get_workload, list_workloads


def test_no_names_means_the_quick_suite_of_every_workload():
    config = RunConfig()
    assert config.effective_suite == "quick"
    assert [w.name for w in config.selected_workloads()] == [w.name for w in list_workloads()]
    entry = get_workload("cifar10-mlp")
    plan = config.plan_for(entry)
    assert (plan.epochs, plan.max_steps, plan.max_eval_steps) == (
        entry.quick.epochs, entry.quick.max_steps, entry.quick.max_eval_steps)


def test_named_workloads_run_at_their_seed_settings():
    plan = RunConfig(workloads=("cifar10-mlp",)).plan_for("cifar10-mlp")
    assert (plan.epochs, plan.max_steps, plan.max_eval_steps) == (10, None, None)


def test_explicit_flags_beat_the_suite():
    config = RunConfig(suite="quick", epochs=5, max_steps=7, batch_size=64)
    plan = config.plan_for("mnist-cnn2")
    assert (plan.epochs, plan.max_steps) == (5, 7)
    assert config.batch_size_for(get_workload("mnist-cnn2")) == 64
    assert RunConfig().batch_size_for(get_workload("mnist-cnn2")) == 50


def test_patterns_select_without_duplicates():
    config = RunConfig(workloads=("mnist-*", "mnist-cnn2"))
    assert [w.name for w in config.selected_workloads()] == ["mnist-cnn2", "mnist-cnn4"]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"workloads": ("resnet50",)}, "unknown workload 'resnet50'.*mnist-cnn2"),
        ({"workloads": ("vit-*",)}, "no workload matches 'vit-\\*'"),
        ({"suite": "fast"}, "unknown suite 'fast'.*quick, seeds"),
        ({"data": "fake"}, "unknown data source 'fake'"),
        ({"epochs": 0}, "--epochs must be .* at least 1, got 0"),
        ({"batch_size": -32}, "--batch-size must be"),
        ({"repeats": 0}, "--repeats must be"),
        ({"threads": 0}, "--threads must be"),
        ({"target_accuracy": 98.0}, r"a fraction in \(0, 1\].*write 0.98"),
    ],
)
def test_impossible_requests_are_refused_with_the_fix(arguments, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(**arguments)
