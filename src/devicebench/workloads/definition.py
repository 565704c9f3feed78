"""A workload's definition in 12 hex digits: what every run records so that runs of a changed model, loss,
optimizer or preprocessing are never pooled with the old ones under the same name (results/pooling.py).

The fingerprint is a SHA-256 of what the definition does, not of its source text, so that it changes exactly when
the definition changes and not when a comment or a name inside it does:
- the model built with the workload's defaults: its module tree (each module's class, its plain settings such as
  a kernel size or an epsilon, every parameter's and buffer's shape and dtype) and how its tensors were
  initialised: each `torch.nn.init` call (its name, the tensor's shape and its arguments: `trunc_normal_(std=0.1)`)
  and each in-place write outside one (`weight.data.normal_(0, 0.02)`, `running_var.fill_(1)`, `weight.mul_(2)`),
  in the order the build made them. Not the initial values: torch 2.11 and 2.13 draw different numbers for the
  same seed (`trunc_normal_` changed), so the values' statistics differed between the two for 5 of the 13 seed
  workloads, and runs of one model under two torch versions could no longer be set against each other. A tensor no recorded
  call touched (made by `torch.randn` inside a constructor) is summarised by its mean and deviation under a fixed
  seed, to 3 significant digits, as every tensor was before;
- the defaults themselves (hyperparameters), the output kind, the dataset and the image shape;
- the loss and the optimizer: their classes and settings (a label smoothing, a momentum, a weight decay);
- the preprocessing: its kind and fields, and the statistics of what it makes of a fixed image batch for
  testing, so that a changed normalisation shows even where no field changed.
What a run sets on top of the definition (batch size, --set values) is recorded in its settings and splits rows
there. What no fingerprint sees: a change to a model's forward() that adds no module and no parameter.

    python -c "from devicebench.workloads import get_workload; from devicebench.workloads.definition import definition_fingerprint as f; print(f(get_workload('mnist-cnn2')))"
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from devicebench.data.augmentation import Preprocessing, describe
from devicebench.workloads._registry import Workload

FINGERPRINT_DIGITS = 12  # hex digits of the SHA-256 kept: enough that two definitions never share one by chance
SIGNIFICANT_DIGITS = 3  # of each initial tensor's mean and deviation: coarse enough for every machine's kernels
DEFINITION_SEED = 0  # the initial weights the fingerprint reads; the global random state is left as it was
PROBE_IMAGES = 2  # images of the fixed batch the preprocessing is tried on
PLAIN = (bool, int, float, str, type(None), tuple)  # the attribute values a definition records as they are
INIT_FUNCTIONS = (  # torch.nn.init's public functions that fill a tensor
    "uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
    "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_",
)  # fmt: skip
TENSOR_WRITES = frozenset(  # the in-place tensor methods that set or rescale a tensor's values
    (
        *("uniform_", "normal_", "fill_", "zero_", "random_", "bernoulli_", "exponential_", "log_normal_", "cauchy_"),
        *("mul_", "div_", "add_", "sub_", "clamp_", "copy_", "masked_fill_", "fill_diagonal_"),
    )
)


@functools.cache  # a Workload is hashed by identity: once per workload and session
def definition_fingerprint(workload: Workload) -> str | None:
    """The workload's definition as 12 hex digits; None where it cannot be built here (a missing extra): such a
    run records no definition, as runs stored before definitions were recorded."""
    try:
        described = describe_definition(workload)
    except Exception as error:  # a fingerprint is a record, never a reason for a run to fail
        logging.getLogger(__name__).info(
            "no definition fingerprint for %s: %s", workload.name, error
        )  # its run says why
        return None
    return fingerprint_of(described)


def fingerprint_of(described: dict[str, Any]) -> str:
    """The fingerprint of what `describe_definition` made."""
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_DIGITS]


def describe_definition(workload: Workload) -> dict[str, Any]:
    """What the fingerprint hashes, as plain data (a test compares two of them to see what changed)."""
    defaults = dict(workload.defaults)
    with torch.random.fork_rng(devices=[]):  # the fixed seed stays in here; the caller's random state is untouched
        torch.manual_seed(DEFINITION_SEED)
        with _Initialisations() as initialisations:
            model = workload.build_model(defaults)
        preprocessing = workload.build_preprocessing(defaults)
        return {
            "hyperparameters": defaults,
            "dataset": workload.dataset,
            "output": workload.output,
            "image_shape": workload.image_shape,
            "trainer": workload.trainer,
            "train_step": _qualified_name(workload.train_step) if workload.train_step is not None else None,
            "model": (
                _module_tree(model, initialisations.touched)
                if isinstance(model, nn.Module)
                else _qualified_name(type(model))
            ),
            "initialisation": initialisations.calls,
            "loss": _settings_of(workload.build_loss()) if workload.build_loss is not None else None,
            "optimizer": _optimizer_settings(workload, model, defaults),
            "preprocessing": {
                "described": describe(preprocessing),
                "makes": _preprocessing_output(workload, preprocessing),
            },
        }


def _module_tree(model: nn.Module, touched: set[int]) -> list[list[Any]]:
    """Each module by its place in the tree: its class, its plain settings, and its own tensors' shapes (with the
    initial statistics of those no recorded initialisation touched)."""
    return [
        [
            name,
            _qualified_name(type(module)),
            _plain_settings(module),
            [_tensor_summary(tensor_name, tensor, touched) for tensor_name, tensor in _own_tensors(module)],
        ]
        for name, module in model.named_modules()
    ]


def _plain_settings(module: nn.Module) -> dict[str, Any]:
    """A module's public settings of plain types (a kernel size, an epsilon): read from its attributes, not from
    `extra_repr`, whose wording changes between torch versions (2.13's LayerNorm adds `bias=True`)."""
    return _plain_attributes(module, (*PLAIN, list), leave_out="training")


def _plain_attributes(thing: Any, kinds: tuple[type, ...], leave_out: str = "") -> dict[str, Any]:
    """`thing`'s public attributes whose values are of `kinds`, by name."""
    return {
        key: value
        for key, value in sorted(vars(thing).items())
        if not key.startswith("_") and key != leave_out and isinstance(value, kinds)
    }


def _own_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]


