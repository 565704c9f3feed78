"""The workload registry: every reference experiment of SEEDS.md, looked up by name or pattern.

A workload is a model builder plus what the seed trained it with (dataset, loss, optimizer, hyperparameters),
the figures the seed published, and the reduced settings of the `quick` suite. Workload files do no I/O,
read no clock and print nothing: they describe; the engine measures.

    python -c "import devicebench.workloads as w; print([x.name for x in w.list_workloads()])"
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch
from torch import nn

from devicebench.data.augmentation import Preprocessing, Rescale

Hyperparameters = Mapping[str, Any]
ModelBuilder = Callable[[Hyperparameters], Any]  # a torch model; for a workload with its own trainer, what it trains
LossBuilder = Callable[[], nn.Module]
OptimizerBuilder = Callable[[nn.Module, Hyperparameters], torch.optim.Optimizer]  # given the model being trained
PreprocessingBuilder = Callable[[Hyperparameters], Preprocessing]
DataOptions = Callable[[Hyperparameters], dict[str, Any]]  # what load_dataset needs beyond the dataset's name
# A workload that is not a torch model trained by engine/loop.py (gradient-boosted trees) brings its own trainer:
# trainer(record, dataset, device, hyperparameters, plan, watch, reporter) fills `record` epoch by epoch.
Trainer = Callable[..., None]
# What a model's output means: "logits" (one per class, softmax in the loss), "probabilities" (one per class,
# already squashed, as Keras sigmoid layers give) or "binary_logit" (one number; sigmoid > 0.5 is class 1).
OutputKind = Literal["logits", "probabilities", "binary_logit"]

SEED_EXPERIMENTS = {
    "S1": "GPU vs CPU in Convolutional Neural Networks using TensorFlow (MNIST CNNs)",
    "S2": "CPU and GPU Performance (CIFAR-10 MLP)",
    "S3": "GPU vs CPU Deep Learning: Training Performance of Convolutional Networks",
    "S4": "Exploring CPU vs GPU Speed in AI Training: A Demonstration with TensorFlow (CIFAR-100 MLP)",
    "S5": "How GPU can Powerfully Speed Up Training in Deep Learning (overview)",
}


@dataclass(frozen=True)
class Published:
    """What the seed's post reported: shown beside our measurements, never used to make them."""

    speedup: float | None  # GPU over CPU as published (a ratio of times, explained in `basis`)
    basis: str  # what the ratio compares, e.g. "steady epoch time, 59 s CPU / 9 s GPU"
    hardware: str  # the devices the post compared
    accuracy: float | None = None  # the accuracy the post reached (fraction), if it gave one
    accuracy_kind: str = "test"  # "test" or "train": which accuracy the post quoted
    epoch_time_s: Mapping[str, float] = field(default_factory=dict)  # steady epoch time by device kind: "cpu", "gpu"
    end_to_end_s: Mapping[str, float] = field(default_factory=dict)  # model creation to last epoch, by device kind
    samples_per_s: Mapping[str, float] = field(default_factory=dict)  # the above as training throughput, to set
    # beside ours even when our epochs are capped by --max-steps


@dataclass(frozen=True)
class QuickSettings:
    """The reduced run of the `quick` suite: enough steps to show a steady state, a minute or less on a laptop CPU."""

    epochs: int = 3  # one warm-up epoch and two steady ones
    max_steps: int = 60  # training steps per epoch
    max_eval_steps: int = 10  # evaluation batches per epoch


@dataclass(frozen=True)
class Workload:
    name: str
    seed: str  # experiment id in SEEDS.md: S1…S5
    dataset: str  # a name known to devicebench.data
    summary: str  # one line: the model in words
    build_model: ModelBuilder  # for a workload with its own trainer: what that trainer builds from
    defaults: Hyperparameters  # as the seed trained it; epochs always present, batch_size for torch models
    published: Published
    build_loss: LossBuilder | None = None  # None only for a workload with its own trainer
    build_optimizer: OptimizerBuilder | None = None
    image_shape: tuple[int, int, int] | None = None  # (channels, height, width) images are decoded to; None: no images
    output: OutputKind = "logits"
    build_preprocessing: PreprocessingBuilder = lambda hyperparameters: Rescale()
    data_options: DataOptions | None = None  # None: {"image_shape": image_shape}
    trainer: Trainer | None = None  # None: engine/loop.py trains the torch model
    requires: Callable[[], str | None] = lambda: None  # why it cannot run here (a missing extra), or None
    quick: QuickSettings = QuickSettings()

    def example_input(self, hyperparameters: Hyperparameters) -> torch.Tensor | None:
        """One blank input of the shape the model takes (to trace its graph); None when it is not a torch model."""
        if self.trainer is not None:
            return None
        if self.image_shape is None:  # token ids
            return torch.zeros(1, hyperparameters["sequence_length"], dtype=torch.long)
        return torch.zeros(1, *self.build_preprocessing(hyperparameters).output_shape(self.image_shape))

    def data_request(self, hyperparameters: Hyperparameters) -> dict[str, Any]:
        """The keyword arguments of load_dataset that fit this workload's model: image shape, vocabulary…"""
        if self.data_options is not None:
            return self.data_options(hyperparameters)
        return {"image_shape": self.image_shape}

    @property
    def num_classes(self) -> int | None:
        """Classes the model tells apart, from its output layer (None when it cannot be told without building)."""
        if self.output == "binary_logit":
            return 2
        if self.trainer is not None:
            return None
        with torch.device("meta"):
            last = [module for module in self.build_model(self.defaults).modules() if isinstance(module, nn.Linear)]
        return last[-1].out_features if last else None

    def parameter_count(self, hyperparameters: Hyperparameters | None = None) -> int | None:
        """Trainable parameters, counted on the meta device so that no memory is allocated; None for a workload
        that is not a torch model."""
        if self.trainer is not None:
            self.build_model(hyperparameters or self.defaults)  # still refuses values it cannot build with
            return None
        with torch.device("meta"):
            model = self.build_model(hyperparameters or self.defaults)
        return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


