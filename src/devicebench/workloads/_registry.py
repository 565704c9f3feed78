"""The workload registry: what a workload is (`Workload`), `@workload` that registers one, the lookups by name or
pattern, and the loader that fills the registry from devicebench's workload families and the installed plugins.

A workload is a model builder plus what the seed trained it with (dataset, loss, optimizer, hyperparameters),
the figures the seed published, and the reduced settings of the `quick` suite. Workload files do no I/O,
read no clock and print nothing: they describe; the engine measures.

Other packages add workloads through the entry-point group `devicebench.workloads`: each entry point names a
module whose import registers workloads with `@devicebench.workload` (see examples/plugin). A user's own model
(`devicebench.run(model=...)`, `devicebench run --model`) is a workload too, registered for the session only
(`register_own`): it can be looked up by name but is never part of a suite. The package (`devicebench.workloads`)
re-exports the public names; import them from there.

    python -c "from devicebench.workloads import get_workload; print(get_workload('resnet50').name)"
"""

from __future__ import annotations

import contextlib
import fnmatch
import importlib
import logging
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, Literal

import torch
from torch import nn

from devicebench.data.augmentation import Preprocessing, Rescale
from devicebench.data.sequences import target_shape

Hyperparameters = Mapping[str, Any]
ModelBuilder = Callable[[Hyperparameters], Any]  # a torch model; for a workload with its own trainer, what it trains
LossBuilder = Callable[[], nn.Module | None]  # None: the workload's own train_step computes the loss (a user's model)
OptimizerBuilder = Callable[[nn.Module, Hyperparameters], torch.optim.Optimizer]  # given the model being trained
PreprocessingBuilder = Callable[[Hyperparameters], Preprocessing]
DataOptions = Callable[[Hyperparameters], dict[str, Any]]  # what load_dataset needs beyond the dataset's name
# A workload that is not a torch model trained by engine/loop.py names the engine's trainer that trains it instead:
# "boosted-trees" (engine/boosting.py: XGBoost). A workload describes; the engine trains and times.
Trainer = Literal["boosted-trees"]
# What a model's output means: "logits" (one per class, softmax in the loss), "probabilities" (one per class,
# already squashed, as Keras sigmoid layers give), "binary_logit" (one number; sigmoid > 0.5 is class 1) or
# "values" (no classes: a regression, whose runs have no accuracy), or "token_logits": (N, positions, classes) scores,
# a class at each position of a sequence (the next token, an answer's start and end), with (N, positions) targets;
# its accuracy is over positions.
OutputKind = Literal["logits", "probabilities", "binary_logit", "values", "token_logits"]
# Tokens one sample holds, for a workload whose published figures count tokens/s (a language model's sequence)
TokensPerSample = Callable[[Hyperparameters], int]
# A step that is not "forward, loss, backward, optimizer step" (a user's model): given the model as the engine
# runs it, a batch (inputs, targets) on the device and the optimizer, it does the whole step and returns the
# loss tensor, or (loss, outputs) for the training accuracy. The engine times it like any step.
TrainStep = Callable[
    [nn.Module, tuple[torch.Tensor, torch.Tensor], torch.optim.Optimizer],
    "torch.Tensor | tuple[torch.Tensor, torch.Tensor]",
]
PLUGIN_GROUP = "devicebench.workloads"  # the entry-point group through which packages add workloads
# The largest model any workload may be built with: 10^9 parameters, 4 GB of float32 weights before gradients and
# optimizer state, some 80 times the largest seed model. Counted on the meta device (no memory), and only after
# every size hyperparameter a workload declares (`size_bounds`) is within its bound, so that the count itself
# never builds 10^8 modules: a `--set` value or a checkpoint from someone else can name any size at all.
MAX_PARAMETERS = 1_000_000_000

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
    batch_size: int | None = None  # the batch size the published throughput was measured at, when it differs from
    # the defaults (None: at the workload's default batch size, as far as the post says)


class ModelTooLarge(ValueError):
    """Hyperparameters that would build a model past a bound; the message names the value and the bound."""


