"""Your own data, for your own model: tensors in memory (`TensorData`) or torch Datasets (`TorchData`).

Both are whole datasets, a training split and an optional test split, that the engine batches exactly as it
batches the seeds' data: shuffled each epoch in an order that depends only on (seed, epoch), the last, partial
batch kept, every device drawing the same batches. Tensors go to the model as they are (no scaling: they are
yours); a Dataset's items are read by a DataLoader, in `workers` processes if asked.

    python -c "import torch, devicebench as db; print(db.TensorData(torch.randn(100, 8), torch.randint(0, 3, (100,))))"
"""

from __future__ import annotations

from collections.abc import Sized
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from torch.utils.data import Dataset, IterableDataset, Subset, default_collate

Example = tuple[torch.Tensor, torch.Tensor]  # one (input, label) batch of one sample, for counting FLOPs

ACCEPTED = (
    "a devicebench.TensorData(x_train, y_train, x_test, y_test), a tuple (x_train, y_train[, x_test, y_test]) of "
    "tensors or numpy arrays, a devicebench.TorchData(train, test), a torch Dataset, or a (train, test) pair of "
    "torch Datasets"
)


def _tensor(value: Any, what: str) -> torch.Tensor:
    """`value` as a CPU tensor; numpy's float64 becomes float32, the precision of the model's weights."""
    if isinstance(value, np.ndarray):
        value = torch.from_numpy(np.ascontiguousarray(value))
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{what} must be a torch tensor or a numpy array, got {type(value).__name__}")
    if value.dtype == torch.float64:
        value = value.float()
    return value.cpu()


@dataclass(frozen=True, eq=False)
class TensorData:
    """Inputs and labels held in memory: `x_*` of shape (N, ...) go to the model as they are, `y_*` are what the
    loss compares the outputs with (class indices for a classification loss). Without a test split the run
    trains only: no test loss or accuracy."""

    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    name: str = "your tensors"  # shown in tables and stored with every run
    source: str = field(default="real", init=False)  # your data is real data: never synthetic
    fallback_reason: None = field(default=None, init=False)

    def __post_init__(self) -> None:
        if (self.x_test is None) != (self.y_test is None):
            raise ValueError("give both x_test and y_test, or neither (then the run trains without evaluating)")
        x_train, y_train = _tensor(self.x_train, "x_train"), _tensor(self.y_train, "y_train")
        if self.x_test is None:
            x_test, y_test = x_train[:0], y_train[:0]
        else:
            x_test, y_test = _tensor(self.x_test, "x_test"), _tensor(self.y_test, "y_test")
        for split, inputs, labels in (("train", x_train, y_train), ("test", x_test, y_test)):
            if inputs.dim() == 0 or labels.dim() == 0 or len(inputs) != len(labels):
                raise ValueError(
                    f"x_{split} and y_{split} must hold one row per sample, got shapes "
                    f"{tuple(inputs.shape)} and {tuple(labels.shape)}"
                )
        if len(x_train) == 0:
            raise ValueError("x_train holds no samples: there is nothing to train on")
        for name, value in (("x_train", x_train), ("y_train", y_train), ("x_test", x_test), ("y_test", y_test)):
            object.__setattr__(self, name, value)

    @property
    def train_size(self) -> int:
        return len(self.y_train)

    @property
    def test_size(self) -> int:
        assert self.y_test is not None  # __post_init__ makes an empty test split where none was given
        return len(self.y_test)

    @property
    def num_classes(self) -> int | None:
        """Classes the labels name, when they are class indices; None for other targets (regression)."""
        if self.y_train.dtype != torch.int64 or self.y_train.dim() != 1:
            return None
        assert self.y_test is not None  # __post_init__ makes an empty test split where none was given
        return int(torch.cat([self.y_train, self.y_test]).max()) + 1

    @property
    def origin(self) -> str:
        shape = "x".join(str(size) for size in self.x_train.shape[1:]) or "scalar"
        return (
            f"{self.name}: {self.train_size:,} training and {self.test_size:,} test samples, inputs {shape} "
            f"{str(self.x_train.dtype).removeprefix('torch.')}"
        )

    def example(self) -> Example:
        return self.x_train[:1], self.y_train[:1]

    def __repr__(self) -> str:
        return f"TensorData({self.origin})"


@dataclass(frozen=True, eq=False)
class TorchData:
    """Map-style torch Datasets whose items are (input tensor, label): read by a DataLoader with the engine's
    own order and batch size, in `--workers` processes if asked. Without a test split the run trains only."""

    train: Dataset
    test: Dataset | None = None
    name: str = "your Dataset"
    source: str = field(default="real", init=False)
    fallback_reason: None = field(default=None, init=False)
    num_classes: None = field(default=None, init=False)  # not known without reading every label

    def __post_init__(self) -> None:
        for split in ("train", "test"):
            dataset = getattr(self, split)
            if dataset is None:
                continue
            if isinstance(dataset, IterableDataset) or not hasattr(dataset, "__len__"):
                raise TypeError(
                    f"the {split} Dataset must be map-style, with __len__ and __getitem__ (an "
                    f"IterableDataset cannot be shuffled the same way on every device)"
                )
        if length(self.train) == 0:
            raise ValueError("the training Dataset holds no samples: there is nothing to train on")
        if self.test is None:
            object.__setattr__(self, "test", Subset(self.train, []))
        item = self.train[0]
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            raise TypeError(
                f"each item of the Dataset must be an (input, label) pair, got {type(item).__name__}"
                + (f" of {len(item)}" if isinstance(item, (tuple, list)) else "")
            )

    @property
    def train_size(self) -> int:
        return length(self.train)

    @property
    def test_size(self) -> int:
        assert self.test is not None  # __post_init__ makes an empty test split where none was given
        return length(self.test)

    @property
    def origin(self) -> str:
        return f"{self.name}: {self.train_size:,} training and {self.test_size:,} test samples ({type(self.train).__name__})"

    def example(self) -> Example:
        return default_collate([self.train[0]])

    def __repr__(self) -> str:
        return f"TorchData({self.origin})"


OwnData = TensorData | TorchData


def as_own_data(value: Any, source: str = "data is") -> OwnData:
    """`value` in one of the forms ACCEPTED, as TensorData or TorchData; TypeError or ValueError starting with
    `source` (where the value came from: "data is", "--data mypkg.data:load returned") otherwise."""
    if isinstance(value, (TensorData, TorchData)):
        return value
    if isinstance(value, Dataset):
        return TorchData(value)
    if isinstance(value, (tuple, list)):
        if len(value) == 2 and all(isinstance(part, Dataset) for part in value):
            return TorchData(*value)
        if len(value) in (2, 4) and all(isinstance(part, (torch.Tensor, np.ndarray)) for part in value):
            return TensorData(*value)
    kind = type(value).__name__ + (f" of {len(value)}" if isinstance(value, (tuple, list)) else "")
    raise TypeError(f"{source} a {kind}; give {ACCEPTED}")


def length(dataset: Dataset) -> int:
    """The samples in a map-style Dataset: torch's Dataset declares no __len__, which TorchData checks it has."""
    return len(cast(Sized, dataset))
