"""What every workload must do, as one check that devicebench's registry-driven tests and any plugin's tests run.

A plugin package covers all its workloads, and every one it adds later, with one parametrized test:

    import pytest
    from devicebench.testing import check_workload, workloads_from

    @pytest.mark.parametrize("workload", workloads_from("my-plugin-distribution"), ids=lambda w: w.name)
    def test_workload_meets_devicebench_contract(workload):
        check_workload(workload)

`check_workload` raises AssertionError saying what is wrong. It needs no network and no GPU: it trains on a
few synthetic samples shaped like the workload's dataset (or the first samples of a workload's own data).

    python -c "from devicebench.testing import check_workload as c; from devicebench import get_workload as g; c(g('mnist-cnn2'))"
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from devicebench.data import known_datasets
from devicebench.data.augmentation import CifarDistortion, KerasAugmentation, Preprocessing, Rescale
from devicebench.data.pipeline import batches_for
from devicebench.data.sequences import synthetic_sequences
from devicebench.data.sources import dataset_spec
from devicebench.data.synthetic import synthetic_dataset
from devicebench.data.text import synthetic_text
from devicebench.engine.flops import training_flops_per_sample
from devicebench.workloads import SEED_EXPERIMENTS, Workload, list_workloads
from devicebench.workloads.outputs import predicted_classes

SAMPLES = 16  # in the one batch a workload must learn
LEARNING_STEPS = 30  # the dropout-regularised binary nets of S3 take ~25 steps to leave ln 2
REQUIRED_FALL = 0.8  # the last step's loss must be below this share of the first's


def workloads_from(origin: str) -> list[Workload]:
    """The registered workloads that `origin` (a plugin's distribution name, or "devicebench") added."""
    return [entry for entry in list_workloads() if entry.origin == origin]


def check_workload(workload: Workload, hyperparameters: dict[str, Any] | None = None) -> None:
    """Assert that `workload` declares what a user needs and, if it is a torch model, that it builds the same on
    the meta device as for real, gives an output per sample of the right width, learns one small batch (its
    loss falls by a fifth within LEARNING_STEPS steps at its own settings) and has its FLOPs counted.

    `hyperparameters`: its defaults with some changed, to check a smaller variant of a slow model.
    """
    hyperparameters = {**workload.defaults, **(hyperparameters or {})}
    _check_declaration(workload)
    if workload.trainer is not None:  # a workload with a trainer of its own is tested by its own tests
        return
    torch.manual_seed(0)
    model = workload.build_model(hyperparameters)
    real_count = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
    assert workload.parameter_count(hyperparameters) == real_count, (
        f"{workload.name}: built on the meta device it has {workload.parameter_count(hyperparameters):,} "
        f"parameters, for real {real_count:,}; build every layer inside the builder"
    )
    dataset = _tiny_dataset(workload, hyperparameters)
    unaugmented = _unaugmented(workload.build_preprocessing(hyperparameters))  # one fixed batch to learn
    train, test = batches_for(
        dataset, workload.image_shape, unaugmented, SAMPLES, torch.device("cpu"), workers=0, seed=0
    )
    inputs, targets = next(iter(train.epoch(1)))
    train.close()
    test.close()
    _check_outputs(workload, model(inputs), targets, dataset.num_classes)
    _check_learns(workload, model, hyperparameters, inputs, targets)
    assert training_flops_per_sample(workload, hyperparameters), (
        f"{workload.name}: its FLOPs could not be counted on the meta device (see the warning logged)"
    )


def _unaugmented(preprocessing: Preprocessing) -> Preprocessing:
    """A workload's preprocessing without its random distortions, so that the batch to learn stays the same: the
    same kind that makes its test inputs, with nothing random to draw."""
    if isinstance(preprocessing, KerasAugmentation):
        return Rescale()  # Keras' test images are only rescaled (KerasAugmentation.test is Rescale's)
    if isinstance(preprocessing, CifarDistortion):
        return dataclasses.replace(preprocessing, augment=False)  # training gets the centre crop of evaluation
    assert not preprocessing.augments, f"{preprocessing} distorts: say here what it does without distortions"
    return preprocessing


def _check_declaration(workload: Workload) -> None:
    name = workload.name
    assert workload.summary, f"{name}: give a one-line summary of the model"
    assert workload.defaults.get("epochs", 0) >= 1, f"{name}: defaults need epochs of at least 1"
    if workload.trainer is None:
        assert workload.defaults.get("batch_size", 0) >= 1, f"{name}: defaults need a batch_size of at least 1"
    assert workload.quick.epochs >= 2, f"{name}: the quick suite needs a warm-up epoch and a steady one"
    assert workload.seed is None or workload.seed in SEED_EXPERIMENTS, f"{name}: unknown seed {workload.seed!r}"
    if workload.published is not None:
        assert workload.published.hardware and workload.published.basis, (
            f"{name}: published figures need the hardware they came from and what they compare"
        )
    if workload.load_data is None and workload.trainer is None:  # a trainer of its own may make its data
        assert workload.dataset in known_datasets(), (
            f"{name}: unknown dataset {workload.dataset!r}; known: {', '.join(known_datasets())}"
        )


def _tiny_dataset(workload: Workload, hyperparameters: dict[str, Any]) -> Any:
    """SAMPLES training samples shaped like the workload's data: synthetic, or its own data's first ones."""
    if workload.load_data is not None:
        return workload.load_data()
    request = workload.data_request(hyperparameters)
    kind = dataset_spec(workload.dataset).kind
    if kind in ("text", "sequences"):
        make = synthetic_text if kind == "text" else synthetic_sequences
        return make(workload.dataset, seed=0, train_size=SAMPLES, test_size=SAMPLES // 2, **request)
    return synthetic_dataset(workload.dataset, seed=0, train_size=SAMPLES, test_size=SAMPLES // 2, **request)


def _check_outputs(workload: Workload, outputs: torch.Tensor, targets: torch.Tensor, classes: int | None) -> None:
    samples = len(targets)
    assert len(outputs) == samples, f"{workload.name}: {len(outputs)} outputs for {samples} samples"
    if workload.output == "values" or classes is None:
        return  # a regression, or data whose classes are not known before reading every label
    width = 1 if workload.output == "binary_logit" else classes
    expected = (*targets.shape, width) if workload.output == "token_logits" else (samples, width)  # a row a position
    assert outputs.shape == expected, (
        f"{workload.name}: outputs of shape {tuple(outputs.shape)} for {samples} samples of {classes} classes; "
        f"expected {expected} for output kind {workload.output!r}"
    )
    if workload.num_classes is not None:
        assert workload.num_classes == classes, (
            f"{workload.name}: its last layer tells {workload.num_classes} classes apart, its data has {classes}"
        )


def _check_learns(
    workload: Workload,
    model: torch.nn.Module,
    hyperparameters: dict[str, Any],
    inputs: torch.Tensor,
    targets: torch.Tensor,
) -> None:
    assert workload.build_loss is not None and workload.build_optimizer is not None, (
        f"{workload.name}: a torch model needs a loss and an optimizer"
    )
    loss_function = workload.build_loss()
    optimizer = workload.build_optimizer(model, hyperparameters)
    losses = []
    for _ in range(LEARNING_STEPS):
        if workload.train_step is not None:
            returned = workload.train_step(model, (inputs, targets), optimizer)
            loss = returned[0] if isinstance(returned, tuple) else returned
        else:
            assert loss_function is not None, f"{workload.name}: without a train_step of its own it needs a loss"
            loss = loss_function(model(inputs), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses.append(float(loss.detach()))
    assert losses[-1] < losses[0] * REQUIRED_FALL, (
        f"{workload.name}: the loss did not fall by a fifth in {LEARNING_STEPS} steps on one batch: "
        f"{losses[0]:.4g} → {losses[-1]:.4g}"
    )
    if workload.output != "values":
        predicted = predicted_classes(model(inputs), workload.output)
        assert predicted.shape == targets.shape, f"{workload.name}: predictions of shape {tuple(predicted.shape)}"