@dataclass(frozen=True)
class QuickSettings:
    """The reduced run of the `quick` suite: enough steps to show a steady state, a minute or less on a laptop CPU."""

    epochs: int = 3  # one warm-up epoch and two steady ones
    max_steps: int = 60  # training steps per epoch
    max_eval_steps: int = 10  # evaluation batches per epoch


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: a cache key for what is counted once
class Workload:
    name: str
    seed: str | None  # experiment id in SEEDS.md: S1…S5; None for a workload that is not a seed's
    dataset: str  # a name known to devicebench.data, or the name of the data `load_data` gives
    summary: str  # one line: the model in words
    build_model: ModelBuilder  # for a workload with its own trainer: what that trainer builds from
    defaults: Hyperparameters  # as the seed trained it; epochs always present, batch_size for torch models
    published: Published | None = None  # None: nothing published to set beside the measurements
    build_loss: LossBuilder | None = None  # None only for a workload with its own trainer
    build_optimizer: OptimizerBuilder | None = None
    image_shape: tuple[int, int, int] | None = None  # (channels, height, width) images are decoded to; None: no images
    output: OutputKind = "logits"
    build_preprocessing: PreprocessingBuilder = lambda hyperparameters: Rescale()
    data_options: DataOptions | None = None  # None: {"image_shape": image_shape}
    trainer: Trainer | None = None  # None: engine/loop.py trains the torch model
    requires: Callable[[], str | None] = lambda: None  # why it cannot run here (a missing extra), or None
    quick: QuickSettings = QuickSettings()
    load_data: Callable[[], Any] | None = None  # its own data (TensorData, TorchData), not a named dataset's
    train_step: TrainStep | None = None  # None: forward, loss, backward, optimizer step
    origin: str = "devicebench"  # who defined it: devicebench, a plugin's distribution, or "your model"
    # The largest value of each hyperparameter that multiplies the model's modules or parameters (layers, widths):
    # checked before anything is built, even on the meta device (see MAX_PARAMETERS).
    size_bounds: Mapping[str, int] = field(default_factory=dict)
    # False: run only when named (a reference model: hours on a CPU), never in the quick or seeds suite
    in_suites: bool = True
    tokens_per_sample: TokensPerSample | None = None  # None: its samples are not counted in tokens
    # The lengths (hyperparameters: tokens of a sequence) a time budget may halve when even the smallest batch
    # cannot fit its share (budget.fit_to_share): a reference language model on a laptop
    budget_lengths: tuple[str, ...] = ()

    def example_batch(self, hyperparameters: Hyperparameters) -> tuple[torch.Tensor, torch.Tensor] | None:
        """One sample's (input, target) of the shape the model takes, to count FLOPs and trace the graph; None
        when it is not a torch model."""
        if self.trainer is not None:
            return None
        if self.load_data is not None:
            return self.load_data().example()
        label = torch.zeros(1, dtype=torch.long)
        if self.image_shape is None:  # token ids, as many as its data's rows hold
            request = self.data_request(hyperparameters)
            if self.output == "token_logits":  # a label at each of several positions
                shape = target_shape(request["sequence_length"], request["task"], request.get("target_length"))
                label = torch.zeros(1, *shape, dtype=torch.long)
            return torch.zeros(1, request["sequence_length"], dtype=torch.long), label
        return torch.zeros(1, *self.build_preprocessing(hyperparameters).output_shape(self.image_shape)), label

    def data_request(self, hyperparameters: Hyperparameters) -> dict[str, Any]:
        """The keyword arguments of load_dataset that fit this workload's model: image shape, vocabulary…"""
        if self.data_options is not None:
            return self.data_options(hyperparameters)
        return {} if self.load_data is not None else {"image_shape": self.image_shape}

    @property
    def num_classes(self) -> int | None:
        """Classes the model tells apart, from its output layer (None when it cannot be told without building)."""
        if self.output == "binary_logit":
            return 2
        if self.trainer is not None or self.load_data is not None or self.output in ("values", "token_logits"):
            return None  # a user's model: its data says how many classes there are; a sequence's: positions or tokens
        with torch.device("meta"):
            last = [module for module in self.build_model(self.defaults).modules() if isinstance(module, nn.Linear)]
        return last[-1].out_features if last else None

    def typed_hyperparameters(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """The defaults with `given`'s values, each of the type its default has (a finite number where the default
        is a float): for settings read from a file anyone may have written (a checkpoint, a stored run), which
        would otherwise build a model from a string batch size. ValueError naming the first that is unknown or of
        another type; the sizes are checked apart (check_size_bounds)."""
        checked = dict(self.defaults)
        for name, value in given.items():
            if name not in self.defaults:
                raise ValueError(f"{self.name} has no parameter {name!r}")
            default = self.defaults[name]
            if isinstance(default, bool):
                fits = isinstance(value, bool)
            elif isinstance(default, int):
                fits = isinstance(value, int) and not isinstance(value, bool)
            elif isinstance(default, float):
                fits = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            else:
                fits = isinstance(value, type(default))
            if not fits:
                raise ValueError(
                    f"{name} is {type(value).__name__} {value!r:.60}, where {self.name} takes a finite "
                    f"{type(default).__name__}"
                )
            checked[name] = value
        return checked

    def check_size_bounds(self, hyperparameters: Hyperparameters) -> None:
        """Raise ModelTooLarge when a size hyperparameter (`size_bounds`) is not a whole number within its bound:
        the check that comes before any model is built, on any device."""
        for name, bound in self.size_bounds.items():
            value = hyperparameters.get(name, self.defaults.get(name))
            if not isinstance(value, int) or isinstance(value, bool):
                raise ModelTooLarge(f"{self.name}: {name} must be a whole number, got {value!r}")
            if value > bound:
                raise ModelTooLarge(
                    f"{self.name}: {name}={value} is above its bound of {bound:,}: a model that "
                    f"large is no benchmark on any machine; give {name} of at most {bound:,}"
                )

    def parameter_count(self, hyperparameters: Hyperparameters | None = None) -> int | None:
        """Trainable parameters, counted on the meta device so that no memory is allocated; None for a workload
        that is not a torch model. ModelTooLarge past `size_bounds` (checked first) or MAX_PARAMETERS: whatever
        builds a model calls this first."""
        hyperparameters = hyperparameters or self.defaults
        self.check_size_bounds(hyperparameters)
        if self.trainer is not None:
            self.build_model(hyperparameters)  # still refuses values it cannot build with
            return None
        with torch.device("meta"):
            model = self.build_model(hyperparameters)
        count = sum(parameter.numel() for parameter in model.parameters() if parameter.requires_grad)
        if count > MAX_PARAMETERS and self.load_data is None:  # a user's own model is already built: theirs
            raise ModelTooLarge(
                f"{self.name}: {count:,} parameters with "
                f"{_size_settings(self, hyperparameters)}, above the bound of {MAX_PARAMETERS:,}"
            )
        return count


def _size_settings(workload: Workload, hyperparameters: Hyperparameters) -> str:
    """The hyperparameters that differ from the workload's defaults, as "name=value ...", for messages."""
    changed = [
        f"{name}={value!r}"
        for name, value in hyperparameters.items()
        if workload.defaults.get(name) != value and name not in ("batch_size", "epochs")
    ]
    return " ".join(changed) or "its default settings"


_REGISTRY: dict[str, Workload] = {}
_OWN: dict[str, Workload] = {}  # users' own models, for this session: looked up by name, never in a suite
# modules under devicebench.workloads, one family each
_FAMILIES = ("mnist", "cifar_mlp", "cifar_cnn", "catdog", "text", "gbdt", "imagenet", "language", "translation")
_plugins_loaded = False
_plugin_problems: dict[str, str] = {}  # entry point → why it could not be loaded
_registering_for = "devicebench"  # the origin that workloads registered now get (a plugin's, while it loads)


def workload(
    *,
    name: str,
    dataset: str,
    summary: str,
    defaults: Hyperparameters,
    seed: str | None = None,
    published: Published | None = None,
    loss: LossBuilder | None = None,
    optimizer: OptimizerBuilder | None = None,
    image_shape: tuple[int, int, int] | None = None,
    output: OutputKind = "logits",
    preprocessing: PreprocessingBuilder | None = None,
    data_options: DataOptions | None = None,
    trainer: Trainer | None = None,
    requires: Callable[[], str | None] | None = None,
    quick: QuickSettings = QuickSettings(),
    size_bounds: Mapping[str, int] | None = None,
    in_suites: bool = True,
    tokens_per_sample: TokensPerSample | None = None,
    budget_lengths: tuple[str, ...] = (),
) -> Callable[[ModelBuilder], ModelBuilder]:
    """Register the decorated model builder as a workload named `name` (how a plugin adds one: see PLUGIN_GROUP).

    `seed` is the SEEDS.md experiment it reproduces (S1…S5), or None; `published` the figures that experiment
    published. `dataset` names one devicebench knows (`devicebench.data.known_datasets()`).
    """
    _check_declaration(name, seed, defaults, trainer, loss, optimizer, budget_lengths, size_bounds or {})
    declared = partial(
        Workload,
        name=name,
        seed=seed,
        dataset=dataset,
        summary=summary,
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
        size_bounds=MappingProxyType(dict(size_bounds or {})),
        in_suites=in_suites,
        tokens_per_sample=tokens_per_sample,
        budget_lengths=budget_lengths,
    )

    def register(build_model: ModelBuilder) -> ModelBuilder:
        _add(declared(build_model=build_model, origin=_registering_for))
        return build_model

    return register


def _check_declaration(
    name: str,
    seed: str | None,
    defaults: Hyperparameters,
    trainer: Trainer | None,
    loss: LossBuilder | None,
    optimizer: OptimizerBuilder | None,
    budget_lengths: tuple[str, ...],
    size_bounds: Mapping[str, int],
) -> None:
    """Refuse a workload declared with what the engine could not run or the command line could not find, before
    anything is registered: a ValueError naming the workload and what is wrong."""
    if name != name.lower() or not name:
        raise ValueError(f"workload {name!r}: names are lower case, as the command line finds them")
    if seed is not None and seed not in SEED_EXPERIMENTS:
        raise ValueError(f"workload {name!r}: unknown seed experiment {seed!r}; known: {', '.join(SEED_EXPERIMENTS)}")
    if trainer is None and (loss is None or optimizer is None):
        raise ValueError(f"workload {name!r}: a torch model needs a loss and an optimizer")
    missing = ({"epochs"} | ({"batch_size"} if trainer is None else set())) - set(defaults)
    if missing:
        raise ValueError(f"workload {name!r}: defaults lack {', '.join(sorted(missing))}")
    if set(budget_lengths) - set(defaults):
        raise ValueError(f"workload {name!r}: budget_lengths names a parameter not in its defaults")
    unbounded = set(size_bounds) - set(defaults)
    if unbounded:
        raise ValueError(f"workload {name!r}: size_bounds names {', '.join(sorted(unbounded))}, not in its defaults")


def _add(entry: Workload) -> None:
    """Put a declared workload in the registry; its name must be new (results are kept by name)."""
    if entry.name in _REGISTRY:
        raise ValueError(
            f"workload {entry.name!r} is registered twice (by {_REGISTRY[entry.name].origin} and {entry.origin})"
        )
    _REGISTRY[entry.name] = entry


def _load_families() -> None:
    for family in _FAMILIES:
        importlib.import_module(f"{__package__}.{family}")
    _load_plugins()


def _load_plugins() -> None:
    """Import every installed plugin's module once. One that fails is left out and remembered, with why, for
    `plugin_problems`: a broken plugin must not stop devicebench or the other plugins."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry_point in entry_points(group=PLUGIN_GROUP):
        source = entry_point.dist.name if entry_point.dist is not None else entry_point.value
        before = dict(_REGISTRY)
        try:
            with _registering(source):
                entry_point.load()
        except Exception as error:  # whatever a third party's import raises, it is reported, not raised
            for added in set(_REGISTRY) - set(before):  # half a plugin is worse than none
                del _REGISTRY[added]
            _plugin_problems[f"{entry_point.name} ({entry_point.value})"] = f"{type(error).__name__}: {error}"
            logging.getLogger(__name__).warning("plugin %s could not be loaded: %s", entry_point.value, error)


@contextlib.contextmanager
def _registering(origin: str) -> Iterator[None]:
    global _registering_for
    _registering_for = origin
    try:
        yield
    finally:
        _registering_for = "devicebench"


def plugin_problems() -> dict[str, str]:
    """Installed plugins that could not be loaded (entry point → the error): their workloads are left out."""
    _load_families()
    return dict(_plugin_problems)


def list_workloads(pattern: str = "*") -> list[Workload]:
    """Workloads whose name matches the shell-style `pattern` ("mnist-*", "*mlp"), in registration order:
    devicebench's, then the plugins'. Users' own models are not listed."""
    _load_families()
    return [entry for name, entry in _REGISTRY.items() if fnmatch.fnmatchcase(name, pattern.lower())]


def get_workload(name: str) -> Workload:
    """The workload called `name` (a registered one, or a user's own model of this session); an unknown name
    raises KeyError listing the known ones."""
    _load_families()
    found = _REGISTRY.get(name.lower()) or _OWN.get(name)
    if found is None:
        known = ", ".join(_REGISTRY)
        raise KeyError(f"unknown workload {name!r}; known workloads: {known} (see `devicebench list`)")
    return found


def register_own(own: Workload) -> None:
    """Make a user's own model findable by its name for the rest of this session (it replaces an earlier own
    model of that name). Its name must not be a registered workload's: results are kept by name."""
    _load_families()
    if own.name.lower() in _REGISTRY:
        raise ValueError(f"{own.name!r} is the name of a registered workload; give your model another name")
    _OWN[own.name] = own
