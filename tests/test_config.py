"""What `devicebench run` is asked for: suites, precedence of flags, and clear refusals."""

from __future__ import annotations

import pytest

from devicebench import planning
from devicebench.config import QUICK_BUDGET_S, REFERENCE_BUDGET_S, ConfigError, RunConfig
from devicebench.workloads import get_workload, list_workloads


def test_no_names_means_the_quick_suite_of_every_workload_but_the_reference_models():
    config = RunConfig()
    assert config.effective_suite == "quick"
    assert [w.name for w in config.selected_workloads()] == [w.name for w in list_workloads() if w.in_suites]
    assert "gnmt" not in [w.name for w in config.selected_workloads()]  # hours an epoch on a CPU: only when named
    assert {"bert-base", "bert-large", "gpt2-small"} <= {w.name for w in list_workloads() if not w.in_suites}
    assert {"resnet50", "resnet152", "vgg16"} <= {w.name for w in list_workloads() if not w.in_suites}
    entry = get_workload("cifar10-mlp")
    plan = config.plan_for(entry)
    # within the quick suite's time budget the runner sizes the steps; evaluation keeps the quick suite's cap
    assert (plan.epochs, plan.max_steps, plan.max_eval_steps) == (entry.quick.epochs, None, entry.quick.max_eval_steps)
    without_budget = RunConfig(max_steps=entry.quick.max_steps).plan_for(entry)
    assert (without_budget.epochs, without_budget.max_steps) == (entry.quick.epochs, entry.quick.max_steps)


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
        ({"workloads": ("resnet18",)}, "unknown workload 'resnet18'.*mnist-cnn2"),
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


def test_set_overrides_a_parameter_with_the_type_of_its_default():
    config = RunConfig(workloads=("cifar10-mlp",), overrides=("learning_rate=0.1", "momentum=0.9"))
    entry = get_workload("cifar10-mlp")
    assert config.overrides_for(entry) == {"learning_rate": 0.1, "momentum": 0.9}
    hyperparameters = config.hyperparameters_for(entry)
    assert (hyperparameters["learning_rate"], hyperparameters["batch_size"]) == (0.1, 32)
    optimizer = entry.build_optimizer(entry.build_model(hyperparameters), hyperparameters)
    assert (optimizer.defaults["lr"], optimizer.defaults["momentum"]) == (0.1, 0.9)


def test_set_batch_size_and_epochs_act_like_their_flags():
    config = RunConfig(workloads=("mnist-cnn2",), overrides=("batch_size=128", "epochs=2"))
    assert config.batch_size_for(get_workload("mnist-cnn2")) == 128
    assert config.plan_for("mnist-cnn2").epochs == 2


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (("depth=8",), "cifar10-mlp has no parameter 'depth'; its parameters: batch_size, epochs, learning_rate"),
        (("learning_rate",), "is not KEY=VALUE"),
        (("learning_rate=fast",), "learning_rate is a float \\(its default is 0.01\\)"),
        (("batch_size=3.5",), "batch_size is a int"),
        (("learning_rate=-1",), "zero or more"),
        (("learning_rate=nan",), "finite"),
        (("batch_size=0",), "at least 1"),
        (("momentum=0.5", "momentum=0.9"), "given twice"),
    ],
)
def test_bad_set_values_are_refused_with_what_was_expected(overrides, message):
    with pytest.raises(ConfigError, match=message):
        RunConfig(workloads=("cifar10-mlp",), overrides=overrides)


def test_set_and_its_flag_together_are_refused():
    with pytest.raises(ConfigError, match="--set batch_size and --batch-size both given"):
        RunConfig(workloads=("cifar10-mlp",), overrides=("batch_size=64",), batch_size=32)


def test_a_parameter_must_exist_in_every_selected_workload():
    with pytest.raises(ConfigError, match="mnist-cnn2 has no parameter 'momentum'"):
        RunConfig(workloads=("mnist-cnn2", "cifar10-mlp"), overrides=("momentum=0.9",))