def _tensor_summary(name: str, tensor: torch.Tensor, touched: set[int]) -> list[Any]:
    summary: list[Any] = [name, list(tensor.shape), str(tensor.dtype)]
    if (
        _storage(tensor) not in touched
        and tensor.device.type != "meta"
        and tensor.numel()
        and (tensor.is_floating_point() or tensor.is_complex())
    ):
        values = tensor.detach().float()  # float64 would double a large model's memory
        deviation = values.std(correction=0).item() if values.numel() > 1 else 0.0
        summary += [_rounded(values.mean().item()), _rounded(deviation)]
    return summary


def _storage(tensor: torch.Tensor) -> int:
    """What identifies a tensor's memory: the same for a parameter and its `.data`."""
    return tensor.untyped_storage().data_ptr() if tensor.device.type != "meta" else id(tensor)


class _Initialisations(TorchFunctionMode):
    """Records, while a model is built, each `torch.nn.init` call and each in-place write made outside one (a
    fill, a rescaling): their names, the tensors' shapes and their arguments, and which tensors they touched.

    The public functions of `torch.nn.init` are wrapped for the while (some, like `trunc_normal_`, are not
    visible to a torch-function mode, and what they do inside changes between torch versions); the mode sees the
    fills a model makes itself (`weight.data.normal_(0, 0.02)`). One process builds one model at a time here.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[list[Any]] = []
        self.touched: set[int] = set()
        self._inside = 0  # > 0 within a recorded nn.init call: what it does inside is its own business

    def __enter__(self) -> _Initialisations:
        self._originals = {name: getattr(nn.init, name) for name in INIT_FUNCTIONS if hasattr(nn.init, name)}
        for name, original in self._originals.items():
            setattr(nn.init, name, functools.partial(self._recorded, name, original))
        return super().__enter__()

    def __exit__(self, *exception: object) -> None:
        super().__exit__(*exception)
        for name, original in self._originals.items():
            setattr(nn.init, name, original)

    def _recorded(
        self, name: str, original: Callable[..., Any], tensor: torch.Tensor, *args: Any, **kwargs: Any
    ) -> Any:
        self._record(f"nn.init.{name}", tensor, args, kwargs)
        self._inside += 1
        try:
            return original(tensor, *args, **kwargs)
        finally:
            self._inside -= 1

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in TENSOR_WRITES and args and isinstance(args[0], torch.Tensor):
            self._record(name, args[0], args[1:], kwargs)
        return func(*args, **kwargs)

    def _record(self, name: str, tensor: torch.Tensor, args: Any, kwargs: dict[str, Any]) -> None:
        if self._inside:
            return
        self.touched.add(_storage(tensor))
        arguments = {key: _argument(value) for key, value in sorted(kwargs.items()) if key != "generator"}
        self.calls.append([name, list(tensor.shape), [_argument(value) for value in args], arguments])


def _argument(value: Any) -> Any:
    """An initialisation's argument as plain data: a number to 6 significant digits, a tensor by its shape."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, torch.Tensor):
        return ["tensor", list(value.shape)]
    if isinstance(value, (bool, int, str, type(None))):
        return value
    return _qualified_name(type(value))


def _rounded(value: float) -> str:
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


def _settings_of(thing: Any) -> dict[str, Any] | None:
    """A loss's class and its plain settings (reduction, label smoothing, ignored index...)."""
    if thing is None:
        return None
    return {"class": _qualified_name(type(thing)), **_plain_attributes(thing, PLAIN)}


def _optimizer_settings(workload: Workload, model: Any, defaults: dict[str, Any]) -> dict[str, Any] | None:
    if workload.build_optimizer is None or not isinstance(model, nn.Module):
        return None
    optimizer = workload.build_optimizer(model, defaults)
    groups = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    return {"class": _qualified_name(type(optimizer)), "groups": groups}


def _preprocessing_output(workload: Workload, preprocessing: Preprocessing) -> list[str] | None:
    """The mean and deviation of what the preprocessing makes of a fixed batch of images for testing, to 3
    decimal places; None for a workload whose inputs are not images.

    Not the training path: its augmentation draws random numbers, which another torch draws differently (its
    fields describe it). Not significant digits: a standardised batch's mean is 0 give or take 1e-8, whose digits
    differ with the CPU's vector width."""
    if workload.image_shape is None or workload.load_data is not None:
        return None
    pixels = PROBE_IMAGES * workload.image_shape[0] * workload.image_shape[1] * workload.image_shape[2]
    images = (torch.arange(pixels) * 7919 % 256).to(torch.uint8).reshape(PROBE_IMAGES, *workload.image_shape)
    made = preprocessing.test(images).float()
    return [f"{round(value, 3) + 0.0:.3f}" for value in (made.mean().item(), made.std().item())]  # no "-0.000"


def _qualified_name(thing: Any) -> str:
    return f"{getattr(thing, '__module__', '?')}.{getattr(thing, '__qualname__', type(thing).__name__)}"
