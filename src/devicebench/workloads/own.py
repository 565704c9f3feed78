"""Your own model as a workload: a model, your data, a loss and an optimizer, trained by the same engine as the
seeds, so its numbers mean what theirs mean.

From Python, `devicebench.run(model=..., data=...)` (api.py) hands the objects over; from the command line,
`devicebench run --model mypkg.models:build --data mypkg.data:load` names them as MODULE:FUNCTION, imported
from the current folder or the installed packages (`resolve`). Either way the model becomes a `Workload` of
origin "your model", registered for the session under its name: every table, the store and the report treat
it as they treat a seed's.

    python examples/own_model.py
"""

from __future__ import annotations

import copy
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from devicebench.data.augmentation import Unchanged
from devicebench.data.own import as_own_data
from devicebench.workloads import (
    Hyperparameters,
    LossBuilder,
    OutputKind,
    TrainStep,
    Workload,
    register_own,
)
from devicebench.workloads.outputs import BinaryCrossEntropy

# Losses by name, with what the model's outputs then mean (for the accuracy).
LOSSES: dict[str, tuple[Callable[[], nn.Module], OutputKind]] = {
    "cross_entropy": (nn.CrossEntropyLoss, "logits"),  # outputs (N, classes), targets class indices
    "binary_cross_entropy": (BinaryCrossEntropy, "binary_logit"),  # outputs (N, 1) logits, targets 0 or 1
    "mse": (nn.MSELoss, "values"),  # a regression: no accuracy
    "l1": (nn.L1Loss, "values"),
}
# Optimizers by name: each class is called with (the model's parameters, lr=the learning rate); typed as a
# callable because torch.optim.Optimizer's own constructor takes no lr
OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
    "sgd": torch.optim.SGD,
}
DEFAULTS = {"batch_size": 32, "epochs": 3}  # samples per step; epochs, the first of them warm-up
DEFAULT_LEARNING_RATE = 1e-3  # of a named optimizer; `--set learning_rate=…` changes it
ORIGIN = "your model"

ModelSource = nn.Module | Callable[[], nn.Module]  # a model, copied for every run, or a function that builds one
# a name, a loss module or its class, or a function (outputs, targets) → loss; None beside a train_step of your own
LossSource = str | nn.Module | type[nn.Module] | Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None
OptimizerSource = str | Callable[[Any], torch.optim.Optimizer]  # a name, or a function (or class) of the parameters


class OwnModelError(ValueError):
    """A user's model, data, loss or optimizer that cannot be used; the message says which and what to do."""


def own_workload(
    model: ModelSource,
    data: Any,
    *,
    loss: LossSource = "cross_entropy",
    optimizer: OptimizerSource = "adam",
    train_step: TrainStep | None = None,
    output: OutputKind | None = None,
    name: str | None = None,
    source: str = "model",
    optimizer_source: str = "the optimizer function",
    loss_flag: str = "loss=",
) -> Workload:
    """A workload of your model on your data, registered for this session under `name` (default: the model's
    class name). `source` and `optimizer_source` name where `model` and `optimizer` came from, for the errors;
    `loss_flag` how the loss was asked for ("loss=" from Python, "--loss " from the command line).

    `output` says what the model's outputs mean, for the accuracy; by default a named loss says it, and any
    other loss counts no accuracy ("values").
    """
    own_data = as_own_data(data)
    build_model = _model_builder(model, source)
    with torch.device("meta"):  # fails now, not after the first device's data is loaded; and takes no memory
        built = _checked_model(build_model({}), source)
    loss_builder, loss_output = _loss_builder(loss, train_step)
    if train_step is None:
        _check_loss(built, own_data, loss_builder(), loss_flag, loss)
    defaults = dict(DEFAULTS) | ({"learning_rate": DEFAULT_LEARNING_RATE} if isinstance(optimizer, str) else {})
    build_optimizer = _optimizer_builder(optimizer, optimizer_source)
    with torch.device("meta"):
        build_optimizer(built, defaults)  # a function that returns no optimizer fails now
    own = Workload(
        name=name or type(built).__name__,
        seed=None,
        dataset=own_data.name,
        summary=f"{type(built).__name__} ({ORIGIN}), {own_data.origin}",
        build_model=build_model,
        defaults=defaults,
        build_loss=loss_builder,
        build_optimizer=build_optimizer,
        output=output or loss_output,
        build_preprocessing=lambda hyperparameters: Unchanged(),  # your tensors are the model's inputs, unscaled
        load_data=lambda: own_data,
        train_step=train_step,
        origin=ORIGIN,
    )
    register_own(own)
    return own