_REGISTRY: dict[str, Workload] = {}
_FAMILIES = ("mnist", "cifar_mlp", "cifar_cnn", "catdog", "text", "gbdt")  # modules under devicebench.workloads, one family each


def workload(
    *,
    name: str,
    seed: str,
    dataset: str,
    summary: str,
    defaults: Hyperparameters,
    published: Published,
    loss: LossBuilder | None = None,
    optimizer: OptimizerBuilder | None = None,
    image_shape: tuple[int, int, int] | None = None,
    output: OutputKind = "logits",
    preprocessing: PreprocessingBuilder | None = None,
    data_options: DataOptions | None = None,
    trainer: Trainer | None = None,
    requires: Callable[[], str | None] | None = None,
    quick: QuickSettings = QuickSettings(),
) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register the decorated model builder as a workload named `name`."""
    if seed not in SEED_EXPERIMENTS:
        raise ValueError(f"workload {name!r}: unknown seed experiment {seed!r}; known: {', '.join(SEED_EXPERIMENTS)}")
    if trainer is None and (loss is None or optimizer is None):
        raise ValueError(f"workload {name!r}: a torch model needs a loss and an optimizer")
    missing = ({"epochs"} | ({"batch_size"} if trainer is None else set())) - set(defaults)
    if missing:
        raise ValueError(f"workload {name!r}: defaults lack {', '.join(sorted(missing))}")

    def register(build_model: ModelBuilder) -> ModelBuilder:
        if name in _REGISTRY:
            raise ValueError(f"workload {name!r} is registered twice")
        _REGISTRY[name] = Workload(
            name=name,
            seed=seed,
            dataset=dataset,
            summary=summary,
            build_model=build_model,
            build_loss=loss,
            build_optimizer=optimizer,
            defaults=MappingProxyType(dict(defaults)),
            published=published,
            image_shape=image_shape,
            output=output,
            build_preprocessing=preprocessing or (lambda hyperparameters: Rescale()),
            data_options=data_options,
            trainer=trainer,
            requires=requires or (lambda: None),
            quick=quick,
        )
        return build_model

    return register


def _load_families() -> None:
    for family in _FAMILIES:
        importlib.import_module(f"{__name__}.{family}")


def list_workloads(pattern: str = "*") -> list[Workload]:
    """Workloads whose name matches the shell-style `pattern` ("mnist-*", "*mlp"), in registration order."""
    _load_families()
    return [entry for name, entry in _REGISTRY.items() if fnmatch.fnmatchcase(name, pattern.lower())]


def get_workload(name: str) -> Workload:
    """The workload called `name`; an unknown name raises KeyError listing the known ones."""
    _load_families()
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        known = ", ".join(_REGISTRY)
        raise KeyError(f"unknown workload {name!r}; known workloads: {known} (see `devicebench list`)") from None


# Optimizers and losses the seeds used, shared by the workload files.


def adam(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        model.parameters(), lr=hyperparameters["learning_rate"], eps=hyperparameters["adam_epsilon"]
    )


def sgd(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=hyperparameters["learning_rate"], momentum=hyperparameters["momentum"])


# What a model's outputs mean, for the loop's accuracy and for `predict`.


def predicted_classes(outputs: torch.Tensor, output: OutputKind) -> torch.Tensor:
    """The class index each output row stands for."""
    if output == "binary_logit":
        return (outputs.squeeze(1) > 0).long()  # a logit above 0 is a sigmoid above 0.5
    return outputs.argmax(dim=1)


def class_probabilities(outputs: torch.Tensor, output: OutputKind) -> torch.Tensor:
    """(N, classes) probabilities summing to 1 per row."""
    if output == "binary_logit":
        positive = torch.sigmoid(outputs.squeeze(1))
        return torch.stack([1 - positive, positive], dim=1)
    if output == "probabilities":
        return outputs / outputs.sum(dim=1, keepdim=True)  # how Keras' cross-entropy reads sigmoid outputs
    return torch.softmax(outputs, dim=1)


class BinaryCrossEntropy(nn.Module):
    """Keras' `binary_crossentropy` after a sigmoid, computed from the logit for numerical stability."""

    def forward(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.binary_cross_entropy_with_logits(logits.squeeze(1), labels.float())