def test_numbers_a_run_cannot_hold_are_refused_and_the_largest_storable_passes(monkeypatch):
    from devicebench.config import LARGEST_WHOLE_NUMBER

    largest = dict(workloads=("mnist-cnn2",), max_eval_steps=LARGEST_WHOLE_NUMBER, seed=LARGEST_WHOLE_NUMBER)
    assert RunConfig(**largest).seed == 2**63 - 1  # SQLite's largest INTEGER is still a run
    for name in ("epochs", "batch_size", "max_steps", "max_eval_steps", "repeats", "seed"):
        with pytest.raises(ConfigError, match=f"--{name.replace('_', '-')} {2**63} is too large"):
            RunConfig(workloads=("mnist-cnn2",), **{name: 2**63})
    with pytest.raises(ConfigError, match="--seed must be 0 or more, got -1"):
        RunConfig(workloads=("mnist-cnn2",), seed=-1)
    monkeypatch.setattr("os.cpu_count", lambda: 4)
    assert RunConfig(workloads=("mnist-cnn2",), threads=4, workers=4).threads == 4
    with pytest.raises(ConfigError, match="--threads 5 is more than this machine's 4 logical cores.*--threads 4 or"):
        RunConfig(workloads=("mnist-cnn2",), threads=5)
    with pytest.raises(ConfigError, match="--workers 5 is more than this machine's 4 logical cores"):
        RunConfig(workloads=("mnist-cnn2",), workers=5)


# --- the time budget asked for: how many seconds (devicebench/budget.py spends them) ------------------------------


@pytest.mark.slow
def test_the_quick_suite_has_a_budget_unless_its_steps_are_given():
    quick = RunConfig(devices="cpu")
    assert quick.effective_budget_s == QUICK_BUDGET_S
    plan = planning.plan(quick)
    assert plan.budget_s == QUICK_BUDGET_S
    sized = {job.workload.name: job.training for job in plan.jobs}
    assert sized["mnist-cnn2"].max_steps is None  # the runner sizes it
    assert sized["mnist-cnn2"].max_eval_steps == 10  # the quick suite's evaluation cap stays
    if "gbdt-synthetic" in sized:  # a trainer of its own keeps the quick suite's rounds: it is not sized
        assert sized["gbdt-synthetic"].max_steps is not None
    assert RunConfig(devices="cpu", max_steps=5).effective_budget_s is None
    assert RunConfig(workloads=("mnist-cnn2",), devices="cpu").effective_budget_s is None
    assert RunConfig(workloads=("mnist-cnn2",), devices="cpu", budget_s=300).effective_budget_s == 300
    assert (
        planning.Plan.from_dict(
            planning.plan(RunConfig(workloads=("mnist-cnn2",), devices="cpu", budget_s=300)).to_dict()
        ).budget_s
        == 300
    )


def test_max_steps_caps_evaluation_unless_max_eval_steps_is_given():
    assert RunConfig(devices="cpu", workloads=("mnist-cnn2",), max_steps=7).plan_for("mnist-cnn2").max_eval_steps == 7
    given = RunConfig(devices="cpu", workloads=("mnist-cnn2",), max_steps=7, max_eval_steps=50)
    assert given.plan_for("mnist-cnn2").max_eval_steps == 50


@pytest.mark.parametrize("seconds", [0.0, -5.0, float("nan"), float("inf")])
def test_an_impossible_budget_is_refused(seconds):
    with pytest.raises(ConfigError, match="--budget"):
        RunConfig(devices="cpu", budget_s=seconds)


def test_a_budget_is_refused_with_several_processes():
    with pytest.raises(ConfigError, match="--budget.*--nproc"):
        RunConfig(workloads=("mnist-cnn2",), devices="cpu", budget_s=60, nproc=2)


def test_a_reference_model_named_alone_gets_a_budget_unless_its_length_is_given():
    assert RunConfig(workloads=("resnet50",), devices="cpu").effective_budget_s == REFERENCE_BUDGET_S
    assert (
        RunConfig(workloads=("resnet50", "gpt2-small", "mnist-cnn2"), devices="cpu").effective_budget_s
        == 2 * REFERENCE_BUDGET_S
    )  # each reference model its own; a seed's workload named runs as published
    assert RunConfig(workloads=("resnet50",), devices="cpu", epochs=2).effective_budget_s is None
    assert RunConfig(workloads=("resnet50",), devices="cpu", max_steps=5).effective_budget_s is None
    assert RunConfig(workloads=("resnet50",), devices="cpu", budget_s=30).effective_budget_s == 30
    assert RunConfig(workloads=("mnist-cnn2",), devices="cpu").effective_budget_s is None
