"""A workload's definition in 12 hex digits: what every run records so that runs of a changed model, loss,
optimizer or preprocessing are never pooled with the old ones under the same name (results/pooling.py).

The fingerprint is a SHA-256 of what the definition does, not of its source text, so that it changes exactly when
the definition changes and not when a comment or a name inside it does:
- the model built with the workload's defaults: its module tree (class, `extra_repr`, every parameter's and
  buffer's shape and dtype) and, for a torch model, each tensor's initial mean and standard deviation under a fixed
  seed, to 3 significant digits: a change of initialisation moves them, and rounding keeps them the same on
  machines whose random-number kernels differ in the last bits;
- the defaults themselves (hyperparameters), the output kind, the dataset and the image shape;
- the loss and the optimizer: their classes and settings (a label smoothing, a momentum, a weight decay);
- the preprocessing: its kind and fields, and the statistics of what it makes of a fixed image batch, so that a
  changed normalisation shows even where no field changed.
What a run sets on top of the definition (batch size, --set values) is recorded in its settings and splits rows
there. What no fingerprint sees: a change to a model's forward() that adds no module and no parameter.

    python -c "from devicebench.workloads import get_workload; from devicebench.workloads.definition import definition_fingerprint as f; print(f(get_workload('mnist-cnn2')))"
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from typing import Any

import torch
from torch import nn

from devicebench.data.augmentation import describe
from devicebench.workloads._registry import Workload

FINGERPRINT_DIGITS = 12  # hex digits of the SHA-256 kept: enough that two definitions never share one by chance
SIGNIFICANT_DIGITS = 3  # of each initial tensor's mean and deviation: coarse enough for every machine's kernels
DEFINITION_SEED = 0  # the initial weights the fingerprint reads; the global random state is left as it was
PROBE_IMAGES = 2  # images of the fixed batch the preprocessing is tried on


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
    text = json.dumps(described, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:FINGERPRINT_DIGITS]


def describe_definition(workload: Workload) -> dict[str, Any]:
    """What the fingerprint hashes, as plain data (a test compares two of them to see what changed)."""
    defaults = dict(workload.defaults)
    with torch.random.fork_rng(devices=[]):  # the fixed seed stays in here; the caller's random state is untouched
        torch.manual_seed(DEFINITION_SEED)
        model = workload.build_model(defaults)
        preprocessing = workload.build_preprocessing(defaults)
        return {
            "hyperparameters": defaults,
            "dataset": workload.dataset,
            "output": workload.output,
            "image_shape": workload.image_shape,
            "trainer": workload.trainer,
            "train_step": _qualified_name(workload.train_step) if workload.train_step is not None else None,
            "model": _module_tree(model) if isinstance(model, nn.Module) else _qualified_name(type(model)),
            "loss": _settings_of(workload.build_loss()) if workload.build_loss is not None else None,
            "optimizer": _optimizer_settings(workload, model, defaults),
            "preprocessing": {"described": describe(preprocessing), "makes": _preprocessing_output(workload)},
        }


def _module_tree(model: nn.Module) -> list[list[Any]]:
    """Each module by its place in the tree: its class, its settings, and its own tensors' shapes and initial
    statistics."""
    return [
        [
            name,
            _qualified_name(type(module)),
            module.extra_repr(),
            [_tensor_summary(tensor_name, tensor) for tensor_name, tensor in _own_tensors(module)],
        ]
        for name, module in model.named_modules()
    ]


def _own_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [*module.named_parameters(recurse=False), *module.named_buffers(recurse=False)]


def _tensor_summary(name: str, tensor: torch.Tensor) -> list[Any]:
    summary: list[Any] = [name, list(tensor.shape), str(tensor.dtype)]
    if tensor.device.type != "meta" and tensor.numel() and (tensor.is_floating_point() or tensor.is_complex()):
        values = tensor.detach().float()  # float64 would double a large model's memory
        deviation = values.std(correction=0).item() if values.numel() > 1 else 0.0
        summary += [_rounded(values.mean().item()), _rounded(deviation)]
    return summary


def _rounded(value: float) -> str:
    return f"{value:.{SIGNIFICANT_DIGITS}g}"


def _settings_of(thing: Any) -> dict[str, Any] | None:
    """A loss's class and its plain settings (reduction, label smoothing, ignored index...)."""
    if thing is None:
        return None
    plain = (bool, int, float, str, type(None), tuple)
    return {
        "class": _qualified_name(type(thing)),
        **{
            key: value
            for key, value in sorted(vars(thing).items())
            if not key.startswith("_") and isinstance(value, plain)
        },
    }


def _optimizer_settings(workload: Workload, model: Any, defaults: dict[str, Any]) -> dict[str, Any] | None:
    if workload.build_optimizer is None or not isinstance(model, nn.Module):
        return None
    optimizer = workload.build_optimizer(model, defaults)
    groups = [{key: value for key, value in group.items() if key != "params"} for group in optimizer.param_groups]
    return {"class": _qualified_name(type(optimizer)), "groups": groups}


def _preprocessing_output(workload: Workload) -> list[str] | None:
    """The mean and deviation of what the preprocessing makes of a fixed batch of images, for training (with a
    fixed generator) and for testing; None for a workload whose inputs are not images."""
    if workload.image_shape is None or workload.load_data is not None:
        return None
    preprocessing = workload.build_preprocessing(workload.defaults)
    pixels = PROBE_IMAGES * workload.image_shape[0] * workload.image_shape[1] * workload.image_shape[2]
    images = (torch.arange(pixels) * 7919 % 256).to(torch.uint8).reshape(PROBE_IMAGES, *workload.image_shape)
    generator = torch.Generator().manual_seed(DEFINITION_SEED)
    made = [preprocessing.train(images, generator), preprocessing.test(images)]
    return [_rounded(value) for output in made for value in (output.float().mean().item(), output.float().std().item())]


def _qualified_name(thing: Any) -> str:
    return f"{getattr(thing, '__module__', '?')}.{getattr(thing, '__qualname__', type(thing).__name__)}"