def own_workload_from_specs(model: str, data: str, loss: str, optimizer: str) -> Workload:
    """`devicebench run --model M --data D --loss L --optimizer O`: each a MODULE:FUNCTION (loss and optimizer
    also a name of LOSSES or OPTIMIZERS), imported and checked, as a workload named after the model's spec."""
    loaded = _called(resolve(data, "--data"), f"--data {data}", "loading the data")
    try:
        own_data = as_own_data(loaded, f"--data {data} returned")
    except (TypeError, ValueError) as error:
        raise OwnModelError(str(error)) from None
    loss_source, optimizer_source = (
        _named_or_resolved(loss, LOSSES, "--loss"),
        _named_or_resolved(optimizer, OPTIMIZERS, "--optimizer"),
    )
    return own_workload(
        resolve(model, "--model"),
        own_data,
        loss=loss_source,
        optimizer=optimizer_source,
        name=model,
        source=f"--model {model}",
        optimizer_source=f"--optimizer {optimizer}",
        loss_flag="--loss ",
    )


def _named_or_resolved(spec: str, names: dict, flag: str) -> Any:
    """One of `names` as given, or the object a MODULE:NAME spec names."""
    if spec in names:
        return spec
    if ":" not in spec:
        raise OwnModelError(f"unknown {flag} {spec!r}; choose one of {', '.join(names)}, or MODULE:NAME of your own")
    return resolve(spec, flag)


