"""The workload registry: every reference experiment of SEEDS.md, looked up by name or pattern.

A workload is a model builder plus what the seed trained it with (dataset, loss, optimizer, hyperparameters),
the figures the seed published, and the reduced settings of the `quick` suite. Workload files do no I/O,
read no clock and print nothing: they describe; the engine measures.

    python -c "import devicebench.workloads as w; print([x.name for x in w.list_workloads()])"
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

Hyperparameters = Mapping[str, Any]
ModelBuilder = Callable[[Hyperparameters], nn.Module]
LossBuilder = Callable[[], nn.Module]
OptimizerBuilder = Callable[[Iterable[nn.Parameter], Hyperparameters], torch.optim.Optimizer]

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
    build_model: ModelBuilder
    build_loss: LossBuilder
    build_optimizer: OptimizerBuilder
    defaults: Hyperparameters  # as the seed trained it; batch_size and epochs always present
    published: Published
    quick: QuickSettings = QuickSettings()

    def parameter_count(self, hyperparameters: Hyperparameters | None = None) -> int:
        """Trainable parameters, counted on the meta device so that no memory is allocated."""
        with torch.device("meta"):
            model = self.build_model(hyperparameters or self.defaults)
        return sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)


_REGISTRY: dict[str, Workload] = {}
_FAMILIES = ("mnist", "cifar_mlp")  # modules under devicebench.workloads, one family each


def workload(
    *,
    name: str,
    seed: str,
    dataset: str,
    summary: str,
    loss: LossBuilder,
    optimizer: OptimizerBuilder,
    defaults: Hyperparameters,
    published: Published,
    quick: QuickSettings = QuickSettings(),
) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register the decorated model builder as a workload named `name`."""
    if seed not in SEED_EXPERIMENTS:
        raise ValueError(f"workload {name!r}: unknown seed experiment {seed!r}; known: {', '.join(SEED_EXPERIMENTS)}")
    missing = {"batch_size", "epochs"} - set(defaults)
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


def adam(parameters: Iterable[nn.Parameter], hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.Adam(
        parameters, lr=hyperparameters["learning_rate"], eps=hyperparameters["adam_epsilon"]
    )


def sgd(parameters: Iterable[nn.Parameter], hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
    return torch.optim.SGD(parameters, lr=hyperparameters["learning_rate"], momentum=hyperparameters["momentum"])
