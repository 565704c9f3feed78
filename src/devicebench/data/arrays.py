"""The in-memory image dataset and the words every data module shares: where data comes from, what was asked, and
what the training loop draws batches from.

Kept apart from `devicebench.data` so that the readers (synthetic, images, text, tables) can build datasets
without importing the package that imports them.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import numpy as np

if TYPE_CHECKING:  # a type only: `devicebench data --help` and the readers load without torch
    import torch

DataSource = Literal["real", "synthetic"]
Batch = tuple["torch.Tensor", "torch.Tensor"]  # (model inputs, class indices or other targets), on the run's device


class Batches(Protocol):
    """What the training loop draws from: `len()` steps per full pass, each epoch in its own order."""

    batch_size: int
    workers: int
    resident: bool  # the data is held on the device

    def __len__(self) -> int: ...

    def batch_sizes(self, steps: int) -> list[int]: ...

    def epoch(self, epoch: int, steps: int | None = None) -> Generator[Batch, None, None]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, eq=False)
class ArrayDataset:
    """A whole image-classification dataset held in host memory.

    Images are uint8 in NCHW layout (scaled to [0, 1] only when a batch is formed, as the seeds did);
    labels are int64 class indices.
    """

    name: str  # "mnist", "cifar10", "cifar100"
    source: DataSource  # "real" or "synthetic": shown in every table and stored in every result
    train_images: np.ndarray  # uint8, (N, C, H, W)
    train_labels: np.ndarray  # int64, (N,)
    test_images: np.ndarray  # uint8, (M, C, H, W)
    test_labels: np.ndarray  # int64, (M,)
    num_classes: int
    origin: str = ""  # where the bytes came from: a file path, or the generator and its seed
    fallback_reason: str | None = None  # why "auto" gave synthetic data instead of real; None when it did not
    notes: tuple[str, ...] = ()  # things a user should be told: a synthetic stand-in smaller than the release

    def __post_init__(self) -> None:
        for split, images, labels in (
            ("train", self.train_images, self.train_labels),
            ("test", self.test_images, self.test_labels),
        ):
            if images.dtype != np.uint8 or images.ndim != 4:
                raise ValueError(f"{self.name} {split} images must be uint8 NCHW, got {images.dtype} {images.shape}")
            if labels.shape != (images.shape[0],):
                raise ValueError(f"{self.name} {split}: {images.shape[0]} images but labels of shape {labels.shape}")

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_images.shape[1:])

    def __repr__(self) -> str:
        return (
            f"ArrayDataset({self.name!r}, source={self.source!r}, train={len(self.train_labels)}, "
            f"test={len(self.test_labels)}, image_shape={self.image_shape}, classes={self.num_classes}"
            + (f", fallback_reason={self.fallback_reason!r})" if self.fallback_reason else ")")
        )