def resolve(spec: str, flag: str) -> Any:
    """The object `spec` (MODULE:ATTRIBUTE) names, imported from the current folder or the installed packages."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise OwnModelError(f"{flag} {spec!r}: write MODULE:FUNCTION, e.g. {flag} mypkg.models:build")
    if os.getcwd() not in sys.path:  # as `python -m` does: the folder you run in holds your modules
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            raise OwnModelError(
                f"{flag} {spec}: there is no module {error.name!r} in {os.getcwd()} or the installed "
                "packages; run from the folder that holds it, or pip install its package"
            ) from None
        raise OwnModelError(f"{flag} {spec}: importing {module_name} failed: {error}") from None
    except Exception as error:  # the user's module raised while importing
        raise OwnModelError(f"{flag} {spec}: importing {module_name} failed: {type(error).__name__}: {error}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # sys.exit() at the top of a script: a bad request, not devicebench's own exit
        raise OwnModelError(
            f"{flag} {spec}: your module {module_name} raised {_described(error)} while being "
            "imported; devicebench stopped"
        ) from None
    found: Any = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            public = sorted(name for name in vars(module) if not name.startswith("_") and callable(vars(module)[name]))
            raise OwnModelError(
                f"{flag} {spec}: {module_name} has no {attribute!r}; its functions and classes: "
                f"{', '.join(public) or 'none'}"
            )
        found = getattr(found, part)
    return found


def _called(function: Any, what: str, doing: str, *arguments: Any) -> Any:
    """What `function(*arguments)` returns, or an OwnModelError saying what went wrong in it; `doing` says what
    the call was for ("building the model"). Even sys.exit() in it is the user's code failing, not devicebench
    exiting; only Ctrl-C passes through."""
    if not callable(function):
        raise OwnModelError(f"{what} is a {type(function).__name__}, not a function to call")
    try:
        return function(*arguments)
    except Exception as error:
        raise OwnModelError(f"{what} raised {type(error).__name__}: {error}") from None
    except KeyboardInterrupt:
        raise
    except BaseException as error:
        raise OwnModelError(f"{what} raised {_described(error)} while {doing}; devicebench stopped") from None


def _described(error: BaseException) -> str:
    """SystemExit(3), or GeneratorExit: its message."""
    if isinstance(error, SystemExit):
        return f"SystemExit({error.code!r})"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__


def _model_builder(model: ModelSource, source: str) -> Callable[[Hyperparameters], nn.Module]:
    """Builds a fresh model for every run: the factory called, or the given model copied (same initial weights)."""
    if isinstance(model, nn.Module):
        return lambda hyperparameters: copy.deepcopy(model)
    if not callable(model):
        raise OwnModelError(
            f"{source} is a {type(model).__name__}: give a torch.nn.Module, or a function that builds one"
        )
    return lambda hyperparameters: _called(model, source, "building the model")


def _checked_model(model: Any, source: str) -> nn.Module:
    if not isinstance(model, nn.Module):
        raise OwnModelError(f"{source} returned a {type(model).__name__}; it must return a torch.nn.Module")
    if not any(parameter.requires_grad for parameter in model.parameters()):
        raise OwnModelError(
            f"{source} built a {type(model).__name__} without trainable parameters: there is nothing to train"
        )
    return model


class _LossFunction(nn.Module):
    """A plain function (outputs, targets) → loss, as the module the engine moves to the device."""

    def __init__(self, function: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.function = function

    def forward(self, outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return self.function(outputs, targets)


def _loss_builder(loss: LossSource, train_step: TrainStep | None) -> tuple[LossBuilder, OutputKind]:
    if loss is None:
        if train_step is None:
            raise OwnModelError("loss=None needs a train_step of your own that computes the loss")
        return (lambda: None), "values"
    if isinstance(loss, str):
        if loss not in LOSSES:
            raise OwnModelError(
                f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}, or give a function "
                "(outputs, targets) → loss"
            )
        return LOSSES[loss]
    if isinstance(loss, type):
        if issubclass(loss, nn.Module):  # a loss class, such as nn.SmoothL1Loss
            return loss, _output_of(loss)
        raise OwnModelError(  # called with (outputs, targets), it would make an instance of itself, not a loss
            f"loss is the class {loss.__name__}, not a torch.nn.Module: give an instance of it "
            f"(loss={loss.__name__}()), a torch loss module or a function (outputs, targets) → loss"
        )
    if isinstance(loss, nn.Module):
        return (lambda: copy.deepcopy(loss)), _output_of(type(loss))
    if callable(loss):
        return (lambda: _LossFunction(loss)), "values"
    raise OwnModelError(
        f"loss is a {type(loss).__name__}: give a name ({', '.join(LOSSES)}), a torch loss module "
        "or a function (outputs, targets) → loss"
    )


CHECKED_BATCH = 2  # samples the loss is tried on: a batch dimension that cannot be mistaken for a class count of 1
# Losses that compare each output with a target of its own: the targets must be floats shaped like the outputs
ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss)


def _loss_setting(flag: str, loss: LossSource) -> str:
    """How a message names the loss and its fix: `--loss mse` from the command line, `loss='mse'` from Python."""
    shown = loss if isinstance(loss, str) else getattr(loss, "__name__", type(loss).__name__)
    return f"{flag}{shown}" if flag.startswith("--") else f"{flag}{shown!r}"


def _check_loss(model: nn.Module, data: Any, loss: nn.Module | None, flag: str, source: LossSource) -> None:
    """Refuse a loss that cannot take the model's outputs and the data's targets, with what to change, before
    anything trains: otherwise the first step ends the run in a traceback. The model runs on the meta device (no
    memory, no arithmetic) on a batch shaped like the data's. A model the meta device cannot run, and a loss that
    is a function of your own (it may need real numbers), are left to the run itself."""
    if loss is None:
        return
    setting = _loss_setting(flag, source)
    inputs, targets = (part.to("meta").expand(CHECKED_BATCH, *part.shape[1:]) for part in data.example())
    try:
        with torch.device("meta"):
            outputs = model.to("meta")(inputs)  # a model given as an instance is a real copy: moved, not built
    except KeyboardInterrupt:
        raise
    except BaseException:  # an op with no meta kernel, inputs it does not take, an exit(): the run says which
        return
    if not isinstance(outputs, torch.Tensor):
        return
    problem = _elementwise_mismatch(loss, outputs, targets, setting, _loss_setting(flag, "cross_entropy"))
    if problem is None and isinstance(loss, (nn.modules.loss._Loss, BinaryCrossEntropy)):
        try:
            loss(outputs, targets).backward()
        except Exception as error:  # torch's own loss on meta tensors fails only for shapes or types
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            problem = (
                f"{setting} cannot take the model's outputs {_described_tensor(outputs)} and the targets "
                f"{_described_tensor(targets)}: {first_line}; give a loss that fits them, or make the data "
                "return targets that fit it"
            )
    if problem is not None:
        raise OwnModelError(problem)


def _elementwise_mismatch(
    loss: nn.Module, outputs: torch.Tensor, targets: torch.Tensor, setting: str, cross_entropy: str
) -> str | None:
    """Why an element-wise loss (MSE, L1) cannot take `targets` beside `outputs`, and the fix; None when it can.
    Torch would broadcast (N, 10) against (N,) without a word, or fail only in the backward pass on int64."""
    if not isinstance(loss, ELEMENTWISE_LOSSES):
        return None
    if targets.shape == outputs.shape and targets.is_floating_point():
        return None
    wanted = _shape_text(outputs)
    classes = not targets.is_floating_point() and targets.dim() == 1 and outputs.dim() == 2
    have = f"class indices {_shape_text(targets)}" if classes else _described_tensor(targets)
    fix = (
        f"use {cross_entropy} for classes, or make the data return float targets shaped {wanted} (one-hot)"
        if classes
        else f"make the data return float targets shaped {wanted}, or a model whose outputs are shaped like the targets"
    )
    return f"{setting} needs float targets shaped like the model's outputs {wanted}, but the targets are {have}: {fix}"


def _shape_text(tensor: torch.Tensor) -> str:
    """(N, 10): the shape with the batch dimension as N."""
    return "(" + ", ".join(["N", *map(str, tensor.shape[1:])]) + ("," if tensor.dim() == 1 else "") + ")"


def _described_tensor(tensor: torch.Tensor) -> str:
    return f"{_shape_text(tensor)} {str(tensor.dtype).removeprefix('torch.')}"


def _output_of(loss_class: type[nn.Module]) -> OutputKind:
    """What a torch loss says about the outputs: a class per column (cross-entropy, NLL), or no classes."""
    return "logits" if issubclass(loss_class, (nn.CrossEntropyLoss, nn.NLLLoss)) else "values"


def _optimizer_builder(
    optimizer: OptimizerSource,
    source: str = "the optimizer function",
) -> Callable[[nn.Module, Hyperparameters], torch.optim.Optimizer]:
    if isinstance(optimizer, str):
        if optimizer not in OPTIMIZERS:
            raise OwnModelError(
                f"unknown optimizer {optimizer!r}; choose one of {', '.join(OPTIMIZERS)}, or give a "
                "function of the model's parameters that returns a torch optimizer"
            )
        kind = OPTIMIZERS[optimizer]
        return lambda model, hyperparameters: kind(model.parameters(), lr=hyperparameters["learning_rate"])
    if not callable(optimizer):
        raise OwnModelError(
            f"optimizer is a {type(optimizer).__name__}: give a name ({', '.join(OPTIMIZERS)}) or a "
            "function of the model's parameters"
        )

    def build(model: nn.Module, hyperparameters: Hyperparameters) -> torch.optim.Optimizer:
        made = _called(optimizer, source, "building the optimizer", model.parameters())
        if not isinstance(made, torch.optim.Optimizer):
            raise OwnModelError(
                f"{source} returned a {type(made).__name__}; it must return a "
                "torch.optim.Optimizer of the parameters it is given"
            )
        return made

    return build
